// Command toolledger-mcp is the MCP gateway: it serves the Tools (and the
// admitted ClusterTools) of one namespace as MCP tools, and records every
// call as a ToolAction, so an agent that repeats a call causes one effect per
// intent. See docs/mcp.md.
//
//	toolledger-mcp --namespace NS                      # stdio, as the kubeconfig's user
//	toolledger-mcp --namespace NS --http 127.0.0.1:8090 --resource-url http://127.0.0.1:8090/mcp
//	toolledger-mcp --namespace NS --http 127.0.0.1:8090 --local-only
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/toolledger/toolledger/internal/mcpgateway"
	"github.com/toolledger/toolledger/internal/serve"
	"github.com/toolledger/toolledger/internal/telemetry"
)

// version is set at build time (-ldflags "-X main.version=...").
var version = "dev"

type flags struct {
	namespace    string
	clusterTools bool
	wait         time.Duration
	progress     time.Duration
	http         string
	localOnly    bool
	constrained  bool
	httpOpts     mcpgateway.HTTPOptions
}

func main() {
	var f flags
	flag.StringVar(&f.namespace, "namespace", "", "Namespace whose catalog the gateway serves, and where its calls are recorded (required).")
	flag.BoolVar(&f.clusterTools, "cluster-tools", true, "Also serve the ClusterTools that admit the namespace (needs list and watch on clustertools, and on the namespace itself).")
	flag.DurationVar(&f.wait, "wait", mcpgateway.DefaultWait, "How long a call waits for its action to settle before it answers with the phase in flight; the same call made again later returns the outcome.")
	flag.DurationVar(&f.progress, "progress-interval", mcpgateway.DefaultProgressInterval, "How often a call in flight sends a progress notification, to callers that ask for progress.")
	flag.StringVar(&f.http, "http", "", "Serve Streamable HTTP on this address (such as 127.0.0.1:8090) instead of stdio.")
	flag.BoolVar(&f.localOnly, "local-only", false, "With --http: serve without tokens, every call acting as the kubeconfig's user; the address must be a loopback one.")
	flag.BoolVar(&f.constrained, "constrained-impersonation", false, "With --http: impersonate ServiceAccount callers by their name alone, for constrained impersonation (Kubernetes 1.36+), under the ClusterRole toolledger-mcp-gateway-constrained (docs/mcp.md).")
	flag.StringVar(&f.httpOpts.ResourceURL, "resource-url", "", "With --http: the endpoint's URL as clients reach it (such as https://mcp.example.com/mcp), named by the protected resource metadata; http://ADDRESS/mcp when empty.")
	flag.StringVar(&f.httpOpts.Audience, "audience", "", "With --http: the audience a bearer token must be issued for (kubectl create token SA --audience ...); the resource URL when empty.")
	flag.Func("authorization-server", "With --http: an issuer where MCP clients get tokens, published in the protected resource metadata (repeatable).", func(s string) error {
		f.httpOpts.AuthorizationServers = append(f.httpOpts.AuthorizationServers, s)
		return nil
	})
	rateLimit := serve.RateLimitFlags(flag.CommandLine)
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	f.httpOpts.RateLimit = rateLimit()
	// stdout carries the protocol over stdio: logs go to stderr.
	log := zap.New(zap.UseFlagOptions(&zapOpts), zap.WriteTo(os.Stderr))
	ctrl.SetLogger(log)
	if err := run(f, log); err != nil {
		log.Error(err, "toolledger-mcp failed")
		os.Exit(1)
	}
}

func run(f flags, log logr.Logger) error {
	if f.namespace == "" {
		return errors.New("--namespace is required")
	}
	if f.localOnly && f.http == "" {
		return errors.New("--local-only needs --http")
	}
	if f.localOnly && !serve.IsLoopback(f.http) {
		return fmt.Errorf("--http %s: %w", f.http, mcpgateway.ErrNotLoopback)
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("cannot find a kubeconfig or in-cluster configuration: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	tracing, err := telemetry.Setup(ctx, "toolledger-mcp")
	if err != nil {
		return err
	}
	defer telemetry.Flush(tracing, log)
	gateway, err := mcpgateway.New(ctx, mcpgateway.Options{
		Config: cfg, Namespace: f.namespace, ClusterTools: f.clusterTools,
		Wait: f.wait, ProgressInterval: f.progress, ConstrainedImpersonation: f.constrained, Version: version, Logger: log,
	})
	if err != nil {
		return err
	}
	if err := gateway.Run(ctx); err != nil {
		return err
	}
	log.Info("Serving the catalog", "namespace", f.namespace, "tools", gateway.Tools())
	if f.http == "" {
		if err := gateway.Server().Run(ctx, &mcp.StdioTransport{}); err != nil && ctx.Err() == nil {
			return fmt.Errorf("serving stdio: %w", err)
		}
		return nil
	}
	return serveHTTP(ctx, gateway, f, log)
}

func serveHTTP(ctx context.Context, gateway *mcpgateway.Gateway, f flags, log logr.Logger) error {
	opts := f.httpOpts
	opts.LocalOnly = f.localOnly
	var lc net.ListenConfig
	listener, err := lc.Listen(ctx, "tcp", f.http)
	if err != nil {
		return fmt.Errorf("cannot listen on %s: %w", f.http, err)
	}
	if opts.ResourceURL == "" {
		opts.ResourceURL = "http://" + listener.Addr().String() + mcpgateway.MCPPath
	}
	handler, err := gateway.HTTPHandler(opts)
	if err != nil {
		_ = listener.Close()
		return err
	}
	mode := "bearer tokens of audience " + cmp.Or(opts.Audience, opts.ResourceURL)
	if opts.LocalOnly {
		mode = "local-only, no tokens"
	}
	log.Info("Serving Streamable HTTP", "url", "http://"+listener.Addr().String()+mcpgateway.MCPPath, "resource", opts.ResourceURL, "auth", mode)
	return serve.Serve(ctx, listener, handler, "", "")
}
