// Package mcpgateway serves a namespace's tool catalog over the Model
// Context Protocol: every Tool, and every ClusterTool that admits the
// namespace, is an MCP tool, and every call of one is a ToolAction, so an
// MCP agent that repeats a call (after a timeout, a lost stream, or because
// another agent had the same idea) causes one effect per intent.
//
// The protocol carries no idempotency key. The gateway derives one from the
// caller, the caller's run and step (when the request's _meta names them),
// the tool and the canonical arguments (see DeriveKey), or takes the caller's own
// from _meta; the ledger, not the protocol, recognises a repeat.
package mcpgateway

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	authorizationclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/internal/identity"
	"github.com/toolledger/toolledger/internal/ledgerclient"
	"github.com/toolledger/toolledger/pkg/sdk"
)

// Name is the gateway's MCP implementation name.
const Name = "toolledger-mcp"

// Defaults of Options.
const (
	DefaultWait             = 20 * time.Second
	DefaultProgressInterval = 2 * time.Second
)

// Options configure a Gateway.
type Options struct {
	// Config is the gateway's own identity: it reads the catalog with it
	// and, over HTTP, impersonates callers with it.
	Config *rest.Config
	// Namespace is the tenant the gateway serves.
	Namespace string
	// ClusterTools publishes the ClusterTools that admit Namespace, besides
	// its Tools.
	ClusterTools bool
	// Wait bounds how long a call waits for its action to settle before it
	// answers with the phase in flight; DefaultWait when zero.
	Wait time.Duration
	// ProgressInterval is how often a call in flight sends a progress
	// notification, when the caller asked for progress;
	// DefaultProgressInterval when zero.
	ProgressInterval time.Duration
	// ConstrainedImpersonation impersonates ServiceAccount callers by their
	// name alone, so that constrained impersonation's serviceaccount mode
	// (KEP-5284, Kubernetes 1.36+) authorizes the gateway's requests for
	// them, under the ClusterRole toolledger-mcp-gateway-constrained.
	ConstrainedImpersonation bool
	// Version is reported as the MCP server's version.
	Version string
	Logger  logr.Logger
}

// Gateway is one MCP server over one namespace's catalog.
type Gateway struct {
	opts      Options
	server    *mcp.Server
	publisher *publisher

	// kube is the gateway's own client, for its reviews.
	kube client.Client

	// self is the gateway's own identity: over stdio and in the local-only
	// HTTP mode, the user who runs it.
	self *caller

	// ledger invokes for every caller: each call impersonates its caller
	// (the request's context names them), while the watch where calls wait
	// is the gateway's own, one for all callers.
	ledger *sdk.Client
	// reader reads records as the caller (impersonated), for A2A's GetTask.
	reader client.Client
	// records finds a key's records as the caller (impersonated): in etcd,
	// its Tombstone, archived.
	records *ledgerclient.Ledger
	// access decides who may list the tools.
	access *access
}

// New returns a gateway over opts.Namespace. It asks the API server who its
// own identity is (a SelfSubjectReview), since that user is the caller of
// every call that carries no token. Run starts following the catalog.
func New(ctx context.Context, opts Options) (*Gateway, error) {
	if opts.Namespace == "" {
		return nil, errors.New("the namespace to serve is empty")
	}
	if opts.Wait <= 0 {
		opts.Wait = DefaultWait
	}
	if opts.ProgressInterval <= 0 {
		opts.ProgressInterval = DefaultProgressInterval
	}
	s, err := scheme()
	if err != nil {
		return nil, err
	}
	kube, err := client.New(opts.Config, client.Options{Scheme: s})
	if err != nil {
		return nil, fmt.Errorf("cannot create a Kubernetes client: %w", err)
	}
	g := &Gateway{opts: opts, kube: kube}
	self, err := g.selfCaller(ctx)
	if err != nil {
		return nil, err
	}
	g.self = self
	shared := identity.ImpersonatingFromContext(opts.Config)
	if g.ledger, err = sdk.NewClient(shared); err != nil {
		return nil, fmt.Errorf("cannot create the ledger client: %w", err)
	}
	authz, err := authorizationclient.NewForConfig(shared)
	if err != nil {
		return nil, fmt.Errorf("cannot create an authorization client: %w", err)
	}
	g.access = newAccess(opts.Namespace, authz.SelfSubjectAccessReviews())
	if g.reader, err = client.New(shared, client.Options{Scheme: s}); err != nil {
		return nil, fmt.Errorf("cannot create the impersonating reader: %w", err)
	}
	if g.records, err = ledgerclient.NewLedger(shared, Name); err != nil {
		return nil, fmt.Errorf("cannot create the impersonating ledger reader: %w", err)
	}
	g.server = mcp.NewServer(&mcp.Implementation{Name: Name, Title: "toolledger", Version: opts.Version}, &mcp.ServerOptions{
		Instructions: instructions,
		// Tools come and go with the catalog, after clients connect.
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}},
	})
	g.server.AddReceivingMiddleware(g.authorizeListing)
	if g.publisher, err = newPublisher(opts, s, g.server, g.handler); err != nil {
		return nil, err
	}
	return g, nil
}

// instructions tell a model, once, what every tool of the gateway shares.
const instructions = "Every tool of this server is recorded in a ledger (toolledger) and takes effect at most once per intent. " +
	"A call repeated with the same arguments (after a timeout, or by another agent of the same user) returns the first call's outcome instead of acting again. " +
	"When a result says an action is in flight, unknown, escalated to a human or awaiting approval, do not retry it under a new key or with changed arguments: " +
	"call the same tool again later with the same arguments to read the settled outcome. " +
	"To ask for a second effect on purpose, send a new _meta \"toolledger.dev/stepID\" (or your own \"toolledger.dev/key\")."

// Server is the MCP server, for a transport of the caller's choosing; over
// it, every call acts as the gateway's own identity.
func (g *Gateway) Server() *mcp.Server { return g.server }

// Run follows the catalog, publishing its tools, until ctx ends. It returns
// once the first catalog is published, with a nil error; sync failures
// afterwards are logged and retried.
func (g *Gateway) Run(ctx context.Context) error {
	return g.publisher.run(ctx)
}

// Tools lists the names of the tools published now, for logs and tests.
func (g *Gateway) Tools() []string { return g.publisher.names() }
