// Command toolledger-dev runs toolledger on one machine for development and
// trials: an embedded control plane (kube-apiserver and etcd from bin/, with
// etcd's data kept under the state directory so the ledger survives a
// restart), the demo downstream, the operator and the gateway of the sample
// Tool's namespace (MCP, A2A and the HTTP front, local only), all in the
// foreground.
// The operator runs as its ServiceAccount's user, impersonated, so that the
// guard admission policy exempts it as it does the deployed one.
// Ctrl-C stops everything. With --existing-cluster it uses the current
// kubeconfig instead of starting a control plane.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap/zapcore"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/yaml"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/cmd/manager/app"
	"github.com/toolledger/toolledger/internal/demo"
	"github.com/toolledger/toolledger/internal/egress"
	"github.com/toolledger/toolledger/internal/mcpgateway"
	"github.com/toolledger/toolledger/internal/notify"
	"github.com/toolledger/toolledger/internal/serve"
	"github.com/toolledger/toolledger/internal/telemetry"
	"github.com/toolledger/toolledger/internal/testenv"
)

// sampleDownstream is the address the sample Tool names; it is rewritten to
// the address the demo downstream really listens on.
const sampleDownstream = "127.0.0.1:8089"

type options struct {
	stateDir          string
	assetsDir         string
	crdDir            string
	admissionPolicy   string
	guardPolicy       string
	identityPolicy    string
	parametersPolicy  string
	traceContext      string
	sampleTool        string
	namespace         string
	existingCluster   bool
	downstreamListen  string
	metricsAddr       string
	probeAddr         string
	egressAllow       string
	archive           bool
	archiveAPIListen  string
	gatewayListen     string
	notificationSinks []notify.Sink
}

func main() {
	var opts options
	flag.StringVar(&opts.stateDir, "state-dir", filepath.Join("bin", "local"), "Directory for etcd's data and the kubeconfig.")
	flag.StringVar(&opts.assetsDir, "assets", "bin", "Directory holding kube-apiserver and etcd; KUBEBUILDER_ASSETS wins when set.")
	flag.StringVar(&opts.crdDir, "crds", filepath.Join("config", "crd", "bases"), "Directory of the CRDs to install.")
	flag.StringVar(&opts.admissionPolicy, "admission-policy", filepath.Join("config", "admission", "outcome_finalizer_policy.yaml"), "MutatingAdmissionPolicy that sets the outcome finalizer at creation (manifests then cost 3 writes, not 4); empty installs none.")
	flag.StringVar(&opts.guardPolicy, "guard-policy", filepath.Join("config", "admission", "tombstone_guard_policy.yaml"), "ValidatingAdmissionPolicies that refuse to anyone but the operator and the group "+testenv.BreakGlassGroup+" the removal of a dispatched action's finalizer, owners on actions, and tombstone writes (docs/admission.md); empty installs none.")
	flag.StringVar(&opts.parametersPolicy, "parameters-policy", filepath.Join("config", "admission", "parameters_policy.yaml"), "ValidatingAdmissionPolicy that refuses a ToolAction whose parameters hold more than 10000 values or nest deeper than 8 levels, before the API server stores it (docs/admission.md); empty installs none.")
	flag.StringVar(&opts.traceContext, "trace-context-policy", filepath.Join("config", "admission", "trace_context_policy.yaml"), "ValidatingAdmissionPolicy that refuses a ToolAction whose toolledger.dev/traceparent annotation, set or changed, is not a W3C traceparent (docs/admission.md); empty installs none.")
	flag.StringVar(&opts.identityPolicy, "identity-policy", filepath.Join("config", "admission", "identity_policy.yaml"), "Admission policies that stamp the creating user on ToolActions, ToolApprovals and ToolResolutions and refuse it set by hand (docs/approvals.md); empty installs none, and then no approval can be applied.")
	flag.StringVar(&opts.sampleTool, "sample-tool", filepath.Join("config", "samples", "toolledger_v1alpha1_tool.yaml"), "Tool manifest to apply; empty applies none.")
	flag.StringVar(&opts.namespace, "namespace", "default", "Namespace (tenant) of the sample Tool.")
	flag.BoolVar(&opts.existingCluster, "existing-cluster", os.Getenv("USE_EXISTING_CLUSTER") == "true", "Use the current kubeconfig's cluster instead of an embedded control plane.")
	flag.StringVar(&opts.downstreamListen, "downstream-listen", sampleDownstream, "Address of the demo downstream; empty starts none.")
	flag.StringVar(&opts.metricsAddr, "metrics-bind-address", "127.0.0.1:8080", "Address of the operator's metrics; 0 disables them.")
	flag.StringVar(&opts.probeAddr, "health-probe-bind-address", "127.0.0.1:8081", "Address of the operator's health probes; 0 disables them.")
	zapOpts := zap.Options{Development: true, Level: zapcore.InfoLevel}
	flag.StringVar(&opts.egressAllow, "egress-allow", "127.0.0.1/32", "CIDRs the operator's HTTP tools may reach although they are loopback or private (the manager's --egress-allow); the demo downstream listens on 127.0.0.1, which may also take credentials over plain HTTP.")
	flag.BoolVar(&opts.archive, "archive", true, "Run a local PostgreSQL server (Debian's postgresql, which `make postgresql` installs; data under the state directory) and keep finished records and their keys in it (the manager's --archive-dsn), instead of Tombstones; --archive=false keeps Tombstones.")
	flag.StringVar(&opts.archiveAPIListen, "archive-api-listen", "127.0.0.1:8445", "With --archive and the embedded control plane, where the archive API (kubectl get archivedtoolactions) listens for the API server.")
	flag.StringVar(&opts.gatewayListen, "gateway-listen", "127.0.0.1:8090", "Loopback address of the gateway of --namespace, in its local-only mode (no tokens, every call as the identity toolledger-dev runs with): MCP at /mcp, A2A at /a2a, the HTTP front at /tools/<tool>; empty starts none, as does --existing-cluster unless this is set.")
	flag.Func("notification-sink", "NAME=URL of a CloudEvents receiver that gets an event for each action awaiting approval, escalated, succeeded or failed (the manager's --notification-sink; the demo downstream is one at /events); repeatable.", notify.SinkFlag(&opts.notificationSinks))
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	if opts.existingCluster && !flagSet("gateway-listen") {
		// No token-less gateway onto a real cluster unless asked for.
		opts.gatewayListen = ""
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))

	if err := run(opts); err != nil {
		fmt.Fprintln(os.Stderr, "toolledger-dev:", err)
		os.Exit(1)
	}
}

func run(opts options) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, kubeconfig, stopCluster, err := cluster(opts)
	if err != nil {
		return err
	}
	defer stopCluster()

	downstreamURL, stopDownstream, err := startDownstream(ctx, opts.downstreamListen)
	if err != nil {
		return err
	}
	defer stopDownstream()

	// A cluster that refuses a policy (the admission policy before
	// Kubernetes 1.36, the others before 1.30) runs without it: the
	// controller adds the finalizer itself, and only its own bound of 1 MiB
	// applies to parameters.
	applyPolicy(ctx, cfg, opts.admissionPolicy, "admission policy", "")
	guarded := applyPolicy(ctx, cfg, opts.guardPolicy, "guard policy", "")
	applyPolicy(ctx, cfg, opts.parametersPolicy, "parameters policy", "")
	applyPolicy(ctx, cfg, opts.traceContext, "trace context policy", "")
	stamped := applyPolicy(ctx, cfg, opts.identityPolicy, "identity policy", " (no approval can be applied)")
	if err := applySampleTool(ctx, cfg, opts); err != nil {
		return err
	}
	if err := createOperatorNamespace(ctx, cfg); err != nil {
		return err
	}
	if err := waitUntilAdmitted(ctx, cfg, opts.namespace, guarded, stamped); err != nil {
		return err
	}
	allow, err := egress.ParsePrefixes(opts.egressAllow)
	if err != nil {
		return fmt.Errorf("--egress-allow: %w", err)
	}
	archiveDSN, stopArchive, err := startArchive(ctx, opts)
	if err != nil {
		return err
	}
	defer stopArchive()
	managerOpts := app.Options{MetricsAddr: opts.metricsAddr, ProbeAddr: opts.probeAddr,
		Egress: egress.Policy{Allow: allow, PlainHTTP: []string{"127.0.0.1"}}, ArchiveDSN: archiveDSN, NotificationSinks: opts.notificationSinks}
	if archiveDSN != "" && !opts.existingCluster {
		// The embedded control plane has this one manager: none runs
		// without the archive, to learn of a new binding.
		managerOpts.ArchiveBindingSettle = time.Millisecond
		if managerOpts.ArchiveAPICertDir, err = registerArchiveAPI(ctx, cfg, opts); err != nil {
			return err
		}
		managerOpts.ArchiveAPIAddr = opts.archiveAPIListen
	}
	tracing, err := telemetry.Setup(ctx, "toolledger-manager")
	if err != nil {
		return err
	}
	defer telemetry.Flush(tracing, ctrl.Log)
	mgr, err := app.NewManager(testenv.AsManager(cfg), managerOpts)
	if err != nil {
		return err
	}
	gatewayURL, err := startGateway(ctx, cfg, opts)
	if err != nil {
		return err
	}
	printBanner(kubeconfig, downstreamURL, archiveDSN, gatewayURL, opts, guarded)
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("operator stopped: %w", err)
	}
	fmt.Println("\ntoolledger-dev: stopped")
	return nil
}

// cluster starts the embedded control plane, or connects to the current
// kubeconfig's cluster, and installs the CRDs. It returns the path of a
// kubeconfig for kubectl (empty for an existing cluster) and a stop function.
func cluster(opts options) (*rest.Config, string, func(), error) {
	if opts.existingCluster {
		cfg, err := ctrl.GetConfig()
		if err != nil {
			return nil, "", nil, fmt.Errorf("cannot load the kubeconfig: %w", err)
		}
		if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{Paths: []string{opts.crdDir}, ErrorIfPathMissing: true}); err != nil {
			return nil, "", nil, fmt.Errorf("cannot install the CRDs: %w", err)
		}
		return cfg, "", func() {}, nil
	}

	etcdDir, err := filepath.Abs(filepath.Join(opts.stateDir, "etcd"))
	if err != nil {
		return nil, "", nil, err
	}
	if err := os.MkdirAll(etcdDir, 0o700); err != nil {
		return nil, "", nil, fmt.Errorf("cannot create %s: %w", etcdDir, err)
	}
	apiServer := &envtest.APIServer{}
	if err := testenv.ConfigureFrontProxy(apiServer, filepath.Join(filepath.Dir(etcdDir), "front-proxy")); err != nil {
		return nil, "", nil, err
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: opts.assetsDir,
		CRDDirectoryPaths:     []string{opts.crdDir},
		ErrorIfCRDPathMissing: true,
		ControlPlane:          envtest.ControlPlane{APIServer: apiServer, Etcd: &envtest.Etcd{DataDir: etcdDir}},
	}
	fmt.Println("toolledger-dev: starting kube-apiserver and etcd (data in " + etcdDir + ")")
	cfg, err := env.Start()
	if err != nil {
		return nil, "", nil, fmt.Errorf("cannot start the control plane (run `make controlplane` to build bin/kube-apiserver and bin/etcd): %w", err)
	}
	stopEnv := func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "toolledger-dev: cannot stop the control plane:", err)
		}
	}
	kubeconfig, err := writeKubeconfig(env, opts.stateDir)
	if err != nil {
		stopEnv()
		return nil, "", nil, err
	}
	return cfg, kubeconfig, stopEnv, nil
}

// writeKubeconfig gives kubectl an admin identity on the embedded control
// plane. Its address and certificates change on every start, so it is
// rewritten each time.
func writeKubeconfig(env *envtest.Environment, stateDir string) (string, error) {
	admin, err := env.AddUser(envtest.User{Name: "toolledger-dev-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return "", fmt.Errorf("cannot create the admin user: %w", err)
	}
	content, err := admin.KubeConfig()
	if err != nil {
		return "", fmt.Errorf("cannot build the kubeconfig: %w", err)
	}
	path, err := filepath.Abs(filepath.Join(stateDir, "kubeconfig"))
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(path, content, 0o600); err != nil {
		return "", fmt.Errorf("cannot write %s: %w", path, err)
	}
	return path, nil
}

func startDownstream(ctx context.Context, listen string) (string, func(), error) {
	if listen == "" {
		return "", func() {}, nil
	}
	logger := slog.New(slog.NewTextHandler(os.Stdout, nil)).With("component", "demo-downstream")
	service, err := demo.Start(ctx, listen, logger)
	if err != nil {
		return "", nil, fmt.Errorf("cannot start the demo downstream on %s (set --downstream-listen): %w", listen, err)
	}
	go func() {
		if err := <-service.Served(); err != nil {
			logger.Error("demo downstream stopped", "error", err)
		}
	}()
	return "http://" + service.Addr(), func() { _ = service.Shutdown() }, nil
}

// applySampleTool server-side-applies the sample Tool, pointed at the demo
// downstream's real address.
// createOperatorNamespace creates toolledger-system, where the manager
// holds its member Lease, as the manifests do.
func createOperatorNamespace(ctx context.Context, cfg *rest.Config) error {
	c, err := client.New(cfg, client.Options{Scheme: app.Scheme()})
	if err != nil {
		return err
	}
	return testenv.CreateOperatorNamespace(ctx, c)
}

func applySampleTool(ctx context.Context, cfg *rest.Config, opts options) error {
	if opts.sampleTool == "" {
		return nil
	}
	content, err := os.ReadFile(opts.sampleTool)
	if err != nil {
		return fmt.Errorf("cannot read the sample tool: %w", err)
	}
	if opts.downstreamListen != "" {
		content = []byte(strings.ReplaceAll(string(content), sampleDownstream, opts.downstreamListen))
	}
	var tool unstructured.Unstructured
	if err := yaml.Unmarshal(content, &tool.Object); err != nil {
		return fmt.Errorf("cannot parse %s: %w", opts.sampleTool, err)
	}
	if tool.GetNamespace() == "" {
		tool.SetNamespace(opts.namespace)
	}
	c, err := client.New(cfg, client.Options{Scheme: app.Scheme()})
	if err != nil {
		return err
	}
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(&tool), client.FieldOwner("toolledger-dev"), client.ForceOwnership); err != nil {
		return fmt.Errorf("cannot apply %s: %w", opts.sampleTool, err)
	}
	return nil
}

// waitUntilAdmitted returns once a ToolAction can be created: a fresh
// control plane refuses one with ServiceUnavailable until the admission
// policy that sets the outcome finalizer has loaded the CRD's schema, and
// the first `kubectl apply` after the banner must not meet that. It probes
// with a server-side dry run, which stores nothing. When guarded, it also
// waits until the guard refuses what it must; when stamped, until the API
// server stamps identities.
func waitUntilAdmitted(ctx context.Context, cfg *rest.Config, namespace string, guarded, stamped bool) error {
	c, err := client.New(cfg, client.Options{Scheme: app.Scheme()})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	probe := func() error {
		return c.Create(ctx, &v1alpha1.ToolAction{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "toolledger-dev-probe"},
			Spec:       v1alpha1.ToolActionSpec{ToolRef: v1alpha1.ToolReference{Name: "charge"}},
		}, client.DryRunAll)
	}
	for err := probe(); apierrors.IsServiceUnavailable(err); err = probe() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("the API server does not admit ToolActions yet: %w", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	if guarded {
		if err := testenv.WaitForGuard(ctx, c, namespace); err != nil {
			return err
		}
	}
	if stamped {
		return testenv.WaitForIdentity(ctx, c, namespace)
	}
	return nil
}

// flagSet reports whether the command line set the flag name.
func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// startGateway serves the gateway of the sample Tool's namespace on a
// loopback address, in the local-only mode; it returns its URL, empty
// when none is asked for.
func startGateway(ctx context.Context, cfg *rest.Config, opts options) (string, error) {
	if opts.gatewayListen == "" {
		return "", nil
	}
	if !serve.IsLoopback(opts.gatewayListen) {
		return "", fmt.Errorf("--gateway-listen %s: %w", opts.gatewayListen, mcpgateway.ErrNotLoopback)
	}
	gateway, err := mcpgateway.New(ctx, mcpgateway.Options{Config: cfg, Namespace: opts.namespace, ClusterTools: true,
		Logger: ctrl.Log.WithName("gateway")})
	if err != nil {
		return "", err
	}
	if err := gateway.Run(ctx); err != nil {
		return "", err
	}
	var lc net.ListenConfig
	listener, err := lc.Listen(ctx, "tcp", opts.gatewayListen)
	if err != nil {
		return "", fmt.Errorf("cannot listen on %s (set --gateway-listen): %w", opts.gatewayListen, err)
	}
	url := "http://" + listener.Addr().String()
	handler, err := gateway.HTTPHandler(mcpgateway.HTTPOptions{ResourceURL: url + mcpgateway.MCPPath, LocalOnly: true})
	if err != nil {
		_ = listener.Close()
		return "", err
	}
	go func() {
		if err := serve.Serve(ctx, listener, handler, "", ""); err != nil {
			ctrl.Log.Error(err, "The gateway stopped")
		}
	}()
	return url, nil
}

func printBanner(kubeconfig, downstreamURL, archiveDSN, gatewayURL string, opts options, guarded bool) {
	fmt.Println()
	fmt.Println("toolledger-dev: the operator is starting; Ctrl-C stops everything.")
	if kubeconfig != "" {
		fmt.Println("  kubectl:     export KUBECONFIG=" + kubeconfig)
	}
	if downstreamURL != "" {
		fmt.Println("  downstream:  " + downstreamURL + " (counters: " + downstreamURL + "/_admin/stats)")
	}
	if archiveDSN != "" {
		fmt.Println("  archive:     psql '" + archiveDSN + "' (finished records leave etcd for it: docs/archive.md)")
		if !opts.existingCluster {
			fmt.Println("               kubectl get archivedtoolactions -n " + opts.namespace + " (read through the API server, as you)")
		}
	}
	if opts.sampleTool != "" {
		fmt.Printf("  sample tool: %s/charge\n", opts.namespace)
	}
	if gatewayURL != "" {
		fmt.Println("  gateway:     " + gatewayURL + " for namespace " + opts.namespace + ", local only (docs/mcp.md, docs/a2a.md, docs/http-front.md)")
		fmt.Println("               MCP " + gatewayURL + mcpgateway.MCPPath + ", A2A " + gatewayURL + mcpgateway.A2APath + ", HTTP front " + gatewayURL + mcpgateway.FrontPath + "<tool>")
	}
	if guarded {
		fmt.Println("  operator:    runs as " + testenv.ManagerUser + ", which the guard policy exempts")
		fmt.Println("  break-glass: kubectl --as=me --as-group=system:masters --as-group=" + testenv.BreakGlassGroup + " … (docs/admission.md)")
	}
	fmt.Println("  try:         kubectl apply -f config/samples/toolledger_v1alpha1_toolaction.yaml")
	fmt.Println()
}

// applyPolicy installs the admission policy in file, if one is given, and
// reports whether it is installed; what it is and what its absence means
// are printed when the cluster refuses it.
func applyPolicy(ctx context.Context, cfg *rest.Config, file, what, absence string) bool {
	if file == "" {
		return false
	}
	if err := testenv.ApplyFile(ctx, cfg, file, "toolledger-dev"); err != nil {
		fmt.Fprintf(os.Stderr, "toolledger-dev: the %s is not installed%s: %v\n", what, absence, err)
		return false
	}
	return true
}

// registerArchiveAPI issues the archive API's serving certificate under the
// state directory and registers the API with the embedded control plane,
// whose API server reaches the manager on this machine; it returns the
// certificate's directory.
func registerArchiveAPI(ctx context.Context, cfg *rest.Config, opts options) (string, error) {
	dir, err := filepath.Abs(filepath.Join(opts.stateDir, "archive-api"))
	if err != nil {
		return "", err
	}
	api, err := testenv.NewArchiveAPI(dir)
	if err != nil {
		return "", fmt.Errorf("cannot issue the archive API's certificate: %w", err)
	}
	port, err := testenv.PortOf(opts.archiveAPIListen)
	if err != nil {
		return "", fmt.Errorf("--archive-api-listen: %w", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: app.Scheme()})
	if err != nil {
		return "", err
	}
	if err := api.Register(ctx, c, port); err != nil {
		return "", err
	}
	return dir, nil
}

// startArchive runs the local PostgreSQL server of the archive, its data
// under the state directory beside etcd's, so that the keys it keeps
// survive a restart as the records do. It returns the DSN, empty without
// --archive.
func startArchive(ctx context.Context, opts options) (string, func(), error) {
	if !opts.archive {
		return "", func() {}, nil
	}
	dir, err := filepath.Abs(filepath.Join(opts.stateDir, "postgres"))
	if err != nil {
		return "", nil, err
	}
	// The server refuses to run as root; run as root, it runs as nobody,
	// who must be able to reach its directory through the state directory.
	if os.Geteuid() == 0 {
		if err := os.MkdirAll(opts.stateDir, 0o700); err != nil {
			return "", nil, err
		}
		if err := os.Chmod(opts.stateDir, 0o711); err != nil {
			return "", nil, err
		}
		if testenv.PostgresCanEnter(opts.stateDir) != nil {
			if dir, err = archiveOutside(dir); err != nil {
				return "", nil, err
			}
		}
	}
	fmt.Println("toolledger-dev: starting PostgreSQL for the archive (data in " + dir + ")")
	server, err := testenv.RunPostgres(ctx, dir)
	if err != nil {
		return "", nil, fmt.Errorf("cannot start PostgreSQL for the archive (make postgresql installs it; --archive=false runs without): %w", err)
	}
	return server.DSN, func() {
		if err := server.Halt(); err != nil {
			fmt.Fprintln(os.Stderr, "toolledger-dev: the archive's PostgreSQL:", err)
		}
	}, nil
}

// archiveOutside keeps the archive's data where nobody can enter, when it
// cannot enter the state directory (a checkout in a home directory, or in
// a directory of mktemp -d, closed to other users): in a directory of
// /var/tmp, which outlives a reboot as the state directory does, linked
// from link in the state directory, so that the two go together and a
// fresh state directory starts a fresh archive.
func archiveOutside(link string) (string, error) {
	if target, err := os.Readlink(link); err == nil {
		return target, nil
	}
	if _, err := os.Lstat(link); err == nil {
		return "", fmt.Errorf("PostgreSQL refuses to run as root, so it runs as nobody, who cannot enter %s, which holds the archive's data "+
			"(a directory above it is closed to other users): run as the user who made it, or remove %s to start afresh (the ledger in etcd goes with its archive)",
			link, filepath.Dir(link))
	}
	target, err := os.MkdirTemp("/var/tmp", "toolledger-dev-postgres-")
	if err != nil {
		return "", err
	}
	if err := os.Symlink(target, link); err != nil {
		return "", errors.Join(err, os.Remove(target))
	}
	fmt.Printf("toolledger-dev: nobody, whom PostgreSQL runs as, cannot enter %s: the archive's data is in %s, linked from %s\n", filepath.Dir(link), target, link)
	return target, nil
}
