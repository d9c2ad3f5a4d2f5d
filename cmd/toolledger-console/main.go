// Command toolledger-console is toolledger's web console: the queue of
// actions that need a human, each action's record and timeline, the tools
// and counts, and approve / deny / resolve, every request made as the
// signed-in user. See docs/console.md.
//
//	toolledger-console                                   # local: as the kubeconfig's user, on 127.0.0.1:8087
//	toolledger-console --audience toolledger-console --listen :8443 --tls-cert-file tls.crt --tls-key-file tls.key
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/toolledger/toolledger/internal/serve"
	"github.com/toolledger/toolledger/internal/webconsole"
)

type flags struct {
	listen      string
	audience    string
	namespace   string
	csrfKeyFile string
	certFile    string
	keyFile     string
	as          string
	asGroups    []string
	rateLimit   *serve.RateLimit
}

func main() {
	var f flags
	flag.StringVar(&f.listen, "listen", "127.0.0.1:8087", "Address to serve on. Without --audience (the local mode) it must be a loopback address.")
	flag.StringVar(&f.audience, "audience", "", "Serve the cluster mode: every request needs a bearer token issued for this audience, reviewed by the API server, and acts as its user by impersonation. Empty: the local mode, every request acting as the kubeconfig's user.")
	flag.StringVar(&f.namespace, "namespace", "", "Namespace the pages show when they name none; * for all. Default: the kubeconfig context's namespace (local mode), all namespaces (cluster mode).")
	flag.StringVar(&f.csrfKeyFile, "csrf-key-file", "", "File whose content signs the forms' tokens; replicas behind one Service need the same. A random key when empty.")
	flag.StringVar(&f.certFile, "tls-cert-file", "", "Serve HTTPS with this certificate (and --tls-key-file).")
	flag.StringVar(&f.keyFile, "tls-key-file", "", "The private key of --tls-cert-file.")
	flag.StringVar(&f.as, "as", "", "Local mode: act as this user (impersonated by the kubeconfig's user, as kubectl --as does).")
	flag.Func("as-group", "Local mode, with --as: a group to act as (repeatable).", func(g string) error {
		f.asGroups = append(f.asGroups, g)
		return nil
	})
	rateLimit := serve.RateLimitFlags(flag.CommandLine)
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	f.rateLimit = rateLimit()
	log := zap.New(zap.UseFlagOptions(&zapOpts))
	ctrl.SetLogger(log)
	if err := run(f, log); err != nil {
		log.Error(err, "toolledger-console failed")
		os.Exit(1)
	}
}

func run(f flags, log logr.Logger) error {
	if f.audience == "" && !webconsole.IsLoopbackHost(f.listen) {
		return fmt.Errorf("--listen %s: the local mode acts as the kubeconfig's user for whoever connects, so it listens on a loopback address only (127.0.0.1:PORT); use --audience to serve others", f.listen)
	}
	if f.as != "" && f.audience != "" || len(f.asGroups) > 0 && f.as == "" {
		return errors.New("--as is for the local mode (without --audience), and --as-group needs --as")
	}
	if (f.certFile == "") != (f.keyFile == "") {
		return errors.New("--tls-cert-file and --tls-key-file go together")
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("cannot find a kubeconfig or in-cluster configuration: %w", err)
	}
	if f.as != "" {
		cfg.Impersonate = rest.ImpersonationConfig{UserName: f.as, Groups: f.asGroups}
	}
	namespace := f.namespace
	if namespace == "" && f.audience == "" {
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		if kubeconfig := flag.Lookup("kubeconfig"); kubeconfig != nil {
			rules.ExplicitPath = kubeconfig.Value.String()
		}
		namespace, _, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).Namespace()
		if err != nil {
			return fmt.Errorf("cannot read the kubeconfig's namespace: %w", err)
		}
	}
	var csrfKey []byte
	if f.csrfKeyFile != "" {
		if csrfKey, err = os.ReadFile(f.csrfKeyFile); err != nil {
			return fmt.Errorf("cannot read --csrf-key-file: %w", err)
		}
		if len(csrfKey) < 32 {
			return fmt.Errorf("--csrf-key-file %s holds %d bytes; the key needs at least 32", f.csrfKeyFile, len(csrfKey))
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	console, err := webconsole.New(ctx, webconsole.Options{Config: cfg, Audience: f.audience, Namespace: namespace, CSRFKey: csrfKey, RateLimit: f.rateLimit, Logger: log})
	if err != nil {
		return err
	}
	var lc net.ListenConfig
	listener, err := lc.Listen(ctx, "tcp", f.listen)
	if err != nil {
		return fmt.Errorf("cannot listen on %s: %w", f.listen, err)
	}
	scheme := "http"
	if f.certFile != "" {
		scheme = "https"
	}
	mode := "local, as the kubeconfig's user"
	if f.as != "" {
		mode = "local, as " + f.as
	}
	if f.audience != "" {
		mode = "bearer tokens of audience " + f.audience
	}
	log.Info("Serving the console", "url", scheme+"://"+listener.Addr().String()+"/", "auth", mode, "namespace", namespace)
	return serve.Serve(ctx, listener, console, f.certFile, f.keyFile)
}
