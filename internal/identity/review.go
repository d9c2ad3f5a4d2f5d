package identity

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"golang.org/x/sync/singleflight"
	authenticationv1 "k8s.io/api/authentication/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// How long a review's answer is kept, by the token's hash. A revoked token
// keeps working for at most ReviewTTL; a refused token is not asked about
// again for RefusalTTL, so a client repeating a bad token costs the API
// server one TokenReview per RefusalTTL, not one per request.
const (
	ReviewTTL  = time.Minute
	RefusalTTL = 10 * time.Second
)

// MaxTokenLength is the longest token sent to the API server for review.
// ServiceAccount and OIDC tokens are JWTs of a few KiB at most; a longer
// one is refused unasked.
const MaxTokenLength = 16 << 10

// Bounds of the review caches. Refusals are kept apart from accepted
// tokens, so that a flood of random tokens cannot push out the users who
// are signed in.
const (
	maxAccepted = 1024
	maxRefused  = 4096
)

// ErrMalformedToken is wrapped (with ErrUnauthenticated) for a token that
// cannot be a bearer token, which is refused without asking the API server.
var ErrMalformedToken = errors.New("the token is not a bearer token (RFC 6750: at most 16 KiB of letters, digits and -._~+/, then any =)")

// Reviewer authenticates bearer tokens for one audience (see Review), and
// remembers the answers by the token's SHA-256 (never the token itself):
// an accepted token for ReviewTTL, a refused one for RefusalTTL. Concurrent
// reviews of one token share one TokenReview. Users that may not be
// impersonated (see Impersonable) are refused with ErrPrivileged.
type Reviewer struct {
	kube     client.Client
	audience string
	now      func() time.Time

	accepted *Cache[answer]
	refused  *Cache[answer]
	// inFlight shares one TokenReview among the requests of one token.
	inFlight singleflight.Group
}

// answer is a review's outcome and until when it is trusted.
type answer struct {
	user    authenticationv1.UserInfo
	err     error
	expires time.Time
}

// NewReviewer returns a Reviewer of tokens for audience, asking with kube,
// the front end's own client. now is the clock; time.Now when nil.
func NewReviewer(kube client.Client, audience string, now func() time.Time) *Reviewer {
	if now == nil {
		now = time.Now
	}
	return &Reviewer{
		kube: kube, audience: audience, now: now,
		accepted: NewCache[answer](maxAccepted), refused: NewCache[answer](maxRefused),
	}
}

// Review returns the user token authenticates for the Reviewer's audience.
// Its errors wrap ErrUnauthenticated (the token is refused, malformed ones
// with ErrMalformedToken too), ErrPrivileged (the user, returned with it,
// is authenticated but may not be impersonated), or else the failure to
// ask.
func (r *Reviewer) Review(ctx context.Context, token string) (authenticationv1.UserInfo, error) {
	if !WellFormed(token) {
		return authenticationv1.UserInfo{}, fmt.Errorf("%w: %w", ErrUnauthenticated, ErrMalformedToken)
	}
	key := tokenKey(token)
	a, ok := r.cached(key)
	if !ok {
		var err error
		if a, err = r.ask(ctx, key, token); err != nil {
			return authenticationv1.UserInfo{}, err
		}
	}
	if a.err != nil {
		return authenticationv1.UserInfo{}, a.err
	}
	return a.user, Impersonable(a.user)
}

// cached is the unexpired answer kept for key.
func (r *Reviewer) cached(key string) (answer, bool) {
	now := r.now()
	for _, c := range []*Cache[answer]{r.accepted, r.refused} {
		if a, ok := c.Get(key); ok && now.Before(a.expires) {
			return a, true
		}
	}
	return answer{}, false
}

// ask sends one TokenReview for token, or waits for the one in flight.
// The error is the failure to ask (nothing is kept then); a refusal is an
// answer.
func (r *Reviewer) ask(ctx context.Context, key, token string) (answer, error) {
	flight := r.inFlight.DoChan(key, func() (any, error) { return r.review(ctx, key, token) })
	select {
	case result := <-flight:
		if result.Err != nil {
			return answer{}, result.Err
		}
		return result.Val.(answer), nil
	case <-ctx.Done():
		return answer{}, fmt.Errorf("cannot review the token: %w", context.Cause(ctx))
	}
}

// review asks the API server and keeps its answer.
func (r *Reviewer) review(ctx context.Context, key, token string) (answer, error) {
	user, err := Review(ctx, r.kube, r.audience, token)
	switch {
	case err == nil:
		a := answer{user: user, expires: r.now().Add(ReviewTTL)}
		r.accepted.Put(key, a)
		return a, nil
	case errors.Is(err, ErrUnauthenticated):
		a := answer{err: err, expires: r.now().Add(RefusalTTL)}
		r.refused.Put(key, a)
		return a, nil
	}
	return answer{}, err
}

// tokenKey is what the caches know a token by.
func tokenKey(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// WellFormed reports whether token may be a bearer token at all: RFC 6750's
// b64token (letters, digits and -._~+/, then any number of =), at most
// MaxTokenLength long. JWTs (ServiceAccount and OIDC tokens) and bootstrap
// tokens are.
func WellFormed(token string) bool {
	if token == "" || len(token) > MaxTokenLength {
		return false
	}
	body := strings.TrimRight(token, "=")
	if body == "" {
		return false
	}
	for i := range len(body) {
		if !tokenChar(body[i]) {
			return false
		}
	}
	return true
}

func tokenChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-._~+/", c) >= 0
}
