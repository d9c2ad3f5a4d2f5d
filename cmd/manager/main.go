// Command manager runs the toolledger operator against the cluster of the
// current kubeconfig or in-cluster configuration.
package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/toolledger/toolledger/cmd/manager/app"
	"github.com/toolledger/toolledger/internal/archive"
	"github.com/toolledger/toolledger/internal/archivebinding"
	"github.com/toolledger/toolledger/internal/egress"
	"github.com/toolledger/toolledger/internal/notify"
	"github.com/toolledger/toolledger/internal/telemetry"
)

// prefixes appends a flag's CIDRs to *into, refusing what is not one.
func prefixes(into *[]netip.Prefix) func(string) error {
	return func(list string) error {
		parsed, err := egress.ParsePrefixes(list)
		*into = append(*into, parsed...)
		return err
	}
}

func main() {
	if len(os.Args) > 1 {
		if run, ok := map[string]func([]string) int{migrateCommand: migrateArchive, decommissionCommand: decommissionArchive}[os.Args[1]]; ok {
			os.Exit(run(os.Args[2:]))
		}
	}
	var opts app.Options
	flag.StringVar(&opts.MetricsAddr, "metrics-bind-address", ":8443", "Address of the Prometheus metrics endpoint; 0 disables it.")
	flag.BoolVar(&opts.MetricsSecure, "metrics-secure", true, "Serve metrics over HTTPS to callers whose bearer token the API server authenticates and authorizes for GET on the non-resource URL /metrics (the toolledger-metrics-reader ClusterRole); false serves plain HTTP to anyone.")
	flag.StringVar(&opts.MetricsCertDir, "metrics-cert-dir", "", "Directory holding tls.crt and tls.key for the metrics endpoint; empty generates a self-signed certificate at start.")
	flag.StringVar(&opts.ProbeAddr, "health-probe-bind-address", ":8081", "Address of the /healthz and /readyz endpoints; 0 disables them.")
	flag.BoolVar(&opts.LeaderElection, "leader-elect", false, "Elect a leader among replicas. Not needed for correctness: claims keep every dispatch single.")
	flag.StringVar(&opts.LeaderElectionNamespace, "leader-election-namespace", "", "Namespace of the leader election lease; the manager's own namespace when empty.")
	flag.StringVar(&opts.ExecutorID, "executor-id", "", "Name of this instance in claims; the pod or host name with a random suffix when empty.")
	flag.IntVar(&opts.MaxConcurrentReconciles, "max-concurrent-reconciles", 8, "Number of actions reconciled in parallel. No worker waits on a downstream (the dispatcher makes those calls), so this bounds API-server work, not the calls in flight.")
	flag.IntVar(&opts.MaxConcurrentDispatches, "max-concurrent-dispatches", app.DefaultMaxConcurrentDispatches, "Downstream calls (attempts and lookups) in flight at once in this manager, over every tool; each tool's spec.limits bound its own share. A slot is held from the claim until the downstream answers, so a manager completes at most this many ÷ (the tools' latency + the claim's write) actions per second (128 calls and a 1s tool make about 120/s).")
	flag.IntVar(&opts.MaxDispatchesPerNamespace, "max-dispatches-per-namespace", 0, "Downstream calls in flight at once for the actions of one namespace, so that one tenant's backlog leaves room for the others; half of --max-concurrent-dispatches when 0.")
	routineEvents := flag.Bool("routine-events", true, "Record Normal events for the happy path's changes of phase too (a claim to Executing, a success), for up to --routine-event-rate actions a second; false leaves them all to status.history. Warnings are always recorded.")
	flag.Float64Var(&opts.RoutineEventRate, "routine-event-rate", app.DefaultRoutineEventRate, "Actions a second, in bursts of five seconds' worth, whose happy path is told as Normal events (two API writes an action beside its record's three); the others' is in status.history alone. A transition with a warning is told whole, and its action's story from then on. inf tells every action's, 0 none (docs/operations.md).")
	flag.DurationVar(&opts.LeaseGrace, "lease-grace", 30*time.Second, "Time added to a tool's timeout to give a claim's lease.")
	flag.DurationVar(&opts.LeaseMargin, "lease-margin", 0, "How long before a claim's lease ends its executor stops sending the attempt: the most the replicas' clocks may disagree. Less than --lease-grace; 5s, or half of --lease-grace when that is less, when 0.")
	flag.BoolVar(&opts.NoSharding, "no-sharding", false, "Have every replica race for every active action, as one unsharded manager does. By default replicas split the active actions by key hash over the live members' Leases in the operator namespace; the claim keeps every dispatch single either way.")
	flag.DurationVar(&opts.MemberLeaseDuration, "member-lease-duration", app.DefaultMemberLeaseDuration, "How long this replica's member Lease lasts without renewal (renewed every third of it): how soon the other replicas take the share of one that died.")
	flag.Float64Var(&opts.RetentionRate, "retention-rate", app.DefaultRetentionRate, "Retention work per second (records retired into tombstones or the archive, tombstones moved or deleted; three writes a record) by this replica, which sweeps the keys it owns, beyond the records coming due on their own: those are retired at least as fast as they came due over the last minute, so that finished records in etcd level off under a steady load. Bounds how hard a backlog (say 100k records coming due at once, or what the sweep finds after an outage) presses on the API server.")
	flag.StringVar(&opts.Namespace, "operator-namespace", "", "Namespace holding the Secrets of ClusterTools; $POD_NAMESPACE or toolledger-system when empty.")
	flag.Func("egress-allow", "Comma-separated CIDRs or addresses that HTTP tools may reach although they are loopback, link-local, private or otherwise refused (docs/security.md), such as 10.20.0.0/16 for in-cluster downstreams. The API server's own endpoint stays refused.", prefixes(&opts.Egress.Allow))
	flag.Func("egress-deny", "Comma-separated CIDRs or addresses that HTTP tools may not reach even where --egress-allow covers them: the nodes', pods' and services' ranges inside an allowed range, or cluster ranges outside the private ones.", prefixes(&opts.Egress.Deny))
	flag.Func("egress-plain-http", "Comma-separated host names, addresses or CIDRs to which a Tool's authHeader may be sent over http:// (a sidecar on loopback, say); everywhere else credentials need https://.", func(list string) error {
		for _, host := range strings.Split(list, ",") {
			if host = strings.TrimSpace(host); host != "" {
				opts.Egress.PlainHTTP = append(opts.Egress.PlainHTTP, host)
			}
		}
		return nil
	})
	flag.BoolVar(&opts.TrustCallerTraceContext, "trust-caller-trace-context", false, "Have the spans of an action's attempts and lookups continue the trace its caller supplied (the toolledger.dev/traceparent annotation, spec.provenance.traceID), and the downstream request and the notifications carry it, for a platform whose tenants are all trusted. By default a span starts a trace of its own with a link to the caller's (toolledger.caller_supplied), since a tenant may name any trace, another tenant's too (docs/operations.md).")
	flag.Func("notification-sink-dir", "NAME=DIR of a CloudEvents receiver (a Knative broker, an Argo Events webhook, a relay) that gets an event for each action awaiting approval, escalated, succeeded or failed, at least once, with an id derived from the key and the transition (docs/operations.md): DIR holds its URL in the file url and, optionally, the Standard Webhooks key that signs each delivery (whsec_ and the key in base64) in signing-key, as a Secret mounted there does; read at start; repeatable.", notify.SinkDirFlag(&opts.NotificationSinks))
	flag.Func("notification-sink", "NAME=URL of a notification sink as --notification-sink-dir names one, for local runs: the URL (and any token in it) is in the process's arguments, a pod's spec, and deliveries are not signed; repeatable.", notify.SinkFlag(&opts.NotificationSinks))
	flag.StringVar(&opts.ArchiveDSN, "archive-dsn", "", "PostgreSQL database that keeps finished records and the keys they guard, outside etcd (docs/archive.md), as a URL or key=value string without a password (a command line is no place for one: give a DSN with a password in $TOOLLEDGER_ARCHIVE_DSN); $TOOLLEDGER_ARCHIVE_DSN when unset. Empty keeps keys in Tombstones.")
	flag.DurationVar(&opts.ArchiveRecordRetention, "archive-record-retention", app.DefaultArchiveRecordRetention, "With --archive-dsn, how long the finished records of a Tool that sets no recordRetention stay in etcd before they leave for the archive; a Tool's own recordRetention wins.")
	flag.DurationVar(&opts.ArchiveKeyRetention, "archive-key-retention", app.DefaultArchiveKeyRetention, "With --archive-dsn, how long the keys of a Tool that sets no keyRetention are kept after their action finished; a Tool's own keyRetention wins; a negative value keeps them for good.")
	flag.DurationVar(&opts.ArchiveHistoryRetention, "archive-history-retention", 0, "With --archive-dsn, how long archived records stay readable after their key is freed, before they are deleted from the archive; 0 keeps them for good.")
	flag.StringVar(&opts.ArchiveAPIAddr, "archive-api-bind-address", ":8445", "With --archive-dsn and --archive-api-cert-dir, where the archive's aggregated API (archive.toolledger.dev) listens for the API server.")
	flag.DurationVar(&opts.ArchiveCheckpointInterval, "archive-checkpoint-interval", app.DefaultArchiveCheckpointInterval, "With --archive-dsn, how often, at most, the cluster keeps a checkpoint of each namespace's archived hash chain whose head moved (ConfigMap toolledger-chain-<namespace> of the operator namespace): a rewrite of the database, heads included, by its superuser shows against anything before one (docs/audit.md).")
	flag.DurationVar(&opts.ArchiveBindingSettle, "archive-binding-settle", archivebinding.DefaultSettle, "With --archive-dsn, how long the ledger's new binding to its archive stands before a record is kept there alone (no Tombstone): time for replicas running without the archive, during the rollout that turns it on, to learn of the binding and stop dispatching (docs/archive.md#the-archive-binding).")
	flag.BoolVar(&opts.ArchiveRequireSynchronousStandby, "archive-require-synchronous-standby", false, "With --archive-dsn, keep finished records in etcd while the archive's server names no synchronous standby (synchronous_standby_names): a record then leaves etcd only once durable on a standby a failover lands on. Without it such a server is reported (log, toolledger_archive_synchronous_commit) and its records are kept; an archive that fails over behind them is held until acknowledged (docs/archive.md#durable-before-delete).")
	flag.DurationVar(&opts.ArchiveCompareInterval, "archive-compare-interval", app.DefaultArchiveCompareInterval, "With --archive-dsn, how often the manager compares every archived chain with the cluster's mark of it (the newest record that left etcd), and so how soon an archive restored or failed over behind what left etcd is reported; every key check and keep compares its own namespace's at once (docs/archive.md#when-the-archive-goes-back).")
	flag.StringVar(&opts.ArchiveAPICertDir, "archive-api-cert-dir", "", "Directory holding tls.crt and tls.key for the archive API, whose CA the APIService names; empty serves no archive API.")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	if math.IsNaN(opts.RoutineEventRate) {
		fmt.Fprintln(os.Stderr, "--routine-event-rate must be a number of actions a second, or inf")
		os.Exit(2)
	}
	if !*routineEvents || opts.RoutineEventRate == 0 {
		opts.RoutineEventRate = -1
	}
	// Read after the flags, so that --help never prints a password.
	if opts.ArchiveDSN == "" {
		opts.ArchiveDSN = os.Getenv("TOOLLEDGER_ARCHIVE_DSN")
	} else if dsnHasPassword(opts.ArchiveDSN) {
		fmt.Fprintln(os.Stderr, "--archive-dsn holds a password, which a command line keeps where anyone may read it (the process list, a pod's spec): give it in $TOOLLEDGER_ARCHIVE_DSN, as the chart does from a Secret")
		os.Exit(2)
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("setup")

	tracing, err := telemetry.Setup(context.Background(), "toolledger-manager")
	if err != nil {
		log.Error(err, "Cannot set up tracing")
		os.Exit(1)
	}
	mgr, err := app.NewManager(ctrl.GetConfigOrDie(), opts)
	if err != nil {
		log.Error(err, "Cannot create the manager")
		os.Exit(1)
	}
	log.Info("Starting manager", "tracing", tracing.Enabled())
	err = mgr.Start(ctrl.SetupSignalHandler())
	telemetry.Flush(tracing, log)
	if err != nil {
		log.Error(err, "Manager stopped with an error")
		os.Exit(1)
	}
}

// decommissionCommand ends the ledger's use of its archive
// (docs/archive.md#decommissioning-an-archive).
const decommissionCommand = "decommission-archive"

// decommissionArchive writes the archive's kept keys back as Tombstones,
// then releases the archive binding, so that managers without the archive
// may dispatch again; it returns the exit status.
func decommissionArchive(args []string) int {
	flags := flag.NewFlagSet(decommissionCommand, flag.ContinueOnError)
	var dsnFlags archiveDSN
	dsnFlags.bind(flags, "The archive's database, as the schema's owner")
	namespace := flags.String("operator-namespace", "", "The manager's namespace, which holds the archive binding; $POD_NAMESPACE or toolledger-system when empty.")
	flags.Usage = func() {
		fmt.Fprintf(flags.Output(), `Usage: manager %s [flags]

Ends the ledger's use of its archive without losing a key: the archive stops
keeping records, every key it keeps is written back as a Tombstone, then the
archive binding lets managers without the archive dispatch again. Run it as
the manager's ServiceAccount (only it may write Tombstones), for instance
with kubectl exec -i in a manager pod, the owner's DSN on standard input
(--archive-dsn-file=-); the cluster is the in-cluster one or $KUBECONFIG's.
Keys of an earlier life of a namespace that nobody adopted or released
refuse it, before anything changes. Interrupted, run it again.

`, decommissionCommand)
		flags.PrintDefaults()
	}
	if err := flags.Parse(args); err != nil {
		return 2
	}
	dsn, err := dsnFlags.resolve(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if *namespace == "" {
		*namespace = app.DefaultNamespace()
	}
	if dsn == "" {
		fmt.Fprintln(os.Stderr, "--archive-dsn-file (or $TOOLLEDGER_ARCHIVE_DSN) must name the archive to decommission")
		return 2
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	report, err := app.DecommissionArchive(ctx, ctrl.GetConfigOrDie(), dsn, *namespace)
	fmt.Printf("Tombstones written: %d; keys a Tombstone kept already: %d; keys of namespaces that no longer exist: %d; keys of earlier lives released: %d\n",
		report.Written, report.Present, report.Gone, report.Released)
	if err != nil {
		fmt.Fprintln(os.Stderr, "The archive is not decommissioned yet:", err)
		return 1
	}
	fmt.Println("The archive is decommissioned: managers without it may run; it still answers reads.")
	return 0
}

// migrateCommand migrates the archive's schema as its owner, apart from
// the managers, which then run as a role that can only append and read.
const migrateCommand = "migrate-archive"

// migrateArchive migrates the archive's schema and grants the manager's
// role what it needs; it returns the exit status.
func migrateArchive(args []string) int {
	flags := flag.NewFlagSet(migrateCommand, flag.ContinueOnError)
	var dsnFlags archiveDSN
	dsnFlags.bind(flags, "The archive's database, as the schema's owner")
	grantTo := flags.String("grant-to", "", "The managers' database role, granted what a manager needs (read the schema, insert and read records, prune through the owner's functions) and nothing more; none when empty.")
	flags.Usage = func() {
		fmt.Fprintf(flags.Output(), `Usage: manager %s [flags]

Migrates the archive's schema to this manager's version as the schema's
owner, and grants the managers' own role what they need, so that they run as
a role that can append records and read them, and neither change nor delete
one (docs/audit.md, "The database's roles"). The chart runs it as a Job
before each install and upgrade.

`, migrateCommand)
		flags.PrintDefaults()
	}
	if err := flags.Parse(args); err != nil {
		return 2
	}
	dsn, err := dsnFlags.resolve(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if dsn == "" {
		fmt.Fprintln(os.Stderr, "--archive-dsn-file (or $TOOLLEDGER_ARCHIVE_DSN) must name the archive to migrate")
		return 2
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if err := archive.Migrate(ctx, dsn, *grantTo); err != nil {
		fmt.Fprintln(os.Stderr, "The archive is not migrated:", err)
		return 1
	}
	fmt.Printf("The archive's schema is at version %d", archive.SchemaVersion())
	if *grantTo != "" {
		fmt.Printf("; role %s may append and read records", *grantTo)
	}
	fmt.Println(".")
	return 0
}
