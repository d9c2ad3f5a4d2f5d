package mcpgateway

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/client-go/rest"

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
	review := &authenticationv1.SelfSubjectReview{}
	if err := g.kube.Create(ctx, review); err != nil {
		return nil, fmt.Errorf("cannot ask the API server who this gateway is (SelfSubjectReview): %w", err)
	}
	ledger, err := g.newClient(g.opts.Config)
	if err != nil {
		return nil, err
	}
	return &caller{name: review.Status.UserInfo.Username, client: ledger}, nil
}

// impersonating returns the caller acting as user: a ledger client whose
// requests impersonate the user, so the API server authorizes, admits and
// attributes them as the user's own. The caller's token is never sent on.
func (g *Gateway) impersonating(user authenticationv1.UserInfo) (*caller, error) {
	id, err := userID(user)
	if err != nil {
		return nil, err
	}
	if c, ok := g.callers.get(id); ok {
		return c, nil
	}
	cfg := rest.CopyConfig(g.opts.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user.Username, UID: user.UID, Groups: user.Groups}
	if len(user.Extra) > 0 {
		cfg.Impersonate.Extra = map[string][]string{}
		for k, v := range user.Extra {
			cfg.Impersonate.Extra[k] = v
		}
	}
	ledger, err := g.newClient(cfg)
	if err != nil {
		return nil, err
	}
	return g.callers.add(id, &caller{name: user.Username, client: ledger}), nil
}

// userID identifies everything impersonation asserts of a user.
func userID(user authenticationv1.UserInfo) (string, error) {
	user.Groups = slices.Sorted(slices.Values(user.Groups))
	encoded, err := json.Marshal(user)
	if err != nil {
		return "", fmt.Errorf("cannot encode the user: %w", err)
	}
	sum := sha256.Sum256(encoded)
	return hex.EncodeToString(sum[:]), nil
}

// tokenVerifier authenticates a bearer token with a TokenReview for the
// gateway's audience: only a token issued for the gateway is accepted, so a
// token meant for the API server (or another service) cannot be replayed
// here, nor one of the gateway's sent anywhere else.
func (g *Gateway) tokenVerifier(audience string) auth.TokenVerifier {
	return func(ctx context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		review := &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: []string{audience}}}
		if err := g.kube.Create(ctx, review); err != nil {
			return nil, fmt.Errorf("cannot review the token: %w", err)
		}
		if !review.Status.Authenticated {
			reason := review.Status.Error
			if reason == "" {
				reason = "not authenticated"
			}
			return nil, fmt.Errorf("%w: %s", auth.ErrInvalidToken, reason)
		}
		if !slices.Contains(review.Status.Audiences, audience) {
			return nil, fmt.Errorf("%w: the token is not for audience %q", auth.ErrInvalidToken, audience)
		}
		return &auth.TokenInfo{UserID: review.Status.User.Username, Extra: map[string]any{userInfoKey: review.Status.User}}, nil
	}
}

// callerCache keeps the most recently used callers.
type callerCache struct {
	mu    sync.Mutex
	max   int
	order *list.List // of *cachedCaller, most recent first
	byID  map[string]*list.Element
}

type cachedCaller struct {
	id     string
	caller *caller
}

func newCallerCache(maxEntries int) *callerCache {
	return &callerCache{max: maxEntries, order: list.New(), byID: map[string]*list.Element{}}
}

func (c *callerCache) get(id string) (*caller, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byID[id]
	if !ok {
		return nil, false
	}
	c.order.MoveToFront(e)
	return e.Value.(*cachedCaller).caller, true
}

// add keeps the caller, unless another call added one for id first, and
// returns the one kept.
func (c *callerCache) add(id string, cl *caller) *caller {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byID[id]; ok {
		c.order.MoveToFront(e)
		return e.Value.(*cachedCaller).caller
	}
	c.byID[id] = c.order.PushFront(&cachedCaller{id: id, caller: cl})
	for c.order.Len() > c.max {
		oldest := c.order.Back()
		c.order.Remove(oldest)
		delete(c.byID, oldest.Value.(*cachedCaller).id)
	}
	return cl
}
