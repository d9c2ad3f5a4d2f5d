package mcpgateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/auth"
	authenticationv1 "k8s.io/api/authentication/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/toolledger/toolledger/internal/identity"
)

// A token the API server authenticates as a member of system:masters is
// answered 403, naming why, and the MCP handler never runs.
func TestPrivilegedCallersAreRefused(t *testing.T) {
	masters := authenticationv1.UserInfo{Username: "kube-admin", Groups: []string{"system:masters", "system:authenticated"}}
	kube := fake.NewClientBuilder().WithInterceptorFuncs(interceptor.Funcs{
		Create: func(_ context.Context, _ client.WithWatch, obj client.Object, _ ...client.CreateOption) error {
			review := obj.(*authenticationv1.TokenReview)
			review.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: masters, Audiences: review.Spec.Audiences}
			return nil
		},
	}).Build()
	served := false
	handler := auth.RequireBearerToken(tokenVerifier(identity.NewReviewer(kube, "https://mcp.example", nil)), &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(
		refusePrivileged(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served = true })))

	req := httptest.NewRequestWithContext(context.Background(), http.MethodPost, "/mcp", nil)
	req.Header.Set("Authorization", "Bearer admin.token")
	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, req)

	if rec.Code != http.StatusForbidden || served {
		t.Fatalf("status %d, served %v; want 403, not served", rec.Code, served)
	}
	want := `the front end does not act for Kubernetes' own identities: user "kube-admin" is in group "system:masters": the gateway acts only for ordinary users and ServiceAccounts`
	if got := strings.TrimSpace(rec.Body.String()); got != want {
		t.Fatalf("body %q, want %q", got, want)
	}
}
