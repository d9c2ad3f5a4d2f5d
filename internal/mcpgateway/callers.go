package mcpgateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	authenticationv1 "k8s.io/api/authentication/v1"

	"github.com/toolledger/toolledger/internal/identity"
)

// caller is who a call acts for: a user a bearer token authenticated, or
// (user nil) the gateway's own identity.
type caller struct {
	name string
	user *authenticationv1.UserInfo
}

// acting returns ctx for requests made as the caller with the gateway's
// clients of identity.ImpersonatingFromContext.
func (c *caller) acting(ctx context.Context) context.Context {
	if c.user == nil {
		return ctx
	}
	return identity.WithUser(ctx, *c.user)
}

// Keys of a TokenInfo's Extra: the user a TokenReview authenticated, and
// why the gateway refuses to act for them.
const (
	userInfoKey = "toolledger.dev/user"
	refusalKey  = "toolledger.dev/refusal"
)

// callerOf is the caller of a request: the user its bearer token
// authenticated (over HTTP), else the gateway's own identity. A gateway
// serving HTTP with tokens never gets here without one: the listener
// refuses such requests.
func (g *Gateway) callerOf(extra *mcp.RequestExtra) (*caller, error) {
	if extra == nil {
		return g.self, nil
	}
	return g.callerOfToken(extra.TokenInfo)
}

// callerOfToken is the user a reviewed bearer token names, else (no token)
// the gateway's own identity.
func (g *Gateway) callerOfToken(info *auth.TokenInfo) (*caller, error) {
	if info == nil {
		return g.self, nil
	}
	user, ok := info.Extra[userInfoKey].(authenticationv1.UserInfo)
	if !ok {
		return nil, errors.New("the request's token names no user")
	}
	if g.opts.ConstrainedImpersonation {
		user = identity.ServiceAccountByName(user)
	}
	return &caller{name: user.Username, user: &user}, nil
}

// selfCaller asks the API server who the gateway's own identity is.
func (g *Gateway) selfCaller(ctx context.Context) (*caller, error) {
	user, err := identity.Self(ctx, g.kube)
	if err != nil {
		return nil, err
	}
	return &caller{name: user.Username}, nil
}

// tokenVerifier authenticates a bearer token with the reviewer. A user the
// gateway refuses to impersonate (identity.ErrPrivileged) is passed on with
// the refusal, for refusePrivileged to answer 403 rather than 401: the
// token is valid, the gateway will not act for it.
func tokenVerifier(reviewer *identity.Reviewer) auth.TokenVerifier {
	return func(ctx context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		user, err := reviewer.Review(ctx, token)
		switch {
		case errors.Is(err, identity.ErrUnauthenticated):
			return nil, fmt.Errorf("%w: %w", auth.ErrInvalidToken, err)
		case errors.Is(err, identity.ErrPrivileged):
			return &auth.TokenInfo{UserID: user.Username, Extra: map[string]any{refusalKey: err.Error()}}, nil
		case err != nil:
			return nil, err
		}
		return &auth.TokenInfo{UserID: user.Username, Extra: map[string]any{userInfoKey: user}}, nil
	}
}

// refusePrivileged answers 403 for a token whose user the gateway does not
// act for (see identity.Impersonable).
func refusePrivileged(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if info := auth.TokenInfoFromContext(r.Context()); info != nil {
			if refusal, ok := info.Extra[refusalKey].(string); ok {
				http.Error(w, refusal+": the gateway acts only for ordinary users and ServiceAccounts", http.StatusForbidden)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}
