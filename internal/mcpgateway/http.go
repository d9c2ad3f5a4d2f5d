package mcpgateway

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/toolledger/toolledger/internal/identity"
	"github.com/toolledger/toolledger/internal/serve"
)

// Paths the HTTP handler serves.
const (
	// MCPPath is the Streamable HTTP endpoint.
	MCPPath = "/mcp"
	// ResourceMetadataPath is the OAuth 2.0 protected resource metadata
	// (RFC 9728) of MCPPath, where MCP clients discover how to get a token.
	ResourceMetadataPath = "/.well-known/oauth-protected-resource"
)

// HTTPOptions configure the Streamable HTTP endpoint.
type HTTPOptions struct {
	// ResourceURL is the endpoint's URL as clients reach it, such as
	// https://toolledger-mcp.example.com/mcp: the protected resource its
	// metadata names.
	ResourceURL string
	// Audience is the audience a token must be issued for: a
	// ServiceAccount token requested for it (kubectl create token
	// --audience), or a token of an OIDC issuer the API server trusts with
	// it. ResourceURL when empty, as MCP's authorization asks (RFC 8707).
	Audience string
	// AuthorizationServers are the issuers the metadata names, where an MCP
	// client obtains a token.
	AuthorizationServers []string
	// LocalOnly serves without tokens, every call acting as the gateway's
	// own identity, and refuses every request that does not come from a
	// loopback address. For a desktop agent on the same machine.
	LocalOnly bool
	// RateLimit limits each client address, before its token is reviewed;
	// nil limits nothing.
	RateLimit *serve.RateLimit
}

// HTTPHandler serves the gateway over Streamable HTTP at MCPPath, over A2A
// at A2APath (with its card at AgentCardPath), and its plain HTTP front at
// every other path (FrontPath). MCP is stateless as the
// 2026-07-28 protocol is: each POST carries one request, and the ledger key
// (not a session) recognises a call sent again. Unless LocalOnly, every
// request needs a bearer token of the gateway's audience, which the API
// server authenticates (a TokenReview), and every call acts as that user by
// impersonation. Reviews are kept by the token's hash (identity.Reviewer),
// so a client repeating a token, valid or not, does not cost a review per
// request; a user the gateway must not impersonate (identity.Impersonable)
// is refused with 403.
func (g *Gateway) HTTPHandler(opts HTTPOptions) (http.Handler, error) {
	mcpHandler := uniqueMembersOnly(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return g.server }, &mcp.StreamableHTTPOptions{
		Stateless: true,
		// The action goes on without the caller; its wait need not.
		PropagateRequestCancellation: true,
	}))
	mux := http.NewServeMux()
	resource, err := url.Parse(opts.ResourceURL)
	absolute := err == nil && resource.Scheme != "" && resource.Host != ""
	// base is where A2A clients reach the gateway; a local-only gateway
	// without a resource URL is reached at the Host its clients name.
	base := ""
	if absolute {
		base = resource.Scheme + "://" + resource.Host
	}
	// The agent card is public, as A2A clients fetch it before they
	// authenticate; it names no skills.
	if opts.LocalOnly {
		mux.Handle("GET "+AgentCardPath, loopbackOnly(g.agentCardHandler(base)))
		mux.Handle(MCPPath, loopbackOnly(mcpHandler))
		mux.Handle(A2APath, loopbackOnly(browserSafe(g.a2a(base))))
		mux.Handle("/", loopbackOnly(browserSafe(g.front())))
		return opts.RateLimit.Handler(mux), nil
	}
	if !absolute {
		return nil, fmt.Errorf("the resource URL %q is not an absolute URL", opts.ResourceURL)
	}
	mux.Handle("GET "+AgentCardPath, g.agentCardHandler(base))
	verifier := tokenVerifier(identity.NewReviewer(g.kube, cmp.Or(opts.Audience, opts.ResourceURL), nil))
	metadataURL := resource.Scheme + "://" + resource.Host + ResourceMetadataPath + resource.Path
	requireToken := auth.RequireBearerToken(verifier, &auth.RequireBearerTokenOptions{
		ResourceMetadataURL: metadataURL,
		// A TokenReview proves the token valid now; not every token
		// carries its expiry in a form the gateway could read.
		AllowMissingExpiration: true,
	})
	mux.Handle(MCPPath, requireToken(refusePrivileged(mcpHandler)))
	mux.Handle(A2APath, requireToken(refusePrivileged(browserSafe(g.a2a(base)))))
	mux.Handle("/", requireToken(refusePrivileged(browserSafe(g.front()))))
	metadata := auth.ProtectedResourceMetadataHandler(&oauthex.ProtectedResourceMetadata{
		Resource:               opts.ResourceURL,
		AuthorizationServers:   opts.AuthorizationServers,
		BearerMethodsSupported: []string{"header"},
		ResourceName:           "toolledger MCP gateway, namespace " + g.opts.Namespace,
	})
	mux.Handle(ResourceMetadataPath+resource.Path, metadata)
	if resource.Path != "" && resource.Path != "/" {
		mux.Handle(ResourceMetadataPath, metadata)
	}
	return opts.RateLimit.Handler(mux), nil
}

// loopbackOnly refuses requests from other machines: without tokens, the
// only caller may be the user who started the gateway. It also refuses a
// request for a host name other than a loopback one: a web page whose name
// an attacker re-points at 127.0.0.1 (DNS rebinding) would otherwise be
// same-origin with the gateway.
func loopbackOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !serve.IsLoopback(r.RemoteAddr) {
			http.Error(w, "the local-only gateway serves loopback clients only", http.StatusForbidden)
			return
		}
		host := r.Host
		if h, _, err := net.SplitHostPort(r.Host); err == nil {
			host = h
		}
		host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
		if !strings.EqualFold(host, "localhost") && !serve.IsLoopback(host) {
			http.Error(w, fmt.Sprintf("the local-only gateway answers requests for a loopback host only, not %q", r.Host), http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// browserSafe refuses cross-origin requests from browsers, which a page
// elsewhere could otherwise send with the user's network position; clients
// that are not browsers send neither Sec-Fetch-Site nor Origin.
func browserSafe(next http.Handler) http.Handler {
	return http.NewCrossOriginProtection().Handler(next)
}

// ErrNotLoopback refuses a local-only listener on an address other
// machines can reach.
var ErrNotLoopback = errors.New("the local-only mode serves without tokens, so it listens on a loopback address only (127.0.0.1:PORT or [::1]:PORT)")
