package mcpgateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/auth"
	authenticationv1 "k8s.io/api/authentication/v1"

	"github.com/toolledger/toolledger/internal/identity/identitytest"
)

// A token the API server authenticates as a member of system:masters is
// answered 403, naming why, and the MCP handler never runs.
func TestPrivilegedCallersAreRefused(t *testing.T) {
	masters := authenticationv1.UserInfo{Username: "kube-admin", Groups: []string{"system:masters", "system:authenticated"}}
	served := false
	handler := auth.RequireBearerToken(tokenVerifier(identitytest.ReviewerAs("https://mcp.example", masters)), &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(
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
