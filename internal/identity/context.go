package identity

import (
	"context"
	"net/http"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
)

type userKey struct{}

// WithUser returns a context whose requests, made with a client of
// ImpersonatingFromContext, impersonate user.
func WithUser(ctx context.Context, user authenticationv1.UserInfo) context.Context {
	return context.WithValue(ctx, userKey{}, user)
}

// ImpersonatingFromContext returns a copy of cfg whose requests impersonate
// the user their context carries (WithUser), everything the API server
// authenticated of them, and act as cfg's own identity when it carries
// none. One client of it serves every user: its watches, made with a
// context of no user, are the front end's own, shared by all of them.
func ImpersonatingFromContext(cfg *rest.Config) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.Wrap(func(next http.RoundTripper) http.RoundTripper { return &contextImpersonation{next: next} })
	return out
}

type contextImpersonation struct{ next http.RoundTripper }

func (t *contextImpersonation) RoundTrip(req *http.Request) (*http.Response, error) {
	user, ok := req.Context().Value(userKey{}).(authenticationv1.UserInfo)
	if !ok {
		return t.next.RoundTrip(req)
	}
	// The user's identity replaces any that cfg impersonates itself.
	req = req.Clone(req.Context())
	for name := range req.Header {
		if strings.HasPrefix(name, "Impersonate-") {
			req.Header.Del(name)
		}
	}
	return transport.NewImpersonatingRoundTripper(impersonationConfig(user), t.next).RoundTrip(req)
}

// WrappedRoundTripper lets client-go find the transport underneath.
func (t *contextImpersonation) WrappedRoundTripper() http.RoundTripper { return t.next }

func impersonationConfig(user authenticationv1.UserInfo) transport.ImpersonationConfig {
	c := transport.ImpersonationConfig{UserName: user.Username, UID: user.UID, Groups: user.Groups}
	if len(user.Extra) > 0 {
		c.Extra = make(map[string][]string, len(user.Extra))
		for k, v := range user.Extra {
			c.Extra[k] = v
		}
	}
	return c
}
