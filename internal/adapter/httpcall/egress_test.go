package httpcall

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/egress"
	"github.com/toolledger/toolledger/internal/egress/egresstest"
	"github.com/toolledger/toolledger/pkg/adapter"
)

func loopbackPolicy() *egress.Policy {
	return &egress.Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, PlainHTTP: []string{"127.0.0.1"}}
}

// egressTransport dials through the policy, with a dialer that fails the
// test if it is asked for an address outside 127.0.0.0/8.
func egressTransport(t *testing.T, policy *egress.Policy) *http.Transport {
	t.Helper()
	dialer := &egress.Dialer{
		Policy:   policy,
		Resolver: egresstest.Hosts,
		Dial:     egresstest.LoopbackOnly(func(address string) { t.Errorf("asked to dial %s, outside 127.0.0.0/8", address) }),
	}
	transport := NewTransport(dialer, 4)
	t.Cleanup(transport.CloseIdleConnections)
	return transport
}

func TestExecuteRefusedByEgress(t *testing.T) {
	var served atomic.Int32
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		served.Add(1)
		w.WriteHeader(http.StatusCreated)
	}))
	defer server.Close()
	port := server.URL[strings.LastIndex(server.URL, ":")+1:]
	transport := egressTransport(t, loopbackPolicy())
	for _, tc := range []struct {
		url, message string
	}{
		{"http://metadata.test/latest/meta-data/", "egress to metadata.test (169.254.169.254:80) refused: 169.254.169.254 is in 169.254.0.0/16, the link-local range, where cloud metadata services listen"},
		{"http://private.test:8080/charges", "egress to private.test (10.0.0.1:8080) refused: 10.0.0.1 is in 10.0.0.0/8, the private range (RFC 1918)"},
		// Listening, but outside the allowance: nothing reaches it.
		{"http://127.0.0.2:" + port + "/charges", "egress to 127.0.0.2:" + port + " refused: 127.0.0.2 is in 127.0.0.0/8, the loopback range"},
	} {
		t.Run(tc.url, func(t *testing.T) {
			_, err := connect(t, newTool(tc.url), transport).Execute(t.Context(), request(`{"amount": 1}`))
			var permanent *adapter.PermanentError
			if !errors.As(err, &permanent) || permanent.Kind != adapter.Denied || permanent.Reason != ReasonEgressRefused {
				t.Fatalf("Execute = %v (%T), want a Denied EgressRefused *adapter.PermanentError", err, err)
			}
			want := "EgressRefused: " + tc.message + "; a cluster admin may allow it with the manager's --egress-allow"
			if err.Error() != want {
				t.Errorf("Execute = %q, want %q", err, want)
			}
		})
	}
	if _, err := connect(t, newTool("http://downstream.test:"+port+"/charges"), transport).Execute(t.Context(), request(`{"amount": 1}`)); err != nil {
		t.Errorf("Execute to an allowed name = %v, want success", err)
	}
	if got := served.Load(); got != 1 {
		t.Errorf("the downstream served %d requests, want 1 (only the allowed one)", got)
	}
}

func TestValidateEgress(t *testing.T) {
	auth := func(h *v1alpha1.HTTPAdapter) {
		h.AuthHeader = &v1alpha1.SecretHeader{SecretKeyRef: v1alpha1.SecretKeySelector{Name: "stripe", Key: "token"}}
	}
	withLookup := func(url string) func(*v1alpha1.HTTPAdapter) {
		return func(h *v1alpha1.HTTPAdapter) { h.Lookup = &v1alpha1.HTTPLookup{URL: url} }
	}
	usable := []client.Object{secret(namespace, map[string]string{"token": "Bearer t"})}
	tests := []struct {
		name        string
		tool        *v1alpha1.Tool
		wantReason  string
		wantMessage string
	}{
		{name: "allowed address", tool: newTool("http://127.0.0.1:8089/charges", auth)},
		{name: "a name is checked when dialed", tool: newTool("https://metadata.test/charges")},
		{name: "https carries credentials anywhere", tool: newTool("https://api.example.com/charges", auth)},
		{name: "metadata address", tool: newTool("http://169.254.169.254/latest/meta-data/"), wantReason: ReasonEgressRefused,
			wantMessage: "spec.http.url: egress to 169.254.169.254:80 refused: 169.254.169.254 is in 169.254.0.0/16, the link-local range, where cloud metadata services listen; a cluster admin may allow it with the manager's --egress-allow"},
		{name: "lookup at a private address", tool: newTool("https://api.example.com/charges", withLookup("https://10.0.0.1/{key}")), wantReason: ReasonEgressRefused,
			wantMessage: "spec.http.lookup.url: egress to 10.0.0.1:443 refused: 10.0.0.1 is in 10.0.0.0/8, the private range (RFC 1918); a cluster admin may allow it with the manager's --egress-allow"},
		{name: "credentials over plain HTTP", tool: newTool("http://api.example.com/charges", auth), wantReason: ReasonInsecureCredentials,
			wantMessage: "spec.http.url: spec.http.authHeader is sent only over https://, or over http:// to a host the manager's --egress-plain-http names, and api.example.com is not one"},
		{name: "credentials to a plain HTTP lookup", tool: newTool("https://api.example.com/charges", auth, withLookup("http://127.0.0.2/{key}")), wantReason: ReasonInsecureCredentials,
			wantMessage: "spec.http.lookup.url: spec.http.authHeader is sent only over https://, or over http:// to a host the manager's --egress-plain-http names, and 127.0.0.2 is not one"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newConnector(t, nil, usable...)
			c.Egress = loopbackPolicy()
			err := c.Validate(t.Context(), tc.tool)
			if tc.wantReason == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			var config *adapter.ConfigError
			if !errors.As(err, &config) || config.Reason != tc.wantReason || config.Message != tc.wantMessage {
				t.Errorf("Validate = %v, want %s: %q", err, tc.wantReason, tc.wantMessage)
			}
		})
	}
	// Connect refuses credentials over plain HTTP too, so that an action
	// waits rather than send them.
	c := newConnector(t, nil, usable...)
	c.Egress = loopbackPolicy()
	_, err := c.Connect(t.Context(), newTool("http://api.example.com/charges", auth))
	var config *adapter.ConfigError
	if !errors.As(err, &config) || config.Reason != ReasonInsecureCredentials {
		t.Errorf("Connect = %v, want an InsecureCredentials *adapter.ConfigError", err)
	}
}
