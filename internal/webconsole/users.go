package webconsole

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authorizationclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/identity"
	"github.com/toolledger/toolledger/internal/ledgerclient"
	"github.com/toolledger/toolledger/internal/serve"
)

// userAgent names the console to the API server.
const userAgent = "toolledger-console"

// tokenCookie holds the bearer token of a user who signed in with the form
// rather than through a proxy that sends the Authorization header.
const tokenCookie = "toolledger_token"

// user is who a request acts as, with the clients that act as them.
type user struct {
	info   authenticationv1.UserInfo
	id     string
	ledger *ledgerclient.Ledger
	access authorizationclient.SelfSubjectAccessReviewInterface
}

func newUser(cfg *rest.Config, info authenticationv1.UserInfo) (*user, error) {
	id, err := identity.ID(info)
	if err != nil {
		return nil, err
	}
	cfg = rest.CopyConfig(cfg)
	rest.AddUserAgent(cfg, userAgent)
	ledger, err := ledgerclient.NewLedger(cfg, userAgent)
	if err != nil {
		return nil, err
	}
	authz, err := authorizationclient.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("cannot create an authorization client: %w", err)
	}
	return &user{info: info, id: id, ledger: ledger, access: authz.SelfSubjectAccessReviews()}, nil
}

// mayCreate asks the API server whether the user may create resource (of
// toolledger's group) in namespace. A failed review answers no: a button
// is hidden, and the API server would decide anyway.
func (u *user) mayCreate(ctx context.Context, resource, namespace string) bool {
	review, err := u.access.Create(ctx, &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: namespace, Verb: "create", Group: v1alpha1.GroupVersion.Group, Resource: resource,
		},
	}}, metav1.CreateOptions{})
	return err == nil && review.Status.Allowed
}

// signedIn runs page as the request's user, or sends the browser to sign
// in (cluster mode, no token) or refuses the request (a token that the API
// server does not authenticate).
func (s *Server) signedIn(page func(http.ResponseWriter, *http.Request, *user)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.self != nil {
			page(w, r, s.self)
			return
		}
		token := bearerToken(r)
		if token == "" {
			if r.Method == http.MethodGet && r.URL.Path != eventsPath {
				http.Redirect(w, r, "/sign-in", http.StatusSeeOther)
				return
			}
			http.Error(w, "sign in first: send a bearer token for the console's audience", http.StatusUnauthorized)
			return
		}
		u, err := s.userOf(r.Context(), token)
		switch {
		case err == nil:
			page(w, r, u)
		case errors.Is(err, identity.ErrUnauthenticated) && r.Method == http.MethodGet && r.URL.Path != eventsPath && fromCookie(r):
			// The signed-in token expired or was revoked: sign in again.
			clearTokenCookie(w)
			http.Redirect(w, r, "/sign-in", http.StatusSeeOther)
		default:
			s.opts.Logger.Info("Refused a token", "reason", err.Error())
			status := refusalStatus(err)
			s.render(w, status, "error", s.pageData(r, nil, "Not signed in", errorPage{Message: "The token was not accepted: " + err.Error()}))
		}
	})
}

// refusalStatus is the status of a request whose token userOf refused:
// 401 for a token the API server does not authenticate, 403 for a user the
// console does not act for (identity.ErrPrivileged), 502 when the API
// server could not be asked.
func refusalStatus(err error) int {
	switch {
	case errors.Is(err, identity.ErrUnauthenticated):
		return http.StatusUnauthorized
	case errors.Is(err, identity.ErrPrivileged):
		return http.StatusForbidden
	default:
		return http.StatusBadGateway
	}
}

// fromCookie reports whether the request's token is the sign-in cookie's.
func fromCookie(r *http.Request) bool {
	return r.Header.Get("Authorization") == ""
}

// bearerToken is the request's token: the Authorization header's (from a
// proxy, or any HTTP client), else the sign-in cookie's.
func bearerToken(r *http.Request) string {
	if scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") {
		return strings.TrimSpace(token)
	}
	if c, err := r.Cookie(tokenCookie); err == nil {
		return c.Value
	}
	return ""
}

// userOf authenticates token (identity.Reviewer keeps the answers) and
// returns its user, with clients that impersonate them.
func (s *Server) userOf(ctx context.Context, token string) (*user, error) {
	info, err := s.reviewer.Review(ctx, token)
	if err != nil {
		return nil, err
	}
	id, err := identity.ID(info)
	if err != nil {
		return nil, err
	}
	if u, ok := s.users.Get(id); ok {
		return u, nil
	}
	u, err := newUser(identity.Impersonating(s.opts.Config, info), info)
	if err != nil {
		return nil, err
	}
	return s.users.Add(id, u), nil
}

func (s *Server) signInPage(w http.ResponseWriter, r *http.Request) {
	s.render(w, http.StatusOK, "sign-in", s.pageData(r, nil, "Sign in", signInPage{Audience: s.opts.Audience, CSRF: s.csrf.token(signInSubject)}))
}

// signInSubject is what the sign-in form's token is bound to: nobody is
// signed in yet.
const signInSubject = "sign-in"

// signIn checks the pasted token with the API server and keeps it in a
// cookie that scripts cannot read and that is sent only to the console,
// over HTTPS (browsers treat http://localhost and 127.0.0.1 as secure).
//
// SameSite is Lax, so that a link to an action from a chat or a mail opens
// signed in; every POST is guarded by the origin check and the form token.
func (s *Server) signIn(w http.ResponseWriter, r *http.Request) {
	if !s.parseForm(w, r) {
		return
	}
	if !s.csrf.valid(r.PostForm.Get(csrfField), signInSubject) {
		s.refuseForm(w, r, nil)
		return
	}
	token := strings.TrimSpace(r.PostForm.Get("token"))
	message := "Paste a token issued for the audience " + s.opts.Audience + "."
	if token != "" {
		_, err := s.userOf(r.Context(), token)
		if err == nil {
			setTokenCookie(w, token)
			http.Redirect(w, r, "/queue", http.StatusSeeOther)
			return
		}
		message = "The token was not accepted: " + err.Error()
	}
	s.render(w, http.StatusUnauthorized, "sign-in", s.pageData(r, nil, "Sign in",
		signInPage{Audience: s.opts.Audience, CSRF: s.csrf.token(signInSubject), Error: message}))
}

// signOut deletes the sign-in cookie. The form's token is checked while the
// cookie still names a user; one whose token no longer works is cleared
// without.
func (s *Server) signOut(w http.ResponseWriter, r *http.Request) {
	if !s.parseForm(w, r) {
		return
	}
	if u, err := s.userOf(r.Context(), bearerToken(r)); err == nil && !s.csrf.valid(r.PostForm.Get(csrfField), u.id) {
		s.refuseForm(w, r, u)
		return
	}
	clearTokenCookie(w)
	http.Redirect(w, r, "/sign-in", http.StatusSeeOther)
}

// setTokenCookie keeps token in the sign-in cookie, with the one set of
// flags the cookie ever has.
func setTokenCookie(w http.ResponseWriter, token string) {
	c := &http.Cookie{Name: tokenCookie, Value: token, Path: "/", HttpOnly: true, Secure: true, SameSite: http.SameSiteLaxMode}
	if token == "" {
		c.MaxAge = -1
	}
	http.SetCookie(w, c)
}

func clearTokenCookie(w http.ResponseWriter) { setTokenCookie(w, "") }

// loopbackHostOnly refuses, in the local mode, requests whose Host is not a
// loopback address or localhost: a page of another site cannot reach the
// console through a name it controls (DNS rebinding).
func loopbackHostOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !IsLoopbackHost(r.Host) {
			http.Error(w, "the local console answers requests for localhost or a loopback address only", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// IsLoopbackHost reports whether hostport names this machine: localhost or
// a loopback IP address.
func IsLoopbackHost(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = hostport
	}
	return strings.EqualFold(host, "localhost") || serve.IsLoopback(strings.Trim(host, "[]"))
}
