package serve

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func TestRateLimitKeepsABucketPerClientAndForgetsTheLeastRecent(t *testing.T) {
	l := NewRateLimit(1, 1, 2)
	now := time.Unix(1_800_000_000, 0)
	l.now = func() time.Time { return now }
	h := l.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	status := func(addr string) (int, string) {
		req := httptest.NewRequestWithContext(context.Background(), http.MethodGet, "/", nil)
		req.RemoteAddr = addr
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code, rec.Header().Get("Retry-After")
	}
	if code, _ := status("10.0.0.1:1000"); code != http.StatusOK {
		t.Fatalf("first request: %d", code)
	}
	if code, retry := status("10.0.0.1:1001"); code != http.StatusTooManyRequests || retry != "1" {
		t.Fatalf("second request of the same address (another port): %d, Retry-After %q; want 429, 1", code, retry)
	}
	if code, _ := status("10.0.0.2:1000"); code != http.StatusOK {
		t.Fatalf("another client: %d", code)
	}
	// A third client pushes out the least recently seen, 10.0.0.1, whose
	// bucket starts full again: the bound holds memory, not the limit.
	if code, _ := status("10.0.0.3:1000"); code != http.StatusOK {
		t.Fatalf("a third client: %d", code)
	}
	if l.clients.Len() != 2 {
		t.Fatalf("%d buckets kept, want 2", l.clients.Len())
	}
	now = now.Add(time.Second)
	if code, _ := status("10.0.0.2:1000"); code != http.StatusOK {
		t.Fatalf("a client after its refill: %d", code)
	}
}

func TestNoRateLimitWithoutARate(t *testing.T) {
	h := NewRateLimit(0, 1, 2).Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for range 10 {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequestWithContext(context.Background(), http.MethodGet, "/", nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("status %d", rec.Code)
		}
	}
}

func TestClientAddressIsTheIPv4AddressOrTheIPv6Slash64(t *testing.T) {
	for remote, want := range map[string]string{
		"10.0.0.1:1000":               "10.0.0.1",
		"[::ffff:10.0.0.1]:1000":      "10.0.0.1",
		"[2001:db8:1:2:3:4:5:6]:1000": "2001:db8:1:2::/64",
		"[2001:db8:1:2:ffff::1]:2000": "2001:db8:1:2::/64",
		"[fe80::1%eth0]:1000":         "fe80::/64",
		"not an address":              "not an address",
	} {
		if got := clientAddress(remote); got != want {
			t.Errorf("clientAddress(%q) = %q, want %q", remote, got, want)
		}
	}
}
