// Package webconsole is toolledger's web console: the queue of actions that
// need a human, each action's ledger record and timeline, the tools and a
// dashboard of counts, and the three things a person may do from it:
// approve, deny (a ToolApproval bound to the digest the page showed) and
// resolve (a ToolResolution). It never edits a ToolAction.
//
// Every request to the API server is made as the signed-in user: locally,
// the kubeconfig's user, as kubectl proxy does; in a cluster, the user a
// bearer token of the console's audience authenticates (a TokenReview),
// impersonated (package identity). A form is shown only where a
// SelfSubjectAccessReview says the user may submit it; the API server still
// decides.
package webconsole

import (
	"context"
	"crypto/rand"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sync/semaphore"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/internal/identity"
	"github.com/toolledger/toolledger/internal/serve"
)

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed static
var staticFiles embed.FS

// maxUsers bounds the per-user clients kept in the cluster mode; the least
// recently used is dropped first.
const maxUsers = 256

// Options configure a Server.
type Options struct {
	// Config is the console's own identity. Locally every request acts as
	// it; in the cluster mode it reviews tokens and impersonates users.
	Config *rest.Config
	// Audience, when set, selects the cluster mode: every request needs a
	// bearer token issued for this audience (from the Authorization header,
	// or the cookie that signing in sets). Empty selects the local mode.
	Audience string
	// Namespace is the namespace shown when a page names none.
	Namespace string
	// CSRFKey signs the forms' tokens; replicas behind one Service need the
	// same key. A random one when empty.
	CSRFKey []byte
	// RateLimit limits each client address, before its token is reviewed;
	// nil limits nothing.
	RateLimit *serve.RateLimit
	// Now is the clock; time.Now when nil.
	Now    func() time.Time
	Logger logr.Logger
}

// Server serves the console.
type Server struct {
	opts  Options
	kube  client.Client
	self  *user
	users *identity.Cache[*user]
	// reviewer authenticates tokens in the cluster mode.
	reviewer *identity.Reviewer
	csrf     csrf
	pages    map[string]*template.Template
	handler  http.Handler
	// searches holds the history searches running (maxSearches).
	searches *semaphore.Weighted
}

// New returns a console over opts. In the local mode it asks the API server
// who the kubeconfig's user is, the user of every request.
func New(ctx context.Context, opts Options) (*Server, error) {
	if opts.Config == nil {
		return nil, errors.New("no Kubernetes client configuration")
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if len(opts.CSRFKey) == 0 {
		opts.CSRFKey = make([]byte, 32)
		if _, err := rand.Read(opts.CSRFKey); err != nil {
			return nil, fmt.Errorf("cannot make a CSRF key: %w", err)
		}
	}
	scheme := runtime.NewScheme()
	if err := authenticationv1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("cannot build the scheme: %w", err)
	}
	kube, err := client.New(opts.Config, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("cannot create a Kubernetes client: %w", err)
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	s := &Server{
		opts: opts, kube: kube, pages: pages,
		users: identity.NewCache[*user](maxUsers), reviewer: identity.NewReviewer(kube, opts.Audience, opts.Now),
		csrf: csrf{key: opts.CSRFKey, now: opts.Now}, searches: semaphore.NewWeighted(maxSearches),
	}
	if opts.Audience == "" {
		info, err := identity.Self(ctx, kube)
		if err != nil {
			return nil, err
		}
		if s.self, err = newUser(opts.Config, info); err != nil {
			return nil, err
		}
	}
	s.handler = s.routes()
	return s, nil
}

// ServeHTTP serves the console.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// routes are the console's pages and forms, behind the headers every
// response carries, the per-client rate limit, the cross-origin check of
// every POST, and, apart from the static files, the signed-in user.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(staticFiles, "static") // the embedded folder exists
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/queue", http.StatusSeeOther) })
	if s.opts.Audience != "" {
		mux.HandleFunc("GET /sign-in", s.signInPage)
		mux.HandleFunc("POST /sign-in", s.signIn)
		mux.HandleFunc("POST /sign-out", s.signOut)
	}
	mux.Handle("GET /queue", s.signedIn(s.queuePage))
	mux.Handle("GET "+eventsPath, s.signedIn(s.events))
	mux.Handle("GET /actions/{namespace}/{name}", s.signedIn(s.actionPage))
	mux.Handle("POST /actions/{namespace}/{name}/decide", s.signedIn(s.decide))
	mux.Handle("POST /actions/{namespace}/{name}/resolve", s.signedIn(s.resolve))
	mux.Handle("GET /tools", s.signedIn(s.toolsPage))
	mux.Handle("GET /dashboard", s.signedIn(s.dashboardPage))
	mux.Handle("GET /history", s.signedIn(s.historyPage))

	var h http.Handler = mux
	// POSTs from another origin are refused before any handler runs, by
	// the browser's own Sec-Fetch-Site or Origin header; the forms' tokens
	// (csrf) refuse what gets past it.
	h = http.NewCrossOriginProtection().Handler(h)
	if s.opts.Audience == "" {
		h = loopbackHostOnly(h)
	}
	h = s.opts.RateLimit.Handler(h)
	return securityHeaders(h)
}

// contentSecurityPolicy allows the console's own script, styles and images
// only: no inline script or style, no frames, forms posting to itself.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		next.ServeHTTP(w, r)
	})
}
