package httpcall

import (
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

// TestTransportErrorsShowTheURLTemplate: an error without an answer lands in
// the action's status, history and events, so it names the Tool's URL
// template, never the parameters or the key filled into it, nor a query.
func TestTransportErrorsShowTheURLTemplate(t *testing.T) {
	t.Parallel()
	const params = `{"customer":"cus_Secret9","amount":987654321,"memo":"private note"}`
	secrets := []string{"cus_Secret9", "987654321", "private", "order-1", "?", "token=", "amount="}
	hanging := newRawServer(t, func(_ int32, c net.Conn) bool { return hang(c) })
	tests := []struct {
		name    string
		base    func(t *testing.T) string
		lookup  bool
		wantMsg string
	}{
		{name: "execute, connection refused", base: func(t *testing.T) string { return "http://" + refusedAddr(t) },
			wantMsg: `Post "http://ADDR/v1/customers/{customer}/charges": dial tcp ADDR: connect: connection refused`},
		{name: "execute, timeout", base: func(*testing.T) string { return "http://" + hanging.addr },
			wantMsg: `no response before the timeout: Post "http://ADDR/v1/customers/{customer}/charges": context deadline exceeded`},
		{name: "lookup, connection refused", lookup: true, base: func(t *testing.T) string { return "http://" + refusedAddr(t) },
			wantMsg: `lookup failed: Get "http://ADDR/v1/customers/{customer}/charges/{key}": dial tcp ADDR: connect: connection refused`},
		{name: "lookup, timeout", lookup: true, base: func(*testing.T) string { return "http://" + hanging.addr },
			wantMsg: `lookup failed: Get "http://ADDR/v1/customers/{customer}/charges/{key}": context deadline exceeded`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			base := tc.base(t)
			tool := newTool(base+"/v1/customers/{customer}/charges?token=abc", func(h *v1alpha1.HTTPAdapter) {
				h.Encoding = v1alpha1.EncodingQuery
				h.Timeout = &metav1.Duration{Duration: 200 * time.Millisecond}
				h.Lookup = &v1alpha1.HTTPLookup{URL: base + "/v1/customers/{customer}/charges/{key}?token=abc"}
			})
			ex := connect(t, tool, nil)
			req := request(params)
			req.IdempotencyKey = "shop/order-1"
			var err error
			if tc.lookup {
				_, err = ex.Lookup(t.Context(), req)
			} else {
				_, err = ex.Execute(t.Context(), req)
			}
			if err == nil {
				t.Fatal("no error, want a transport error")
			}
			addr := strings.TrimPrefix(base, "http://")
			if got, want := err.Error(), strings.ReplaceAll(tc.wantMsg, "ADDR", addr); !strings.HasSuffix(got, want) {
				t.Errorf("error = %q\nwant suffix %q", got, want)
			}
			for _, s := range secrets {
				if strings.Contains(err.Error(), s) {
					t.Errorf("error %q shows %q, filled in from the action", err, s)
				}
			}
			if strings.Contains(tc.name, "refused") && !errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("error %v no longer wraps its cause", err)
			}
		})
	}
}
