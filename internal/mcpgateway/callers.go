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
	"github.com/toolledger/toolledger/pkg/sdk"
)

// maxCallers bounds the impersonating clients kept for callers seen over
// HTTP; the least recently used is dropped first.
const maxCallers = 256

// caller is who a call acts for, and the ledger client that acts as them.
type caller struct {
	name   string
	client *sdk.Client
}

// userInfoKey holds, in a TokenInfo's Extra, the user a TokenReview
// authenticated.
const userInfoKey = "toolledger.dev/user"

// callerOf is the caller of req: the user its bearer token authenticated
// (over HTTP), else the gateway's own identity. A gateway serving HTTP with
// tokens never gets here without one: the listener refuses such requests.
func (g *Gateway) callerOf(req *mcp.CallToolRequest) (*caller, error) {
	if req.Extra == nil || req.Extra.TokenInfo == nil {
		return g.self, nil
	}
	user, ok := req.Extra.TokenInfo.Extra[userInfoKey].(authenticationv1.UserInfo)
	if !ok {
		return nil, errors.New("the request's token names no user")
	}
	return g.impersonating(user)
}

// selfCaller asks the API server who the gateway's own identity is.
func (g *Gateway) selfCaller(ctx context.Context) (*caller, error) {
	user, err := identity.Self(ctx, g.kube)
	if err != nil {
		return nil, err
	}
	ledger, err := g.newClient(g.opts.Config)
	if err != nil {
		return nil, err
	}
	return &caller{name: user.Username, client: ledger}, nil
}

// impersonating returns the caller acting as user: a ledger client whose
// requests impersonate the user (see package identity).
func (g *Gateway) impersonating(user authenticationv1.UserInfo) (*caller, error) {
	id, err := identity.ID(user)
	if err != nil {
		return nil, err
	}
	if c, ok := g.callers.Get(id); ok {
		return c, nil
	}
	ledger, err := g.newClient(identity.Impersonating(g.opts.Config, user))
	if err != nil {
		return nil, err
	}
	return g.callers.Add(id, &caller{name: user.Username, client: ledger}), nil
}

// tokenVerifier authenticates a bearer token for the gateway's audience
// (identity.Review).
func (g *Gateway) tokenVerifier(audience string) auth.TokenVerifier {
	return func(ctx context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		user, err := identity.Review(ctx, g.kube, audience, token)
		if errors.Is(err, identity.ErrUnauthenticated) {
			return nil, fmt.Errorf("%w: %w", auth.ErrInvalidToken, err)
		}
		if err != nil {
			return nil, err
		}
		return &auth.TokenInfo{UserID: user.Username, Extra: map[string]any{userInfoKey: user}}, nil
	}
}
