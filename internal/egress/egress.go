// Package egress decides where the manager may connect on behalf of tools.
// Whoever may write a Tool chooses its URL, and the manager calls it from
// its own network position and stores the answer: without a policy, a
// tenant could read the cloud metadata service, the API server or other
// tenants' Services through it. The policy is applied at dial time, to the
// addresses a name resolved to, so that no name can be re-pointed between a
// check and the connection.
package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// Rule is a range of addresses refused unless allowed, and why.
type Rule struct {
	Prefix netip.Prefix
	// Name says what the range is, in the refusal's message.
	Name string
}

// Refused are the ranges no tool may reach unless a cluster admin allows
// them: where the cluster's own services, nodes, pods and metadata live,
// and what is not a unicast Internet address.
var Refused = []Rule{
	rule("0.0.0.0/8", "this-network range"),
	rule("10.0.0.0/8", "private range (RFC 1918)"),
	rule("100.64.0.0/10", "shared address space (RFC 6598)"),
	rule("127.0.0.0/8", "loopback range"),
	rule("169.254.0.0/16", "link-local range, where cloud metadata services listen"),
	rule("172.16.0.0/12", "private range (RFC 1918)"),
	rule("192.0.0.0/24", "IETF protocol assignments range"),
	rule("192.168.0.0/16", "private range (RFC 1918)"),
	rule("198.18.0.0/15", "benchmarking range"),
	rule("224.0.0.0/4", "multicast range"),
	rule("240.0.0.0/4", "reserved range"),
	rule("::/128", "unspecified address"),
	rule("::1/128", "loopback address"),
	rule("64:ff9b::/96", "IPv4/IPv6 translation range"),
	rule("64:ff9b:1::/48", "IPv4/IPv6 translation range"),
	rule("100::/64", "discard range"),
	rule("2001:db8::/32", "documentation range"),
	rule("2002::/16", "6to4 range"),
	rule("fc00::/7", "unique local range"),
	rule("fe80::/10", "link-local range"),
	rule("ff00::/8", "multicast range"),
}

func rule(cidr, name string) Rule {
	return Rule{Prefix: netip.MustParsePrefix(cidr), Name: name}
}

// Policy says which addresses tools may reach.
type Policy struct {
	// Allow are ranges a cluster admin opened although Refused covers
	// them (--egress-allow).
	Allow []netip.Prefix
	// Deny are ranges refused even where Allow covers them: the nodes' or
	// pods' part of an allowed private range, or cluster ranges outside
	// the refused ones (--egress-deny).
	Deny []netip.Prefix
	// Never are endpoints refused whatever Allow says: the manager's own
	// API server, which tools reach through kubernetesApply, with the
	// manager's rights narrowed, never through a URL.
	Never []netip.AddrPort
	// NeverName names Never in a refusal.
	NeverName string
	// PlainHTTP are the hosts a credential may be sent to over http://:
	// names, addresses or CIDRs (--egress-plain-http).
	PlainHTTP []string
}

// AllowsPlainHTTP reports whether PlainHTTP names host, or holds its
// address. A name is compared as written: what it resolves to is still
// checked at dial time.
func (p *Policy) AllowsPlainHTTP(host string) bool {
	ip, ipErr := netip.ParseAddr(host)
	for _, entry := range p.PlainHTTP {
		if ipErr == nil {
			if prefixes, err := ParsePrefixes(entry); err == nil && len(prefixes) == 1 && prefixes[0].Contains(ip.Unmap()) {
				return true
			}
			continue
		}
		if strings.EqualFold(strings.TrimSuffix(entry, "."), strings.TrimSuffix(host, ".")) {
			return true
		}
	}
	return false
}

// RefusedError is a connection the policy refused.
type RefusedError struct {
	// Address is the refused address and port.
	Address netip.AddrPort
	// Host is the name that resolved to it; empty when the URL named the address.
	Host string
	// Rule names the range or endpoint that refused it.
	Rule string
	// Allowable is false when no --egress-allow opens the address.
	Allowable bool
}

func (e *RefusedError) Error() string {
	target := e.Address.String()
	if e.Host != "" {
		target = fmt.Sprintf("%s (%s)", e.Host, e.Address)
	}
	message := fmt.Sprintf("egress to %s refused: %s", target, e.Rule)
	if e.Allowable {
		message += "; a cluster admin may allow it with the manager's --egress-allow"
	}
	return message
}

// Check returns nil if a tool may connect to addr, or a *RefusedError.
func (p *Policy) Check(addr netip.AddrPort) error {
	ip := addr.Addr().Unmap().WithZone("")
	addr = netip.AddrPortFrom(ip, addr.Port())
	for _, never := range p.Never {
		if never.Addr().Unmap() == ip && never.Port() == addr.Port() {
			return &RefusedError{Address: addr, Rule: "it is " + p.NeverName}
		}
	}
	for _, denied := range p.Deny {
		if denied.Contains(ip) {
			return &RefusedError{Address: addr, Rule: fmt.Sprintf("%s is in %s, which the manager's --egress-deny refuses", ip, denied)}
		}
	}
	for _, allowed := range p.Allow {
		if allowed.Contains(ip) {
			return nil
		}
	}
	for _, r := range Refused {
		if r.Prefix.Contains(ip) {
			return &RefusedError{Address: addr, Rule: fmt.Sprintf("%s is in %s, the %s", ip, r.Prefix, r.Name), Allowable: true}
		}
	}
	return nil
}

// ParsePrefixes reads a comma-separated list of CIDRs or addresses, as the
// manager's flags give them; an address stands for itself alone.
func ParsePrefixes(list string) ([]netip.Prefix, error) {
	var prefixes []netip.Prefix
	for _, item := range strings.Split(list, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		if addr, err := netip.ParseAddr(item); err == nil {
			prefixes = append(prefixes, netip.PrefixFrom(addr.Unmap(), addr.Unmap().BitLen()))
			continue
		}
		prefix, err := netip.ParsePrefix(item)
		if err != nil {
			return nil, fmt.Errorf("%q is neither a CIDR nor an IP address", item)
		}
		if prefix.Masked() != prefix {
			return nil, fmt.Errorf("%q has host bits set; did you mean %s?", item, prefix.Masked())
		}
		prefixes = append(prefixes, prefix)
	}
	return prefixes, nil
}

// Resolver finds the addresses of a host name; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Dialer connects only where its policy allows. It resolves a name itself
// and connects to the checked addresses, never to the name.
type Dialer struct {
	Policy *Policy
	// Resolver is net.DefaultResolver when nil.
	Resolver Resolver
	// Dial connects to an address checked against the policy ("ip:port").
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
}

// DialContext connects to the first allowed address of address's host that
// accepts, trying them in the order the resolver gave. When the policy
// refuses every one, the error is the first *RefusedError.
func (d *Dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, portText, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("invalid port in %q", address)
	}
	addrs, err := d.Resolve(ctx, network, host)
	if err != nil {
		return nil, err
	}
	_, literal := netip.ParseAddr(host)
	named := literal != nil
	var refused, dialErr error
	for _, ip := range addrs {
		target := netip.AddrPortFrom(ip.Unmap(), uint16(port))
		if err := d.Policy.Check(target); err != nil {
			var r *RefusedError
			if errors.As(err, &r) && named {
				r.Host = host
			}
			if refused == nil {
				refused = err
			}
			continue
		}
		conn, err := d.Dial(ctx, network, target.String())
		if err == nil {
			return conn, nil
		}
		dialErr = err
	}
	if dialErr != nil {
		return nil, dialErr
	}
	if refused != nil {
		return nil, refused
	}
	return nil, fmt.Errorf("no address found for %s", host)
}

// Resolve is the addresses host stands for: itself when it is an address,
// else what the resolver finds for network's family.
func (d *Dialer) Resolve(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if ip, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{ip}, nil
	}
	resolver := d.Resolver
	if resolver == nil {
		resolver = net.DefaultResolver
	}
	family := "ip"
	switch network {
	case "tcp4":
		family = "ip4"
	case "tcp6":
		family = "ip6"
	}
	return resolver.LookupNetIP(ctx, family, host)
}
