package mcpgateway

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// A local-only gateway answers only loopback clients asking for a loopback
// host, and no front answers a cross-origin browser request: a web page
// must not act as the user who started the gateway.
func TestLocalOnlyRefusesRebindingAndCrossOriginBrowsers(t *testing.T) {
	served := 0
	h := loopbackOnly(browserSafe(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served++ })))
	for _, tc := range []struct {
		name, remote, host, fetchSite string
		want                          int
	}{
		{"loopback host", "127.0.0.1:40000", "127.0.0.1:8090", "", http.StatusOK},
		{"localhost", "127.0.0.1:40000", "localhost:8090", "", http.StatusOK},
		{"IPv6 loopback", "[::1]:40000", "[::1]:8090", "", http.StatusOK},
		{"IPv6 loopback without a port", "[::1]:40000", "[::1]", "", http.StatusOK},
		{"localhost in capitals", "127.0.0.1:40000", "LocalHost:8090", "", http.StatusOK},
		{"same-origin browser", "127.0.0.1:40000", "127.0.0.1:8090", "same-origin", http.StatusOK},
		{"another machine", "192.0.2.7:40000", "127.0.0.1:8090", "", http.StatusForbidden},
		{"a rebound name", "127.0.0.1:40000", "shop.attacker.example:8090", "", http.StatusForbidden},
		{"a cross-site page", "127.0.0.1:40000", "127.0.0.1:8090", "cross-site", http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := served
			r := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/tools/charge", nil)
			r.RemoteAddr, r.Host = tc.remote, tc.host
			if tc.fetchSite != "" {
				r.Header.Set("Sec-Fetch-Site", tc.fetchSite)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != tc.want {
				t.Errorf("status %d, want %d (%s)", w.Code, tc.want, w.Body)
			}
			if reached := served > before; reached != (tc.want == http.StatusOK) {
				t.Errorf("the front was reached: %v", reached)
			}
		})
	}
}
