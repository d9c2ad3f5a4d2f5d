package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"testing"

	"github.com/toolledger/toolledger/internal/egress/egresstest"
)

// loopbackOnly fails the test if the dialer is ever asked for an address
// outside 127.0.0.0/8: the policy must have refused it first.
func loopbackOnly(t *testing.T) func(ctx context.Context, network, address string) (net.Conn, error) {
	return egresstest.LoopbackOnly(func(address string) { t.Errorf("asked to dial %s, outside 127.0.0.0/8", address) })
}

func TestCheck(t *testing.T) {
	policy := &Policy{
		Allow:     mustPrefixes(t, "127.0.0.1/32,10.20.0.0/16"),
		Deny:      mustPrefixes(t, "10.20.5.0/24"),
		Never:     []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:6443")},
		NeverName: "the API server's own endpoint",
	}
	tests := []struct {
		addr string
		want string // "" is allowed
	}{
		{"127.0.0.1:8080", ""},
		{"10.20.1.1:80", ""},
		{"93.184.215.14:443", ""},
		{"[2606:4700::1111]:443", ""},
		{"169.254.169.254:80", "egress to 169.254.169.254:80 refused: 169.254.169.254 is in 169.254.0.0/16, the link-local range, where cloud metadata services listen; a cluster admin may allow it with the manager's --egress-allow"},
		{"[::ffff:169.254.169.254]:80", "egress to 169.254.169.254:80 refused: 169.254.169.254 is in 169.254.0.0/16, the link-local range, where cloud metadata services listen; a cluster admin may allow it with the manager's --egress-allow"},
		{"[fd00:ec2::254]:80", "egress to [fd00:ec2::254]:80 refused: fd00:ec2::254 is in fc00::/7, the unique local range; a cluster admin may allow it with the manager's --egress-allow"},
		{"10.0.0.1:443", "egress to 10.0.0.1:443 refused: 10.0.0.1 is in 10.0.0.0/8, the private range (RFC 1918); a cluster admin may allow it with the manager's --egress-allow"},
		{"10.96.0.1:443", "egress to 10.96.0.1:443 refused: 10.96.0.1 is in 10.0.0.0/8, the private range (RFC 1918); a cluster admin may allow it with the manager's --egress-allow"},
		{"172.16.0.10:53", "egress to 172.16.0.10:53 refused: 172.16.0.10 is in 172.16.0.0/12, the private range (RFC 1918); a cluster admin may allow it with the manager's --egress-allow"},
		{"192.168.1.1:80", "egress to 192.168.1.1:80 refused: 192.168.1.1 is in 192.168.0.0/16, the private range (RFC 1918); a cluster admin may allow it with the manager's --egress-allow"},
		{"100.100.100.200:80", "egress to 100.100.100.200:80 refused: 100.100.100.200 is in 100.64.0.0/10, the shared address space (RFC 6598); a cluster admin may allow it with the manager's --egress-allow"},
		{"127.0.0.2:8080", "egress to 127.0.0.2:8080 refused: 127.0.0.2 is in 127.0.0.0/8, the loopback range; a cluster admin may allow it with the manager's --egress-allow"},
		{"[::1]:8080", "egress to [::1]:8080 refused: ::1 is in ::1/128, the loopback address; a cluster admin may allow it with the manager's --egress-allow"},
		{"0.0.0.0:80", "egress to 0.0.0.0:80 refused: 0.0.0.0 is in 0.0.0.0/8, the this-network range; a cluster admin may allow it with the manager's --egress-allow"},
		{"10.20.5.7:80", "egress to 10.20.5.7:80 refused: 10.20.5.7 is in 10.20.5.0/24, which the manager's --egress-deny refuses"},
		{"127.0.0.1:6443", "egress to 127.0.0.1:6443 refused: it is the API server's own endpoint"},
	}
	for _, tc := range tests {
		t.Run(tc.addr, func(t *testing.T) {
			err := policy.Check(netip.MustParseAddrPort(tc.addr))
			got := ""
			if err != nil {
				got = err.Error()
				var refused *RefusedError
				if !errors.As(err, &refused) {
					t.Errorf("Check = %T, want a *RefusedError", err)
				}
			}
			if got != tc.want {
				t.Errorf("Check(%s) = %q, want %q", tc.addr, got, tc.want)
			}
		})
	}
}

func TestParsePrefixes(t *testing.T) {
	got, err := ParsePrefixes(" 10.0.0.0/8, 127.0.0.1 ,::ffff:192.168.1.1,, fd00::/8")
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprint([]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("127.0.0.1/32"),
		netip.MustParsePrefix("192.168.1.1/32"), netip.MustParsePrefix("fd00::/8")})
	if fmt.Sprint(got) != want {
		t.Errorf("ParsePrefixes = %v, want %s", got, want)
	}
	for input, message := range map[string]string{
		"10.0.0.1/8":  `"10.0.0.1/8" has host bits set; did you mean 10.0.0.0/8?`,
		"example.com": `"example.com" is neither a CIDR nor an IP address`,
		"10.0.0.0/33": `"10.0.0.0/33" is neither a CIDR nor an IP address`,
	} {
		if _, err := ParsePrefixes(input); err == nil || err.Error() != message {
			t.Errorf("ParsePrefixes(%q) = %v, want %q", input, err, message)
		}
	}
}

func TestAllowsPlainHTTP(t *testing.T) {
	policy := &Policy{PlainHTTP: []string{"127.0.0.1", "10.1.0.0/16", "Sidecar.Local."}}
	for host, want := range map[string]bool{
		"127.0.0.1":     true,
		"127.0.0.2":     false,
		"10.1.2.3":      true,
		"10.2.0.1":      false,
		"sidecar.local": true,
		"other.local":   false,
		"::1":           false,
	} {
		if got := policy.AllowsPlainHTTP(host); got != want {
			t.Errorf("AllowsPlainHTTP(%q) = %v, want %v", host, got, want)
		}
	}
}

func TestDialerRefusesWhatNamesResolveTo(t *testing.T) {
	var lc net.ListenConfig
	listener, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = listener.Close() }()
	go func() {
		for {
			conn, err := listener.Accept()
			if err != nil {
				return
			}
			_ = conn.Close()
		}
	}()
	port := listener.Addr().(*net.TCPAddr).Port
	dialer := &Dialer{
		Policy: &Policy{Allow: mustPrefixes(t, "127.0.0.1/32")},
		Resolver: egresstest.Names{
			"metadata.test": {"169.254.169.254"},
			"private.test":  {"10.0.0.1"},
			"cluster.test":  {"10.96.0.1", "fd00:10:96::1"},
			"loopback.test": {"127.0.0.2"},
			// A name that resolves to a refused and an allowed address is
			// dialed at the allowed one only.
			"mixed.test":   {"169.254.169.254", "127.0.0.1"},
			"allowed.test": {"127.0.0.1"},
		},
		Dial: loopbackOnly(t),
	}
	refused := map[string]string{
		"metadata.test": "egress to metadata.test (169.254.169.254:%d) refused: 169.254.169.254 is in 169.254.0.0/16, the link-local range, where cloud metadata services listen; a cluster admin may allow it with the manager's --egress-allow",
		"private.test":  "egress to private.test (10.0.0.1:%d) refused: 10.0.0.1 is in 10.0.0.0/8, the private range (RFC 1918); a cluster admin may allow it with the manager's --egress-allow",
		"cluster.test":  "egress to cluster.test (10.96.0.1:%d) refused: 10.96.0.1 is in 10.0.0.0/8, the private range (RFC 1918); a cluster admin may allow it with the manager's --egress-allow",
		"loopback.test": "egress to loopback.test (127.0.0.2:%d) refused: 127.0.0.2 is in 127.0.0.0/8, the loopback range; a cluster admin may allow it with the manager's --egress-allow",
		"127.0.0.2":     "egress to 127.0.0.2:%d refused: 127.0.0.2 is in 127.0.0.0/8, the loopback range; a cluster admin may allow it with the manager's --egress-allow",
	}
	for host, message := range refused {
		_, err := dialer.DialContext(t.Context(), "tcp", net.JoinHostPort(host, fmt.Sprint(port)))
		var r *RefusedError
		if !errors.As(err, &r) || err.Error() != fmt.Sprintf(message, port) {
			t.Errorf("dial %s = %v, want %q", host, err, fmt.Sprintf(message, port))
		}
	}
	for _, host := range []string{"mixed.test", "allowed.test", "127.0.0.1"} {
		conn, err := dialer.DialContext(t.Context(), "tcp", net.JoinHostPort(host, fmt.Sprint(port)))
		if err != nil {
			t.Errorf("dial %s = %v, want a connection", host, err)
			continue
		}
		if got := conn.RemoteAddr().String(); got != listener.Addr().String() {
			t.Errorf("dial %s connected to %s, want %s", host, got, listener.Addr())
		}
		_ = conn.Close()
	}
	if _, err := dialer.DialContext(t.Context(), "tcp", "unknown.test:80"); err == nil || !errors.As(err, new(*net.DNSError)) {
		t.Errorf("dial unknown.test = %v, want the resolver's error", err)
	}
}

func mustPrefixes(t *testing.T, list string) []netip.Prefix {
	t.Helper()
	prefixes, err := ParsePrefixes(list)
	if err != nil {
		t.Fatal(err)
	}
	return prefixes
}
