// Command manager runs the toolledger operator against the cluster of the
// current kubeconfig or in-cluster configuration.
package main

import (
	"flag"
	"os"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/toolledger/toolledger/cmd/manager/app"
)

func main() {
	var opts app.Options
	flag.StringVar(&opts.MetricsAddr, "metrics-bind-address", ":8080", "Address of the Prometheus metrics endpoint; 0 disables it.")
	flag.StringVar(&opts.ProbeAddr, "health-probe-bind-address", ":8081", "Address of the /healthz and /readyz endpoints; 0 disables them.")
	flag.BoolVar(&opts.LeaderElection, "leader-elect", false, "Elect a leader among replicas. Not needed for correctness: claims keep every dispatch single.")
	flag.StringVar(&opts.LeaderElectionNamespace, "leader-election-namespace", "", "Namespace of the leader election lease; the manager's own namespace when empty.")
	flag.StringVar(&opts.ExecutorID, "executor-id", "", "Name of this instance in claims; the pod or host name with a random suffix when empty.")
	flag.IntVar(&opts.MaxConcurrentReconciles, "max-concurrent-reconciles", 8, "Number of actions handled in parallel. Each holds a worker for its whole downstream call, so one manager completes at most this many ÷ the tools' latency per second: size it to the expected rate × latency (8 workers and a 2s tool make 4 actions/s).")
	flag.BoolVar(&opts.SuccessEvents, "success-events", false, "Also record a Normal event for every successful dispatch (one more API write per action); by default only what needs attention makes an event.")
	flag.DurationVar(&opts.LeaseGrace, "lease-grace", 30*time.Second, "Time added to a tool's timeout to give a claim's lease.")
	flag.Float64Var(&opts.RetentionRate, "retention-rate", app.DefaultRetentionRate, "Records retired into tombstones, and tombstones deleted once their key retention passes, per second (three writes a record). Bounds how hard a backlog (say 100k records coming due at once) presses on the API server; keep it above the rate at which actions of tools with a retention finish, or the backlog grows.")
	flag.StringVar(&opts.Namespace, "operator-namespace", "", "Namespace holding the Secrets of ClusterTools; $POD_NAMESPACE or toolledger-system when empty.")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("setup")

	mgr, err := app.NewManager(ctrl.GetConfigOrDie(), opts)
	if err != nil {
		log.Error(err, "Cannot create the manager")
		os.Exit(1)
	}
	log.Info("Starting manager")
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "Manager stopped with an error")
		os.Exit(1)
	}
}
