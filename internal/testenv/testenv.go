// Package testenv starts what the envtest suites share: a real
// kube-apiserver and etcd with toolledger's CRDs installed, the demo
// downstream, and toolledger managers. It is imported by tests only.
package testenv

import (
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"time"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/toolledger/toolledger/cmd/manager/app"
	"github.com/toolledger/toolledger/internal/demo"
)

// repoRoot is found from this file, so suites in any folder find bin/ and config/.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// ControlPlane is a running kube-apiserver and etcd.
type ControlPlane struct {
	Env *envtest.Environment
	// Config reaches the API server as an admin, without client-side rate limits
	// worth measuring: suites that race many callers must not measure the limiter.
	Config *rest.Config
	// Client is an admin client that knows the toolledger types.
	Client client.Client
}

// StartControlPlane starts the control plane from bin/ (KUBEBUILDER_ASSETS
// wins when set) with the CRDs from config/crd/bases. A non-empty
// etcdDataDir survives an etcd restart.
func StartControlPlane(etcdDataDir string) (*ControlPlane, error) {
	root := repoRoot()
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(root, "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: filepath.Join(root, "bin"),
	}
	if etcdDataDir != "" {
		env.ControlPlane = envtest.ControlPlane{Etcd: &envtest.Etcd{DataDir: etcdDataDir}}
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("cannot start the control plane (run `make controlplane` to build bin/kube-apiserver and bin/etcd): %w", err)
	}
	cfg.QPS, cfg.Burst = 500, 1000
	c, err := client.New(cfg, client.Options{Scheme: app.Scheme()})
	if err != nil {
		_ = env.Stop()
		return nil, err
	}
	return &ControlPlane{Env: env, Config: cfg, Client: c}, nil
}

// Stop stops the control plane.
func (p *ControlPlane) Stop() error { return p.Env.Stop() }

// StartDownstream serves a demo downstream on 127.0.0.1.
func StartDownstream() (*demo.Server, *httptest.Server) {
	server := demo.NewServer()
	return server, httptest.NewServer(server)
}

// StartManager runs a toolledger manager until stop is called; stop waits
// for it and returns what Start returned. Metrics and probes are off, and
// several managers may run in one process.
func StartManager(cfg *rest.Config, opts app.Options) (stop func() error, err error) {
	opts.MetricsAddr, opts.ProbeAddr = "0", "0"
	if opts.GracefulShutdownTimeout == nil {
		grace := time.Second
		opts.GracefulShutdownTimeout = &grace
	}
	managerOpts := app.ManagerOptions(opts)
	// Several managers run in one process, each with its own controllers.
	skip := true
	managerOpts.Controller.SkipNameValidation = &skip
	mgr, err := ctrl.NewManager(rest.CopyConfig(cfg), managerOpts)
	if err != nil {
		return nil, err
	}
	if err := app.Setup(mgr, opts); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var result error
	stopped := false
	return func() error {
		if !stopped {
			stopped = true
			cancel()
			result = <-done
		}
		return result
	}, nil
}

// SetLogger sends controller-runtime's logs to w, such as GinkgoWriter.
func SetLogger(w io.Writer) {
	ctrl.SetLogger(zap.New(zap.WriteTo(w), zap.UseDevMode(true)))
}
