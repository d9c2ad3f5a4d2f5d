// Package egresstest lets tests exercise the egress policy without any
// traffic leaving loopback: a resolver of made-up names that point at
// metadata, private and cluster addresses, and a dialer that refuses, and
// reports, any address outside 127.0.0.0/8.
package egresstest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
)

// Names resolves the names it maps, and nothing else: no test resolves a
// real name.
type Names map[string][]string

// Hosts are names that resolve where an SSRF would aim, and one that
// resolves to the tests' downstreams.
var Hosts = Names{
	"metadata.test":   {"169.254.169.254"},
	"private.test":    {"10.0.0.1"},
	"cluster.test":    {"10.96.0.1"},
	"downstream.test": {"127.0.0.1"},
	// Refused and allowed at once: only the allowed address is dialed.
	"mixed.test": {"169.254.169.254", "127.0.0.1"},
}

// LookupNetIP returns the addresses n maps host to.
func (n Names) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	addrs, ok := n[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	out := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		addr, err := netip.ParseAddr(a)
		if err != nil {
			return nil, err
		}
		out = append(out, addr)
	}
	return out, nil
}

// LoopbackOnly dials addresses in 127.0.0.0/8 and refuses any other,
// calling violation with it: the policy must have refused it first, so a
// test fails on any call.
func LoopbackOnly(violation func(address string)) func(ctx context.Context, network, address string) (net.Conn, error) {
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		addr, err := netip.ParseAddrPort(address)
		if err != nil || !addr.Addr().Is4() || !addr.Addr().IsLoopback() {
			violation(address)
			return nil, fmt.Errorf("dial %s: %w", address, errOutsideLoopback)
		}
		var d net.Dialer
		return d.DialContext(ctx, network, address)
	}
}

var errOutsideLoopback = errors.New("a test may connect to 127.0.0.0/8 only")
