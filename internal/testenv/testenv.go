// Package testenv starts what the test harnesses share: a real
// kube-apiserver and etcd with toolledger's CRDs installed, the demo
// downstream, toolledger managers, and the Tools they call. The envtest
// suites, the end-to-end suite and the benchmarks use it; of the commands,
// only the local runner toolledger-dev does, for ApplyFile and to run its
// manager as the guard policy expects (guard.go).
package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"go.uber.org/zap/zapcore"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/toolledger/toolledger/cmd/manager/app"
	"github.com/toolledger/toolledger/internal/demo"
	"github.com/toolledger/toolledger/internal/egress"
	"github.com/toolledger/toolledger/internal/egress/egresstest"
)

// repoRoot is found from this file, so harnesses in any folder find bin/ and config/.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// ConfigPath is the path of elem under the repository's config/, from
// whichever folder a harness runs in.
func ConfigPath(elem ...string) string {
	return filepath.Join(append([]string{repoRoot(), "config"}, elem...)...)
}

// BinDir is the folder of the binaries the harnesses run: KUBEBUILDER_ASSETS
// when set (the Makefile sets it to BIN), else the repository's bin/.
func BinDir() string {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir
	}
	return filepath.Join(repoRoot(), "bin")
}

// ControlPlane is a running kube-apiserver and etcd.
type ControlPlane struct {
	Env *envtest.Environment
	// Config reaches the API server as an admin, without client-side rate limits
	// worth measuring: suites that race many callers must not measure the limiter.
	Config *rest.Config
	// Client is an admin client that knows the toolledger types.
	Client client.Client
	// frontProxyDir is removed at Stop when the control plane made it.
	frontProxyDir string
}

// ControlPlaneOptions shape a control plane. The zero value is what an
// envtest suite needs: temporary directories, no logs, envtest's timeouts.
type ControlPlaneOptions struct {
	// EtcdDataDir keeps etcd's data, so that it survives an etcd restart.
	EtcdDataDir string
	// APIServerCertDir keeps the API server's serving certificate and client
	// CA, so that a restarted API server keeps its port and every client
	// keeps working.
	APIServerCertDir string
	// APIServerLog and EtcdLog receive the processes' output.
	APIServerLog, EtcdLog io.Writer
	// StartTimeout and StopTimeout bound each process's start and its stop,
	// after which it is SIGKILLed.
	StartTimeout, StopTimeout time.Duration
}

// StartControlPlane starts the control plane from BinDir with the CRDs from
// config/crd/bases.
func StartControlPlane(opts ControlPlaneOptions) (*ControlPlane, error) {
	root := repoRoot()
	frontProxy, madeDir, err := frontProxyDir(opts.APIServerCertDir)
	if err != nil {
		return nil, err
	}
	apiServer := &envtest.APIServer{CertDir: opts.APIServerCertDir, Out: opts.APIServerLog, Err: opts.APIServerLog}
	if err := ConfigureFrontProxy(apiServer, frontProxy); err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(root, "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: BinDir(),
		ControlPlane: envtest.ControlPlane{
			APIServer: apiServer,
			Etcd:      &envtest.Etcd{DataDir: opts.EtcdDataDir, Out: opts.EtcdLog, Err: opts.EtcdLog},
		},
		ControlPlaneStartTimeout: opts.StartTimeout,
		ControlPlaneStopTimeout:  opts.StopTimeout,
	}
	cfg, err := env.Start()
	if err != nil {
		// Whichever process did start must not outlive the attempt.
		_ = env.Stop()
		return nil, fmt.Errorf("cannot start the control plane (run `make controlplane` to build bin/kube-apiserver and bin/etcd): %w", err)
	}
	cfg.QPS, cfg.Burst = 500, 1000
	c, err := client.New(cfg, client.Options{Scheme: app.Scheme()})
	if err != nil {
		_ = env.Stop()
		return nil, err
	}
	if err := CreateOperatorNamespace(context.Background(), c); err != nil {
		_ = env.Stop()
		return nil, err
	}
	return &ControlPlane{Env: env, Config: cfg, Client: c, frontProxyDir: madeDir}, nil
}

// Stop stops the control plane.
func (p *ControlPlane) Stop() error {
	err := p.Env.Stop()
	if p.frontProxyDir != "" {
		_ = os.RemoveAll(p.frontProxyDir)
	}
	return err
}

// FrontProxyClientName is the name of the API server's front-proxy client
// certificate, the only one an aggregated API trusts to name users.
const FrontProxyClientName = "front-proxy-client"

// frontProxyDir is where the front proxy's CA and client certificate are
// kept: beside the API server's own when those are kept, so that a
// restarted API server forwards users as before; else a directory of its
// own, returned as made so that Stop removes it.
func frontProxyDir(certDir string) (dir, made string, err error) {
	if certDir != "" {
		return filepath.Join(certDir, "front-proxy"), "", nil
	}
	made, err = os.MkdirTemp("", "toolledger-front-proxy-")
	return made, made, err
}

// ConfigureFrontProxy lets the API server forward users to aggregated APIs
// (the archive API), as a cluster's does: it gets a front-proxy CA and
// client certificate, kept in dir, and publishes how it forwards users in
// kube-system's extension-apiserver-authentication ConfigMap.
func ConfigureFrontProxy(apiServer *envtest.APIServer, dir string) error {
	ca, err := LoadOrNewCA(dir, "front-proxy-ca")
	if err != nil {
		return fmt.Errorf("cannot make the front proxy's CA: %w", err)
	}
	client := filepath.Join(dir, "client")
	if _, err := os.Stat(filepath.Join(client, "tls.crt")); err != nil {
		if err := ca.Issue(client, FrontProxyClientName); err != nil {
			return err
		}
	}
	args := apiServer.Configure()
	args.Set("requestheader-client-ca-file", filepath.Join(dir, "ca.crt"))
	args.Set("requestheader-allowed-names", FrontProxyClientName)
	args.Set("requestheader-username-headers", "X-Remote-User")
	args.Set("requestheader-uid-headers", "X-Remote-Uid")
	args.Set("requestheader-group-headers", "X-Remote-Group")
	args.Set("requestheader-extra-headers-prefix", "X-Remote-Extra-")
	args.Set("proxy-client-cert-file", filepath.Join(client, "tls.crt"))
	args.Set("proxy-client-key-file", filepath.Join(client, "tls.key"))
	return nil
}

// AddAdmin adds a user in system:masters, writes a kubeconfig for it to
// kubeconfigPath, for the processes and commands a harness runs, and
// returns its config.
func (p *ControlPlane) AddAdmin(name, kubeconfigPath string) (*rest.Config, error) {
	user, err := p.Env.AddUser(envtest.User{Name: name, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return nil, fmt.Errorf("cannot add the admin user %s: %w", name, err)
	}
	content, err := user.KubeConfig()
	if err != nil {
		return nil, fmt.Errorf("cannot build the kubeconfig of %s: %w", name, err)
	}
	if err := os.WriteFile(kubeconfigPath, content, 0o600); err != nil {
		return nil, err
	}
	return user.Config(), nil
}

// FreeLocalAddr returns a 127.0.0.1 address nothing listens on: its port
// was just free, and is closed again for the process that will take it.
// Another program may take it first: a server that can choose its own
// port and say which (listening on 127.0.0.1:0) should; the start of one
// that cannot is tried again on another port when the port was taken.
func FreeLocalAddr() (string, error) {
	var lc net.ListenConfig
	l, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := l.Addr().String()
	return addr, l.Close()
}

// StartDownstream serves a demo downstream on 127.0.0.1.
func StartDownstream() (*demo.Server, *httptest.Server) {
	server := demo.NewServer()
	return server, httptest.NewServer(server)
}

// LoopbackEgress is the egress policy of test managers: their downstreams
// listen on 127.0.0.1 and take credentials over plain HTTP, and nothing
// else is reachable.
func LoopbackEgress() egress.Policy {
	return egress.Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, PlainHTTP: []string{"127.0.0.1"}}
}

var (
	violationsMu sync.Mutex
	violations   []string
)

// EgressViolations are the addresses outside 127.0.0.0/8 that a test
// manager's egress dialer was asked for, and refused: the policy should
// have refused each first, so a suite fails unless there are none.
func EgressViolations() []string {
	violationsMu.Lock()
	defer violationsMu.Unlock()
	return slices.Clone(violations)
}

func recordViolation(address string) {
	violationsMu.Lock()
	defer violationsMu.Unlock()
	violations = append(violations, address)
}

// StartManager runs a toolledger manager until stop is called; stop waits
// for it and returns what Start returned. Probes are off, and so are
// metrics unless opts names an address; several managers may run in one
// process (they share controller-runtime's metrics registry). Without an egress allowance in
// opts, the manager has LoopbackEgress. Its tools resolve egresstest.Hosts
// only, and dial 127.0.0.0/8 only (EgressViolations).
func StartManager(cfg *rest.Config, opts app.Options) (stop func() error, err error) {
	stop, _, err = startManager(cfg, opts, nil)
	return stop, err
}

// StartManagerWithMetrics runs a manager as StartManager does, with its
// metrics on 127.0.0.1, and returns their address. The kernel chooses the
// port as the server listens: a port picked free beforehand could be taken
// by another program before the server listens on it.
func StartManagerWithMetrics(cfg *rest.Config, opts app.Options) (stop func() error, metricsAddr string, err error) {
	opts.MetricsAddr = "127.0.0.1:0"
	return startManager(cfg, opts, &listenedOn{})
}

func startManager(cfg *rest.Config, opts app.Options, metrics *listenedOn) (stop func() error, metricsAddr string, err error) {
	opts.ProbeAddr = "0"
	if opts.MetricsAddr == "" {
		opts.MetricsAddr = "0"
	}
	if opts.Egress.Allow == nil {
		opts.Egress = LoopbackEgress()
	}
	if opts.EgressResolver == nil {
		opts.EgressResolver = egresstest.Hosts
	}
	if opts.EgressDial == nil {
		opts.EgressDial = egresstest.LoopbackOnly(recordViolation)
	}
	if opts.GracefulShutdownTimeout == nil {
		grace := time.Second
		opts.GracefulShutdownTimeout = &grace
	}
	managerOpts := app.ManagerOptions(opts)
	if metrics != nil {
		managerOpts.Metrics.ListenConfig.Control = metrics.control
	}
	// Several managers run in one process, each with its own controllers.
	skip := true
	managerOpts.Controller.SkipNameValidation = &skip
	mgr, err := ctrl.NewManager(rest.CopyConfig(cfg), managerOpts)
	if err != nil {
		return nil, "", err
	}
	if err := app.Setup(mgr, opts); err != nil {
		return nil, "", err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	// A manager that cannot start (a port taken) says so here, rather than
	// leave every spec to time out.
	synced := make(chan struct{})
	go func() {
		if mgr.GetCache().WaitForCacheSync(ctx) {
			close(synced)
		}
	}()
	select {
	case err := <-done:
		cancel()
		return nil, "", fmt.Errorf("the manager stopped as it started: %w", err)
	case <-synced:
	}
	// The metrics server listens as the manager starts, not necessarily
	// before the caches sync.
	for metrics != nil && metricsAddr == "" {
		select {
		case err := <-done:
			cancel()
			return nil, "", fmt.Errorf("the manager stopped as it started: %w", err)
		case <-time.After(10 * time.Millisecond):
			metricsAddr = metrics.addr()
		}
	}
	var result error
	stopped := false
	return func() error {
		if !stopped {
			stopped = true
			cancel()
			result = <-done
		}
		return result
	}, metricsAddr, nil
}

// listenedOn keeps the socket a server listens on, as its ListenConfig's
// Control, to read which port the kernel chose for it.
type listenedOn struct {
	mu   sync.Mutex
	conn syscall.RawConn
}

func (l *listenedOn) control(_, _ string, conn syscall.RawConn) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.conn = conn
	return nil
}

// addr is the socket's address once it is bound, else "".
func (l *listenedOn) addr() string {
	l.mu.Lock()
	conn := l.conn
	l.mu.Unlock()
	if conn == nil {
		return ""
	}
	var sa syscall.Sockaddr
	if err := conn.Control(func(fd uintptr) { sa, _ = syscall.Getsockname(int(fd)) }); err != nil {
		return ""
	}
	in4, ok := sa.(*syscall.SockaddrInet4)
	if !ok || in4.Port == 0 {
		return ""
	}
	return netip.AddrPortFrom(netip.AddrFrom4(in4.Addr), uint16(in4.Port)).String()
}

// SetLogger sends controller-runtime's logs to w, such as GinkgoWriter.
func SetLogger(w io.Writer) {
	ctrl.SetLogger(zap.New(zap.WriteTo(w), zap.UseDevMode(true)))
}

// Sleep waits for d, or until ctx ends and then returns its error.
func Sleep(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// LogLines keeps the JSON log lines of a logger, for tests that assert
// what a log line carries.
type LogLines struct {
	mu    sync.Mutex
	lines []map[string]any
}

// Logger logs at verbosity 1 as JSON to w and into l.
func (l *LogLines) Logger(w io.Writer) logr.Logger {
	return zap.New(zap.WriteTo(io.MultiWriter(w, l)), zap.JSONEncoder(), zap.Level(zapcore.Level(-1)))
}

// Write takes one JSON line per call, as zap writes them.
func (l *LogLines) Write(p []byte) (int, error) {
	var line map[string]any
	if err := json.Unmarshal(p, &line); err == nil {
		l.mu.Lock()
		l.lines = append(l.lines, line)
		l.mu.Unlock()
	}
	return len(p), nil
}

// Matching returns the lines for which match holds.
func (l *LogLines) Matching(match func(map[string]any) bool) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range l.lines {
		if match(line) {
			out = append(out, line)
		}
	}
	return out
}
