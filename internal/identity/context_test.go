package identity

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/client-go/rest"
)

func TestImpersonatingFromContextActsAsTheContextsUser(t *testing.T) {
	seen := make(chan http.Header, 2)
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Clone()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{}`))
	}))
	defer server.Close()
	cfg := &rest.Config{Host: server.URL, Impersonate: rest.ImpersonationConfig{UserName: "configured", Groups: []string{"configured-group"}}}
	c, err := rest.HTTPClientFor(ImpersonatingFromContext(cfg))
	if err != nil {
		t.Fatal(err)
	}
	get := func(ctx context.Context) http.Header {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, server.URL, nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return <-seen
	}

	ana := authenticationv1.UserInfo{Username: "ana", UID: "u-1", Groups: []string{"payments", "system:authenticated"},
		Extra: map[string]authenticationv1.ExtraValue{"authentication.kubernetes.io/credential-id": {"JTI=1"}}}
	h := get(WithUser(context.Background(), ana))
	got := map[string][]string{
		"user": h.Values("Impersonate-User"), "uid": h.Values("Impersonate-Uid"), "groups": h.Values("Impersonate-Group"),
		"extra": h.Values("Impersonate-Extra-Authentication.kubernetes.io%2fcredential-Id"),
	}
	want := map[string][]string{"user": {"ana"}, "uid": {"u-1"}, "groups": {"payments", "system:authenticated"}, "extra": {"JTI=1"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("impersonation headers (-want +got):\n%s", diff)
	}

	if h := get(context.Background()); h.Get("Impersonate-User") != "configured" {
		t.Errorf("without a user in the context, the request impersonates %q, not the config's own", h.Get("Impersonate-User"))
	}
}
