package identity

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

const audience = "https://front.example"

// reviewingClient answers TokenReviews as an API server would for users
// (token to user; any other token is refused), counting them.
func reviewingClient(users map[string]authenticationv1.UserInfo, reviews *atomic.Int32, delay time.Duration) client.Client {
	return fake.NewClientBuilder().WithInterceptorFuncs(interceptor.Funcs{
		Create: func(_ context.Context, _ client.WithWatch, obj client.Object, _ ...client.CreateOption) error {
			review, ok := obj.(*authenticationv1.TokenReview)
			if !ok {
				return errors.New("unexpected object")
			}
			reviews.Add(1)
			time.Sleep(delay)
			if user, ok := users[review.Spec.Token]; ok {
				review.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: user, Audiences: review.Spec.Audiences}
				return nil
			}
			review.Status = authenticationv1.TokenReviewStatus{Error: "invalid bearer token"}
			return nil
		},
	}).Build()
}

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func TestReviewerAsksOncePerTokenAndTTL(t *testing.T) {
	var reviews atomic.Int32
	ana := authenticationv1.UserInfo{Username: "ana", Groups: []string{"system:authenticated"}}
	c := &clock{now: time.Unix(1_800_000_000, 0)}
	r := NewReviewer(reviewingClient(map[string]authenticationv1.UserInfo{"good.token": ana}, &reviews, 20*time.Millisecond), audience, c.Now)
	ctx := context.Background()

	// Concurrent requests with one refused token share one review.
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if _, err := r.Review(ctx, "bad.token"); !errors.Is(err, ErrUnauthenticated) {
				t.Errorf("bad token: got %v, want ErrUnauthenticated", err)
			}
		})
	}
	wg.Wait()
	if got := reviews.Load(); got != 1 {
		t.Fatalf("20 concurrent requests with one bad token sent %d TokenReviews, want 1", got)
	}
	c.advance(RefusalTTL - time.Second)
	_, _ = r.Review(ctx, "bad.token")
	if got := reviews.Load(); got != 1 {
		t.Fatalf("a refusal was asked again within RefusalTTL: %d reviews", got)
	}
	c.advance(time.Second)
	_, _ = r.Review(ctx, "bad.token")
	if got := reviews.Load(); got != 2 {
		t.Fatalf("a refusal was not asked again after RefusalTTL: %d reviews", got)
	}

	for range 3 {
		user, err := r.Review(ctx, "good.token")
		if err != nil || user.Username != "ana" {
			t.Fatalf("good token: %v %v", user, err)
		}
	}
	if got := reviews.Load(); got != 3 {
		t.Fatalf("an accepted token was reviewed more than once within ReviewTTL: %d reviews", got)
	}
	c.advance(ReviewTTL)
	_, _ = r.Review(ctx, "good.token")
	if got := reviews.Load(); got != 4 {
		t.Fatalf("an accepted token was not reviewed again after ReviewTTL: %d reviews", got)
	}
}

func TestReviewerRefusesMalformedTokensUnasked(t *testing.T) {
	var reviews atomic.Int32
	r := NewReviewer(reviewingClient(nil, &reviews, 0), audience, nil)
	for _, token := range []string{"", "a b", "tok\x00en", "<script>", "ünïcode", "==", "a=b", strings.Repeat("a", MaxTokenLength+1)} {
		_, err := r.Review(context.Background(), token)
		if !errors.Is(err, ErrUnauthenticated) || !errors.Is(err, ErrMalformedToken) {
			t.Errorf("token %.20q: got %v, want ErrUnauthenticated and ErrMalformedToken", token, err)
		}
	}
	if got := reviews.Load(); got != 0 {
		t.Fatalf("malformed tokens sent %d TokenReviews, want 0", got)
	}
	for _, token := range []string{"eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhIn0.c2ln", "abcdef.0123456789abcdef", "YWJj+/==", strings.Repeat("a", MaxTokenLength)} {
		if !WellFormed(token) {
			t.Errorf("token %.20q is a bearer token, but WellFormed refuses it", token)
		}
	}
}

func TestReviewerRefusesPrivilegedUsers(t *testing.T) {
	var reviews atomic.Int32
	admin := authenticationv1.UserInfo{Username: "kube-admin", Groups: []string{"system:masters", "system:authenticated"}}
	r := NewReviewer(reviewingClient(map[string]authenticationv1.UserInfo{"admin.token": admin}, &reviews, 0), audience, nil)
	for range 2 {
		user, err := r.Review(context.Background(), "admin.token")
		if !errors.Is(err, ErrPrivileged) || errors.Is(err, ErrUnauthenticated) {
			t.Fatalf("got %v, want ErrPrivileged", err)
		}
		if err.Error() != `the front end does not act for Kubernetes' own identities: user "kube-admin" is in group "system:masters"` {
			t.Fatalf("unclear refusal: %v", err)
		}
		if user.Username != "kube-admin" {
			t.Fatalf("the refusal names no user: %+v", user)
		}
	}
	if got := reviews.Load(); got != 1 {
		t.Fatalf("%d reviews, want 1", got)
	}
}

func TestImpersonableRefusesReservedIdentities(t *testing.T) {
	for _, tc := range []struct {
		user    authenticationv1.UserInfo
		refused bool
	}{
		{authenticationv1.UserInfo{Username: "ana@example.com", Groups: []string{"system:authenticated", "payments"}}, false},
		{authenticationv1.UserInfo{Username: "system:serviceaccount:agents:bot", Groups: []string{"system:serviceaccounts", "system:serviceaccounts:agents", "system:authenticated"}}, false},
		{authenticationv1.UserInfo{Username: "ana", Groups: []string{"system:masters"}}, true},
		{authenticationv1.UserInfo{Username: "ana", Groups: []string{"system:nodes"}}, true},
		{authenticationv1.UserInfo{Username: "ana", Groups: []string{"system:unauthenticated"}}, true},
		{authenticationv1.UserInfo{Username: "ana", Groups: []string{"system:bootstrappers:kubeadm:default-node-token"}}, true},
		{authenticationv1.UserInfo{Username: "ana", Groups: []string{"system:serviceaccounts:a:b"}}, true},
		{authenticationv1.UserInfo{Username: "ana", Groups: []string{"system:serviceaccounts:"}}, true},
		{authenticationv1.UserInfo{Username: "system:admin"}, true},
		{authenticationv1.UserInfo{Username: "system:kube-controller-manager"}, true},
		{authenticationv1.UserInfo{Username: "system:node:worker-1", Groups: []string{"system:nodes"}}, true},
		{authenticationv1.UserInfo{Username: "system:anonymous"}, true},
		{authenticationv1.UserInfo{Username: "system:serviceaccount:kube-system"}, true},
		{authenticationv1.UserInfo{Username: "system:serviceaccount:a:b:c"}, true},
	} {
		err := Impersonable(tc.user)
		if refused := errors.Is(err, ErrPrivileged); refused != tc.refused {
			t.Errorf("%+v: refused %v (%v), want %v", tc.user, refused, err, tc.refused)
		}
	}
}

func TestServiceAccountByNameKeepsOnlyAServiceAccountsName(t *testing.T) {
	sa := authenticationv1.UserInfo{Username: "system:serviceaccount:agents:bot", UID: "u-1", Groups: []string{"system:serviceaccounts"},
		Extra: map[string]authenticationv1.ExtraValue{"authentication.kubernetes.io/pod-name": {"bot-1"}}}
	if got := ServiceAccountByName(sa); got.Username != sa.Username || got.UID != "" || got.Groups != nil || got.Extra != nil {
		t.Errorf("a ServiceAccount keeps more than its name: %+v", got)
	}
	ana := authenticationv1.UserInfo{Username: "ana", UID: "u-2", Groups: []string{"payments"}}
	if got := ServiceAccountByName(ana); got.Username != "ana" || got.UID != "u-2" || len(got.Groups) != 1 {
		t.Errorf("another user lost what was authenticated: %+v", got)
	}
}
