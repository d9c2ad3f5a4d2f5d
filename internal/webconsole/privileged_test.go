package webconsole

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/client-go/rest"

	"github.com/toolledger/toolledger/internal/identity/identitytest"
)

// A token the API server authenticates as a member of system:masters is
// answered 403, naming why: the console does not act for that user.
func TestPrivilegedUsersAreRefused(t *testing.T) {
	masters := authenticationv1.UserInfo{Username: "kube-admin", Groups: []string{"system:masters", "system:authenticated"}}
	// The cluster mode asks the API server nothing until a request comes.
	s, err := New(context.Background(), Options{Config: &rest.Config{Host: "https://127.0.0.1:1"}, Audience: "console"})
	if err != nil {
		t.Fatal(err)
	}
	s.reviewer = identitytest.ReviewerAs("console", masters)

	req := httptest.NewRequestWithContext(context.Background(), http.MethodGet, "/queue", nil)
	req.Header.Set("Authorization", "Bearer admin.token")
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)

	if rec.Code != http.StatusForbidden {
		t.Fatalf("status %d, want 403", rec.Code)
	}
	if want := `the front end does not act for Kubernetes&#39; own identities: user &#34;kube-admin&#34; is in group &#34;system:masters&#34;`; !strings.Contains(rec.Body.String(), want) {
		t.Fatalf("the page does not say why: %s", rec.Body.String())
	}
	if s.users.Len() != 0 {
		t.Fatal("the console made a client impersonating system:masters")
	}
}
