// Package identity authenticates the users of toolledger's front ends (the
// MCP gateway over HTTP, the web console in a cluster) and acts as them: a
// bearer token is reviewed by the API server (a TokenReview for the front
// end's own audience), and every request made for the user impersonates
// them, so the API server authorizes, admits and attributes it as the
// user's own. The user's token is never sent on.
package identity

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ErrUnauthenticated is returned for a token the API server does not
// authenticate for the audience.
var ErrUnauthenticated = errors.New("the token is not authenticated")

// Review authenticates a bearer token with a TokenReview for audience: only
// a token issued for that audience is accepted, so a token meant for the API
// server (or another service) cannot be replayed at a front end, nor one of
// a front end's sent anywhere else. kube is the front end's own client.
func Review(ctx context.Context, kube client.Client, audience, token string) (authenticationv1.UserInfo, error) {
	review := &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: []string{audience}}}
	if err := kube.Create(ctx, review); err != nil {
		return authenticationv1.UserInfo{}, fmt.Errorf("cannot review the token: %w", err)
	}
	if !review.Status.Authenticated {
		reason := review.Status.Error
		if reason == "" {
			reason = "not authenticated"
		}
		return authenticationv1.UserInfo{}, fmt.Errorf("%w: %s", ErrUnauthenticated, reason)
	}
	if !slices.Contains(review.Status.Audiences, audience) {
		return authenticationv1.UserInfo{}, fmt.Errorf("%w: the token is not for audience %q", ErrUnauthenticated, audience)
	}
	return review.Status.User, nil
}

// Self asks the API server who cfg's own identity is (a SelfSubjectReview):
// the user of a kubeconfig, or a front end's ServiceAccount.
func Self(ctx context.Context, kube client.Client) (authenticationv1.UserInfo, error) {
	review := &authenticationv1.SelfSubjectReview{}
	if err := kube.Create(ctx, review); err != nil {
		return authenticationv1.UserInfo{}, fmt.Errorf("cannot ask the API server who this is (SelfSubjectReview): %w", err)
	}
	return review.Status.UserInfo, nil
}

// Impersonating returns a copy of cfg whose requests impersonate user: its
// name, UID, groups and extra, everything the API server authenticated.
func Impersonating(cfg *rest.Config, user authenticationv1.UserInfo) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.Impersonate = rest.ImpersonationConfig{UserName: user.Username, UID: user.UID, Groups: user.Groups}
	if len(user.Extra) > 0 {
		out.Impersonate.Extra = map[string][]string{}
		for k, v := range user.Extra {
			out.Impersonate.Extra[k] = v
		}
	}
	return out
}

// ID identifies everything impersonation asserts of a user, so that two
// users who differ only in a group or an extra never share a client.
func ID(user authenticationv1.UserInfo) (string, error) {
	user.Groups = slices.Sorted(slices.Values(user.Groups))
	encoded, err := json.Marshal(user)
	if err != nil {
		return "", fmt.Errorf("cannot encode the user: %w", err)
	}
	sum := sha256.Sum256(encoded)
	return hex.EncodeToString(sum[:]), nil
}

// Cache keeps the most recently used values by ID (a user's clients, say),
// at most max of them; the least recently used is dropped first.
type Cache[T any] struct {
	mu    sync.Mutex
	max   int
	order *list.List // of *entry[T], most recent first
	byID  map[string]*list.Element
}

type entry[T any] struct {
	id    string
	value T
}

// NewCache returns an empty cache of at most maxEntries values.
func NewCache[T any](maxEntries int) *Cache[T] {
	return &Cache[T]{max: maxEntries, order: list.New(), byID: map[string]*list.Element{}}
}

// Get returns the value kept for id.
func (c *Cache[T]) Get(id string) (T, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byID[id]
	if !ok {
		var zero T
		return zero, false
	}
	c.order.MoveToFront(e)
	return e.Value.(*entry[T]).value, true
}

// Add keeps value, unless another caller added one for id first, and
// returns the one kept.
func (c *Cache[T]) Add(id string, value T) T {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byID[id]; ok {
		c.order.MoveToFront(e)
		return e.Value.(*entry[T]).value
	}
	c.byID[id] = c.order.PushFront(&entry[T]{id: id, value: value})
	c.trim()
	return value
}

// Put keeps value for id, replacing any kept before.
func (c *Cache[T]) Put(id string, value T) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byID[id]; ok {
		e.Value.(*entry[T]).value = value
		c.order.MoveToFront(e)
		return
	}
	c.byID[id] = c.order.PushFront(&entry[T]{id: id, value: value})
	c.trim()
}

// trim drops the least recently used values past the bound.
func (c *Cache[T]) trim() {
	for c.order.Len() > c.max {
		oldest := c.order.Back()
		c.order.Remove(oldest)
		delete(c.byID, oldest.Value.(*entry[T]).id)
	}
}

// Len is the number of values kept.
func (c *Cache[T]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
