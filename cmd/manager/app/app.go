// Package app assembles the toolledger manager: scheme, controllers,
// adapters, health checks and metrics. It sits above the controllers and
// the adapters, which it wires together; the production binary and the local
// development runner both start the manager from here.
package app

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/controllers"
	"github.com/toolledger/toolledger/internal/adapter/httpcall"
	"github.com/toolledger/toolledger/internal/adapter/kubernetesapply"
	"github.com/toolledger/toolledger/internal/archive"
	"github.com/toolledger/toolledger/internal/archiveapi"
	"github.com/toolledger/toolledger/internal/archivebinding"
	"github.com/toolledger/toolledger/internal/chainstate"
	"github.com/toolledger/toolledger/internal/deletions"
	"github.com/toolledger/toolledger/internal/dispatch"
	"github.com/toolledger/toolledger/internal/egress"
	"github.com/toolledger/toolledger/internal/keyhistory"
	"github.com/toolledger/toolledger/internal/notify"
	"github.com/toolledger/toolledger/internal/requeue"
	"github.com/toolledger/toolledger/internal/retention"
	"github.com/toolledger/toolledger/internal/shard"
	"github.com/toolledger/toolledger/pkg/adapter"
)

// Options configures the manager.
type Options struct {
	// MetricsAddr serves Prometheus metrics; "0" disables them.
	MetricsAddr string
	// MetricsSecure serves them over HTTPS to callers that the API server
	// authenticates (TokenReview) and authorizes for GET /metrics
	// (SubjectAccessReview); plain HTTP to anyone otherwise.
	MetricsSecure bool
	// MetricsCertDir holds tls.crt and tls.key for MetricsSecure; empty
	// generates a self-signed certificate at start.
	MetricsCertDir string
	// Logger is the manager's logger; controller-runtime's global one when
	// unset.
	Logger logr.Logger
	// ProbeAddr serves /healthz and /readyz; "0" disables them.
	ProbeAddr string
	// LeaderElection is optional: the claim alone keeps dispatches single,
	// leader election only saves the conflicts of idle replicas.
	LeaderElection          bool
	LeaderElectionNamespace string
	// ExecutorID names this instance in claims; DefaultExecutorID when empty.
	ExecutorID string
	// MaxConcurrentReconciles is the number of actions handled in parallel.
	// No worker waits on a downstream: the dispatcher makes those calls.
	MaxConcurrentReconciles int
	// MaxConcurrentDispatches bounds the downstream calls (attempts and
	// lookups) in flight in this manager, over every tool;
	// DefaultMaxConcurrentDispatches when zero.
	MaxConcurrentDispatches int
	// MaxDispatchesPerNamespace bounds those of the actions of one
	// namespace, so that one tenant's backlog leaves room for the others;
	// half of MaxConcurrentDispatches when zero.
	MaxDispatchesPerNamespace int
	// LeaseGrace is added to a tool's timeout to give a claim's lease.
	LeaseGrace time.Duration
	// LeaseMargin is how long before a claim's lease ends its executor stops
	// sending the attempt: the most the replicas' clocks may disagree. Less
	// than LeaseGrace; DefaultLeaseMargin, or half of LeaseGrace when that
	// is less, when zero.
	LeaseMargin time.Duration
	// NoSharding has every replica race for every action; by default
	// replicas split the active actions by key (shard.Members). Leader
	// election turns sharding off: the leader handles every action.
	NoSharding bool
	// MemberLeaseDuration is how long a replica's member Lease lasts
	// without renewal: how soon the others take a dead replica's share.
	// DefaultMemberLeaseDuration when zero; renewed every third of it.
	MemberLeaseDuration time.Duration
	// Clock is the time source; the real clock when nil.
	Clock clock.PassiveClock
	// GracefulShutdownTimeout bounds how long in-flight attempts may finish
	// on shutdown; controller-runtime's default (30s) when nil.
	GracefulShutdownTimeout *time.Duration
	// Namespace is the operator's own namespace, which holds the Secrets of
	// ClusterTools; DefaultNamespace() when empty.
	Namespace string
	// Adapters are the adapters tools may name; DefaultAdapters when nil.
	Adapters *adapter.Registry
	// RoutineEventRate is how many actions a second have their happy path
	// (a claim, a success) told as Normal events, beside every warning;
	// DefaultRoutineEventRate when zero, none when negative, every action's
	// at math.Inf(1).
	RoutineEventRate float64
	// RetentionSweep is how often finished actions past their tool's
	// keyRetention are looked for; a minute when zero.
	RetentionSweep time.Duration
	// NotificationSinks receive a CloudEvent for each transition to
	// AwaitingApproval, Escalated, Succeeded or Failed (docs/operations.md,
	// "Notifications"), signed for those with a signing key; none when
	// empty.
	NotificationSinks []notify.Sink
	// TrustCallerTraceContext has the spans of an action's calls continue
	// the trace its caller supplied, and its events carry it; by default
	// the spans start traces of their own linked to it, and the events carry
	// none (docs/operations.md, "Traces").
	TrustCallerTraceContext bool
	// NotificationSweep is how often the records that still owe a sink an
	// event are listed; a minute when zero.
	NotificationSweep time.Duration
	// RetentionRate bounds the retention work a second (records retired,
	// tombstones moved or deleted) beyond the records coming due on their
	// own, which keep their own pace (retention.Pacer);
	// DefaultRetentionRate when zero.
	RetentionRate float64
	// Egress is where HTTP tools may connect (docs/security.md). Its Never
	// is filled with the API server's own endpoint.
	Egress egress.Policy
	// EgressResolver and EgressDial replace the resolver and the dialer
	// behind the egress policy; tests inject them, so that no name is
	// resolved nor any address dialed outside loopback.
	EgressResolver egress.Resolver
	EgressDial     func(ctx context.Context, network, address string) (net.Conn, error)
	// ArchiveDSN is the PostgreSQL database that keeps finished records
	// and their keys (docs/archive.md); empty keeps keys in Tombstones.
	ArchiveDSN string
	// ArchiveRecordRetention is how long, with an archive, the finished
	// records of a tool that sets no recordRetention stay in etcd;
	// DefaultArchiveRecordRetention when zero.
	ArchiveRecordRetention time.Duration
	// ArchiveKeyRetention is how long, with an archive, the keys of a tool
	// that sets no keyRetention are kept; DefaultArchiveKeyRetention when
	// zero, for good when negative.
	ArchiveKeyRetention time.Duration
	// ArchiveHistoryRetention is how long archived records stay readable
	// after their key is freed; zero keeps them for good.
	ArchiveHistoryRetention time.Duration
	// ArchiveAPIAddr is where the archive's aggregated API listens, when
	// ArchiveAPICertDir holds its serving certificate (tls.crt, tls.key).
	ArchiveAPIAddr    string
	ArchiveAPICertDir string
	// ArchiveAPIListener, when set, is where the archive API listens
	// instead of ArchiveAPIAddr: a test's, on a port the kernel chose.
	ArchiveAPIListener net.Listener
	// ArchiveCheckpointInterval is how often, at most, the cluster takes a
	// checkpoint of each archived chain whose head moved;
	// DefaultArchiveCheckpointInterval when zero.
	ArchiveCheckpointInterval time.Duration
	// ArchiveCompareInterval is how often a manager compares the archive's
	// chains with the cluster's marks, beside every key check and keep,
	// which compare their own namespace's; DefaultArchiveCompareInterval
	// when zero.
	ArchiveCompareInterval time.Duration
	// ArchiveRequireSynchronousStandby keeps records in etcd while the
	// archive's server commits without waiting for a standby.
	ArchiveRequireSynchronousStandby bool
	// ArchiveBindingSettle is how long a new archive binding stands before
	// the archive keeps a record (archivebinding.DefaultSettle when zero):
	// time for replicas without the archive to learn of it. A test, or a
	// single local manager, shortens it.
	ArchiveBindingSettle time.Duration
}

// Scheme knows the built-in types and the toolledger API.
func Scheme() *runtime.Scheme {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		panic(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		panic(err)
	}
	return scheme
}

// CacheOptions keeps only active ToolActions in the manager's cache, without
// their managed fields and large parameters: its memory follows the number
// of actions in flight, not the size of the ledger nor of the requests (see
// controllers.ActiveActions and controllers.TrimForCache). Of ConfigMaps it
// keeps those of the operator's namespace: the archive binding, and the
// chains' checkpoints (internal/chainstate).
func CacheOptions(operatorNamespace string) cache.Options {
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		&v1alpha1.ToolAction{}: {Field: controllers.ActiveActions(), Transform: controllers.TrimForCache},
		&corev1.ConfigMap{}:    {Namespaces: map[string]cache.Config{operatorNamespace: {}}},
	}}
}

// chainStates keeps the archive's chains' checkpoints and verification
// progress in the operator's namespace.
func chainStates(mgr ctrl.Manager, opts Options) *chainstate.Store {
	return &chainstate.Store{Reader: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Client: mgr.GetClient(), OperatorNamespace: opts.Namespace}
}

// marker moves the archived chains' marks forward as records leave etcd.
func marker(mgr ctrl.Manager, opts Options, store *archive.Store) *chainstate.Marker {
	return &chainstate.Marker{Reader: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Client: mgr.GetClient(), Archive: store, OperatorNamespace: opts.Namespace}
}

// ClientOptions keep tombstones out of the cache: they are read one key at
// a time from the API server, however many there are.
func ClientOptions() client.Options {
	return client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&v1alpha1.Tombstone{}}}}
}

// DefaultArchiveRecordRetention is how long, with an archive, a finished
// record stays in etcd unless its tool says otherwise: time for every
// reader that waits on it (kubectl wait, the SDK, a GitOps health check)
// and for a person to look at a fresh failure, while the records the API
// server holds stay a few minutes' worth (docs/archive.md).
const DefaultArchiveRecordRetention = 5 * time.Minute

// DefaultArchiveKeyRetention is how long, with an archive, the keys of a
// tool that sets no keyRetention are kept: 90 days, past every provider's
// own window in docs/catalog.md (Stripe 24 h, Adyen 7 days) and Adyen's
// 31-day minimum with room to spare (docs/archive.md).
const DefaultArchiveKeyRetention = 90 * 24 * time.Hour

// DefaultArchiveCompareInterval is how often a manager compares every
// archived chain with the cluster's mark of it: how soon an archive gone
// back is reported (its namespaces' key checks find it at once).
const DefaultArchiveCompareInterval = 30 * time.Second

// DefaultArchiveCheckpointInterval is how often, at most, the cluster
// takes a checkpoint of an archived chain whose head moved: a rewrite of
// the archive's database by its superuser shows against anything older.
const DefaultArchiveCheckpointInterval = 5 * time.Minute

// DefaultRetentionRate is the retention work a second a manager makes by
// default beyond the records coming due on their own: a backlog of 100k
// records is retired in about an hour.
const DefaultRetentionRate = 30

// DefaultRoutineEventRate is the actions a second whose happy path a
// manager tells as events by default: every action of a cluster that runs
// a few, a sample of a busy one, whose events would otherwise add two writes
// to each action's three (docs/operations.md).
const DefaultRoutineEventRate = 1

// DefaultMaxConcurrentDispatches is the downstream calls a manager has in
// flight at most by default, over every tool. A slot is held from the
// claim until the downstream answers, so with half of them open to one
// namespace a single tenant's 300 ms tool still reaches about 140
// actions/s, above what a small control plane writes (docs/benchmarks.md,
// section 8).
const DefaultMaxConcurrentDispatches = 128

// DefaultMemberLeaseDuration is how long a member Lease lasts by default.
const DefaultMemberLeaseDuration = 15 * time.Second

// DefaultLeaseMargin is how long before a claim's lease ends its executor
// stops sending: replicas' clocks, kept by NTP, agree far better.
const DefaultLeaseMargin = 5 * time.Second

// DefaultExecutorID is the pod name when set (POD_NAME, from the downward
// API), else the host name; a random suffix keeps two processes on one host apart.
func DefaultExecutorID() string {
	name := os.Getenv("POD_NAME")
	if name == "" {
		name, _ = os.Hostname()
	}
	suffix := make([]byte, 3)
	_, _ = rand.Read(suffix)
	return name + "-" + hex.EncodeToString(suffix)
}

// DefaultNamespace is POD_NAMESPACE (from the downward API) when set, else
// toolledger-system, where the manifests install the operator.
func DefaultNamespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	return "toolledger-system"
}

// NewManager builds a manager with the toolledger controllers registered.
func NewManager(cfg *rest.Config, opts Options) (ctrl.Manager, error) {
	opts = opts.withDefaults()
	if opts.LeaseMargin >= opts.LeaseGrace {
		return nil, fmt.Errorf("--lease-margin (%s) must be less than --lease-grace (%s): an attempt is sent only before its lease ends less the margin", opts.LeaseMargin, opts.LeaseGrace)
	}
	mgr, err := ctrl.NewManager(cfg, ManagerOptions(opts))
	if err != nil {
		return nil, fmt.Errorf("cannot create manager: %w", err)
	}
	if err := Setup(mgr, opts); err != nil {
		return nil, err
	}
	return mgr, nil
}

func (opts Options) withDefaults() Options {
	if opts.ExecutorID == "" {
		opts.ExecutorID = DefaultExecutorID()
	}
	if opts.MaxConcurrentReconciles <= 0 {
		opts.MaxConcurrentReconciles = 8
	}
	if opts.MaxConcurrentDispatches <= 0 {
		opts.MaxConcurrentDispatches = DefaultMaxConcurrentDispatches
	}
	if opts.MaxDispatchesPerNamespace <= 0 {
		opts.MaxDispatchesPerNamespace = max(opts.MaxConcurrentDispatches/2, 1)
	}
	if opts.RetentionSweep <= 0 {
		opts.RetentionSweep = time.Minute
	}
	if opts.NotificationSweep <= 0 {
		opts.NotificationSweep = time.Minute
	}
	if opts.ArchiveRecordRetention <= 0 {
		opts.ArchiveRecordRetention = DefaultArchiveRecordRetention
	}
	if opts.ArchiveKeyRetention == 0 {
		opts.ArchiveKeyRetention = DefaultArchiveKeyRetention
	}
	if opts.RetentionRate <= 0 {
		opts.RetentionRate = DefaultRetentionRate
	}
	switch {
	case opts.RoutineEventRate == 0:
		opts.RoutineEventRate = DefaultRoutineEventRate
	case opts.RoutineEventRate < 0:
		opts.RoutineEventRate = 0
	}
	if opts.LeaseGrace <= 0 {
		opts.LeaseGrace = 30 * time.Second
	}
	if opts.LeaseMargin <= 0 {
		opts.LeaseMargin = min(DefaultLeaseMargin, opts.LeaseGrace/2)
	}
	if opts.MemberLeaseDuration <= 0 {
		opts.MemberLeaseDuration = DefaultMemberLeaseDuration
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Namespace == "" {
		opts.Namespace = DefaultNamespace()
	}
	if opts.ArchiveCheckpointInterval <= 0 {
		opts.ArchiveCheckpointInterval = DefaultArchiveCheckpointInterval
	}
	if opts.ArchiveCompareInterval <= 0 {
		opts.ArchiveCompareInterval = DefaultArchiveCompareInterval
	}
	if opts.ArchiveBindingSettle <= 0 {
		opts.ArchiveBindingSettle = archivebinding.DefaultSettle
	}
	return opts
}

// ManagerOptions are the controller-runtime options of a toolledger manager.
func ManagerOptions(opts Options) ctrl.Options {
	opts = opts.withDefaults()
	return ctrl.Options{
		Scheme:                  Scheme(),
		Metrics:                 metricsOptions(opts),
		Logger:                  opts.Logger,
		HealthProbeBindAddress:  opts.ProbeAddr,
		LeaderElection:          opts.LeaderElection,
		LeaderElectionID:        "toolledger.toolledger.dev",
		LeaderElectionNamespace: opts.LeaderElectionNamespace,
		GracefulShutdownTimeout: opts.GracefulShutdownTimeout,
		Cache:                   CacheOptions(opts.Namespace),
		Client:                  ClientOptions(),
	}
}

// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// metricsOptions serve the metrics endpoint; secure, it checks each
// scraper's token and its right to GET /metrics with the API server.
func metricsOptions(opts Options) metricsserver.Options {
	m := metricsserver.Options{BindAddress: opts.MetricsAddr}
	if opts.MetricsSecure {
		m.SecureServing = true
		m.FilterProvider = filters.WithAuthenticationAndAuthorization
		m.CertDir = opts.MetricsCertDir
	}
	return m
}

// DefaultAdapters registers the adapters built into toolledger. The HTTP
// adapter dials through the egress policy, with room in its pool for every
// call in flight; the kubernetesApply adapter calls the manager's API server.
func DefaultAdapters(mgr ctrl.Manager, opts Options) (*adapter.Registry, error) {
	dial := opts.EgressDial
	if dial == nil {
		dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	policy := opts.Egress
	dialer := &egress.Dialer{Policy: &policy, Resolver: opts.EgressResolver, Dial: dial}
	if err := refuseAPIServer(dialer, mgr.GetConfig()); err != nil {
		return nil, err
	}
	kubernetesApply, err := kubernetesapply.New(mgr.GetConfig())
	if err != nil {
		return nil, err
	}
	registry, err := adapter.NewRegistry(
		&httpcall.Connector{Secrets: mgr.GetAPIReader(), Transport: httpcall.NewTransport(dialer, opts.MaxConcurrentDispatches), Egress: &policy},
		kubernetesApply,
	)
	if err != nil {
		panic(err) // the built-in names are distinct
	}
	return registry, nil
}

// refuseAPIServer adds the API server's endpoint to what the dialer's
// policy refuses whatever is allowed: tools reach the API through
// kubernetesApply, as the ServiceAccount they name, never with the
// manager's network position.
func refuseAPIServer(dialer *egress.Dialer, cfg *rest.Config) error {
	u, err := url.Parse(cfg.Host)
	if err != nil || u.Hostname() == "" {
		return fmt.Errorf("cannot read the API server's address from %q", cfg.Host)
	}
	port, err := strconv.ParseUint(u.Port(), 10, 16)
	if err != nil {
		port = 443
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addrs, err := dialer.Resolve(ctx, "tcp", u.Hostname())
	if err != nil {
		return fmt.Errorf("cannot resolve the API server's host %s: %w", u.Hostname(), err)
	}
	policy := dialer.Policy
	policy.Never = slices.Clone(policy.Never)
	for _, ip := range addrs {
		policy.Never = append(policy.Never, netip.AddrPortFrom(ip.Unmap(), uint16(port)))
	}
	policy.NeverName = "the API server's own endpoint"
	return nil
}

// notificationTimeout bounds one delivery to a sink: a sink that hangs
// holds a notifier worker this long, and no reconcile worker at all.
const notificationTimeout = 5 * time.Second

// newNotifier delivers the events the transitions owe to the sinks; nil
// when none is configured. Once added, it runs on the leader under leader
// election, and on every replica, for its share of the keys, otherwise.
func newNotifier(mgr ctrl.Manager, opts Options) *notify.Notifier {
	if len(opts.NotificationSinks) == 0 {
		return nil
	}
	for _, sink := range opts.NotificationSinks {
		ctrl.Log.WithName("notifier").Info("Notification sink", "sink", sink.Name, "signed", len(sink.SigningKey) > 0)
	}
	return &notify.Notifier{Reader: mgr.GetAPIReader(), Sinks: opts.NotificationSinks, Sender: notify.NewSender(notificationTimeout),
		Clock: opts.Clock, Every: opts.NotificationSweep, Workers: 4}
}

// addShards has the reconciler handle only its share of the active actions.
// The member Leases are read and written without the cache, so that no
// informer watches Leases across the cluster.
func addShards(mgr ctrl.Manager, opts Options, reconciler *controllers.ToolActionReconciler, sweep *retention.Sweep, notifier *notify.Notifier) error {
	if opts.MemberLeaseDuration < time.Second {
		return fmt.Errorf("the member Lease duration %s is shorter than a second", opts.MemberLeaseDuration)
	}
	leases, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme(), HTTPClient: mgr.GetHTTPClient()})
	if err != nil {
		return fmt.Errorf("cannot create the member Lease client: %w", err)
	}
	reconciler.Shards = &shard.Members{
		Client:    leases,
		Namespace: opts.Namespace,
		Identity:  opts.ExecutorID,
		Duration:  opts.MemberLeaseDuration,
		Renew:     opts.MemberLeaseDuration / 3,
		// A changed share: its active actions, and its finished ones due
		// to retire or owing events, which only the sweeps find.
		Resync: func(ctx context.Context, owns func(types.NamespacedName) bool) {
			reconciler.ResyncOwned(ctx, owns)
			sweep.Poke()
			notifier.Poke()
		},
		Progressing: reconciler.Queue.Progressing,
		// A manager refused by the archive binding (a rollback or an
		// upgrade without the archive) takes no share: the replicas with
		// the ledger's archive serve every key while its rollout stalls.
		Serving: func(ctx context.Context) error { return reconciler.Binding.Check(ctx) },
	}
	if err := mgr.Add(reconciler.Shards); err != nil {
		return fmt.Errorf("cannot add the member Lease: %w", err)
	}
	// Joined before the controllers start, the first reconciles already
	// skip the others' keys. Should it fail, this manager owns every key
	// until its first listing.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := reconciler.Shards.Join(ctx); err != nil {
		ctrl.Log.WithName("shards").Error(err, "Cannot join the members yet; owning every key until the Leases are listed")
	}
	return nil
}

// Setup registers the toolledger controllers, watches, sweeps and health
// checks with mgr.
func Setup(mgr ctrl.Manager, opts Options) error {
	opts = opts.withDefaults()
	adapters := opts.Adapters
	if adapters == nil {
		var err error
		if adapters, err = DefaultAdapters(mgr, opts); err != nil {
			return err
		}
	}
	queue := requeue.New()
	dispatcher := dispatch.New(opts.MaxConcurrentDispatches, opts.MaxDispatchesPerNamespace, queue.Add)
	if err := mgr.Add(dispatcher); err != nil {
		return fmt.Errorf("cannot add the dispatcher: %w", err)
	}
	metadataClient, err := metadata.NewForConfigAndClient(mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		return fmt.Errorf("cannot create metadata client: %w", err)
	}
	reconciler := &controllers.ToolActionReconciler{
		Client:                  mgr.GetClient(),
		APIReader:               mgr.GetAPIReader(),
		Adapters:                adapters,
		Recorder:                mgr.GetEventRecorder("toolledger"),
		Tools:                   controllers.NewTools(mgr.GetClient(), mgr.GetAPIReader(), opts.Namespace),
		Clock:                   opts.Clock,
		Executor:                opts.ExecutorID,
		LeaseGrace:              opts.LeaseGrace,
		LeaseMargin:             opts.LeaseMargin,
		MaxConcurrentReconciles: opts.MaxConcurrentReconciles,
		OperatorNamespace:       opts.Namespace,
		// Turns one after another, no burst: a backlog's retirements spread
		// evenly beside the live actions instead of a second's worth at once.
		Pacer:                   retention.NewPacer(opts.RetentionRate, 1),
		Dispatcher:              dispatcher,
		Queue:                   queue,
		TrustCallerTraceContext: opts.TrustCallerTraceContext,
	}
	var chains *chainstate.Store
	if opts.ArchiveDSN != "" {
		if reconciler.Archive, err = openArchive(mgr, opts); err != nil {
			return err
		}
		reconciler.Retention = retention.Defaults{Record: opts.ArchiveRecordRetention, Key: max(opts.ArchiveKeyRetention, 0)}
		chains = chainStates(mgr, opts)
		if err := addArchiveAPI(mgr, opts, reconciler.Archive); err != nil {
			return err
		}
	}
	if reconciler.Binding, err = addArchiveBinding(mgr, opts, reconciler.Archive); err != nil {
		return err
	}
	tombstones := keyhistory.Tombstones{Reader: mgr.GetAPIReader(), Client: mgr.GetClient(), Clock: opts.Clock}
	reconciler.History = tombstones
	var archived *keyhistory.Archive
	if reconciler.Archive != nil {
		archived = &keyhistory.Archive{Store: reconciler.Archive, Binding: reconciler.Binding, Marks: marker(mgr, opts, reconciler.Archive),
			Cache: mgr.GetClient(), Clock: opts.Clock, Tombstones: tombstones, Defaults: reconciler.Retention}
		reconciler.History = archived
	}
	// Under leader election the leader alone reconciles, so it keeps
	// every key.
	sweep := &retention.Sweep{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Clock: opts.Clock, Queue: queue, Pacer: reconciler.Pacer,
		Defaults: reconciler.Retention, Archive: reconciler.Archive, Binding: reconciler.Binding, Chains: chains,
		HistoryRetention: opts.ArchiveHistoryRetention, CheckpointEvery: opts.ArchiveCheckpointInterval, Every: opts.RetentionSweep}
	if archived != nil {
		sweep.Mover = archived
		if err := addArchiveMarks(mgr, opts, reconciler, archived, chains); err != nil {
			return err
		}
	}
	notifier := newNotifier(mgr, opts)
	if !opts.NoSharding && !opts.LeaderElection {
		if err := addShards(mgr, opts, reconciler, sweep, notifier); err != nil {
			return err
		}
		sweep.Shards = reconciler.Shards
	}
	// The one writer of ToolAction records, for every controller and the
	// notifier.
	reconciler.Ledger = controllers.NewLedger(controllers.LedgerOptions{
		Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Recorder: reconciler.Recorder,
		RoutineEvents: controllers.NewRoutineEvents(opts.RoutineEventRate), Clock: opts.Clock, Executor: opts.ExecutorID,
		Tools: reconciler.Tools, HandBack: queue.Revisit, Notifier: notifier,
		TrustCallerTraceContext: opts.TrustCallerTraceContext, Chains: chains, Retention: reconciler.Retention,
	})
	if notifier != nil {
		notifier.Ledger, notifier.Shards = reconciler.Ledger, reconciler.Shards
		if err := mgr.Add(notifier); err != nil {
			return fmt.Errorf("cannot add the notifier: %w", err)
		}
	}
	if err := reconciler.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("cannot set up the ToolAction controller: %w", err)
	}
	for _, phase := range []v1alpha1.Phase{v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed} {
		watch := &deletions.Watch{Client: metadataClient, Phase: phase, Queue: queue, Retry: time.Second}
		if err := mgr.Add(watch); err != nil {
			return fmt.Errorf("cannot add the deletion watch: %w", err)
		}
	}
	if err := mgr.Add(sweep); err != nil {
		return fmt.Errorf("cannot add the retention sweep: %w", err)
	}
	decisions := controllers.Decisions{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Recorder:  mgr.GetEventRecorder("toolledger"),
		Clock:     opts.Clock,
		Ledger:    reconciler.Ledger,
	}
	resolutions := &controllers.ToolResolutionReconciler{Decisions: decisions}
	if err := resolutions.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("cannot set up the ToolResolution controller: %w", err)
	}
	approvals := &controllers.ToolApprovalReconciler{Decisions: decisions, Tools: reconciler.Tools}
	if err := approvals.SetupWithManager(context.Background(), mgr); err != nil {
		return fmt.Errorf("cannot set up the ToolApproval controller: %w", err)
	}
	tools := &controllers.ToolStatusReconciler{
		Client:            mgr.GetClient(),
		Adapters:          adapters,
		Clock:             opts.Clock,
		OperatorNamespace: opts.Namespace,
	}
	if err := tools.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("cannot set up the Tool status controllers: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("cannot add health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return fmt.Errorf("cannot add ready check: %w", err)
	}
	return nil
}

// openArchive connects to the archive and migrates its schema, and closes
// it when the manager stops. A manager that cannot reach it does not start:
// it must not retire records nor check keys without it.
func openArchive(mgr ctrl.Manager, opts Options) (*archive.Store, error) {
	// Long enough for a migration that builds an index over a large
	// archive; meanwhile older replicas go on, their new rows held back.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	var options []archive.Option
	if opts.ArchiveRequireSynchronousStandby {
		options = append(options, archive.RequireSynchronousStandby())
	}
	store, err := archive.Open(ctx, opts.ArchiveDSN, options...)
	if err != nil {
		return nil, err
	}
	if store.OwnsSchema() {
		ctrl.Log.WithName("archive").Info("The manager's database role owns the archive's schema: against a rewrite by that role, " +
			"the hash chain's evidence rests on the cluster's checkpoints alone; run the managers as a role of their own " +
			"(manager migrate-archive --grant-to, docs/audit.md#the-databases-roles)")
	}
	watch := &archiveWatch{store: store, requireStandby: opts.ArchiveRequireSynchronousStandby}
	watch.replication(ctx)
	if err := mgr.Add(watch); err != nil {
		store.Close()
		return nil, fmt.Errorf("cannot add the archive: %w", err)
	}
	return store, nil
}

// addArchiveBinding has the manager check the ledger's archive binding
// before each new key, and report it at start and in its readiness. A
// manager with an archive binds the ledger to it first, unless the archive
// was decommissioned; bound to another archive, the ledger stays so, and
// the manager refuses new keys.
func addArchiveBinding(mgr ctrl.Manager, opts Options, store *archive.Store) (*archivebinding.Guard, error) {
	guard := &archivebinding.Guard{Reader: mgr.GetClient(), Namespace: opts.Namespace, Settle: opts.ArchiveBindingSettle,
		Every: 30 * time.Second, Log: ctrl.Log.WithName("archive-binding")}
	if store != nil {
		guard.Archive = store.Identity()
		if err := bindArchive(mgr, opts, store); err != nil {
			return nil, err
		}
	}
	if err := mgr.Add(guard); err != nil {
		return nil, fmt.Errorf("cannot add the archive binding: %w", err)
	}
	if err := mgr.AddReadyzCheck("archive-binding", guard.Ready); err != nil {
		return nil, fmt.Errorf("cannot add the archive binding's readiness check: %w", err)
	}
	return guard, nil
}

// bindArchive binds the ledger to store before the manager starts, with a
// client of its own: the manager's cache is not running yet.
func bindArchive(mgr ctrl.Manager, opts Options, store *archive.Store) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	decommissioned, err := store.Decommissioned(ctx)
	if err != nil || decommissioned {
		return err
	}
	c, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme(), HTTPClient: mgr.GetHTTPClient()})
	if err != nil {
		return fmt.Errorf("cannot create the archive binding's client: %w", err)
	}
	_, err = archivebinding.Bind(ctx, c, opts.Namespace, store.Identity(), time.Now())
	return err
}

// addArchiveMarks has the manager compare the archive's chains with the
// cluster's marks at start and every ArchiveCompareInterval, fail its
// readiness while the archive is behind them, apply the operators'
// acknowledgements of a loss, and the tenants' decisions about the earlier
// lives of their namespaces.
func addArchiveMarks(mgr ctrl.Manager, opts Options, reconciler *controllers.ToolActionReconciler, archived *keyhistory.Archive, chains *chainstate.Store) error {
	watch := &keyhistory.Watch{Store: archived.Store, Reader: mgr.GetClient(), Client: mgr.GetClient(), OperatorNamespace: opts.Namespace,
		Executor: opts.ExecutorID, Every: opts.ArchiveCompareInterval, Log: ctrl.Log.WithName("archive-marks")}
	if err := mgr.Add(watch); err != nil {
		return fmt.Errorf("cannot add the archive's marks: %w", err)
	}
	if err := mgr.AddReadyzCheck("archive-marks", watch.Ready); err != nil {
		return fmt.Errorf("cannot add the archive marks' readiness check: %w", err)
	}
	acknowledgements := &keyhistory.Acknowledgements{Client: mgr.GetClient(), Store: archived.Store, Watch: watch, Marks: archived.Marks, Chains: chains,
		Recheck: func(ctx context.Context) { reconciler.RecheckWaiting(ctx, "") }}
	if err := acknowledgements.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("cannot set up the ArchiveAcknowledgement controller: %w", err)
	}
	decisions := &keyhistory.Decisions{Client: mgr.GetClient(), Recheck: reconciler.RecheckWaiting}
	if err := decisions.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("cannot set up the EarlierLifeDecision controller: %w", err)
	}
	return nil
}

// DecommissionArchive ends the ledger's use of the archive at dsn
// (archivebinding.Decommission), as the identity of cfg.
func DecommissionArchive(ctx context.Context, cfg *rest.Config, dsn, namespace string) (archivebinding.Report, error) {
	store, err := archive.Open(ctx, dsn)
	if err != nil {
		return archivebinding.Report{}, err
	}
	defer store.Close()
	c, err := client.New(cfg, client.Options{Scheme: Scheme()})
	if err != nil {
		return archivebinding.Report{}, fmt.Errorf("cannot create a client of the cluster: %w", err)
	}
	return archivebinding.Decommission(ctx, store, c, namespace)
}

// addArchiveAPI serves the archive's records as the aggregated API
// archive.toolledger.dev, when a serving certificate is given.
func addArchiveAPI(mgr ctrl.Manager, opts Options, store *archive.Store) error {
	log := ctrl.Log.WithName("archive-api")
	if opts.ArchiveAPICertDir == "" {
		log.Info("The archive API is off: no --archive-api-cert-dir; records that left etcd are read only by the key check")
		return nil
	}
	server := &archiveapi.Server{
		Addr: opts.ArchiveAPIAddr, Listener: opts.ArchiveAPIListener, CertDir: opts.ArchiveAPICertDir, Log: log,
		Handler: archiveapi.NewHandler(store, chainStates(mgr, opts), archiveapi.NewAuthenticator(mgr.GetAPIReader()), mgr.GetClient(), log),
	}
	if err := mgr.Add(server); err != nil {
		return fmt.Errorf("cannot add the archive API: %w", err)
	}
	return nil
}

// archiveWatch pings the archive every 10s, so that toolledger_archive_up
// tells of an archive lost while no action needs it, reads how its server
// replicates (and logs a change), and closes it when the manager stops.
// Every replica uses its archive, leader or not.
type archiveWatch struct {
	store          *archive.Store
	requireStandby bool
	// replicated is the last replication read.
	replicated *archive.Replication
}

// replication reads how the archive's server replicates its commits, and
// logs it at start and whenever it changes: an asynchronously replicated
// archive may fail over to a standby that lacks records that left etcd.
func (w *archiveWatch) replication(ctx context.Context) {
	r, err := w.store.ReadReplication(ctx)
	if err != nil {
		return
	}
	if w.replicated != nil && *w.replicated == r {
		return
	}
	w.replicated = &r
	log := ctrl.Log.WithName("archive")
	switch {
	case r.Asynchronous() && w.requireStandby:
		log.Error(archive.ErrNotDurable, "The archive's server replicates asynchronously, and this manager requires a synchronous standby: "+
			"finished records stay in etcd until its commits wait for one (docs/archive.md#durable-before-delete)", "replication", r.String())
	case r.Asynchronous():
		log.Error(archive.ErrNotDurable, "The archive's server replicates asynchronously: a failover may land behind records that left etcd, "+
			"which the managers then find and hold until an operator acknowledges the loss; name a synchronous standby "+
			"(synchronous_standby_names), or run with --archive-require-synchronous-standby to keep records in etcd meanwhile "+
			"(docs/archive.md#durable-before-delete)", "replication", r.String())
	case !r.SynchronousConfigured() && w.requireStandby:
		log.Error(archive.ErrNotDurable, "The archive's server names no synchronous standby, and this manager requires one: "+
			"finished records stay in etcd until it does (docs/archive.md#durable-before-delete)", "replication", r.String())
	default:
		log.Info("The archive's replication", "replication", r.String())
	}
}

func (w *archiveWatch) NeedLeaderElection() bool { return false }

func (w *archiveWatch) Start(ctx context.Context) error {
	defer w.store.Close()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(10 * time.Second):
			if err := w.store.Ping(ctx); err != nil && ctx.Err() == nil {
				ctrl.Log.WithName("archive").Error(err, "The archive cannot be reached: new actions wait for their key check, and no record retires")
				continue
			}
			w.replication(ctx)
		}
	}
}
