package controllers

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	claimConflicts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolledger_claim_conflicts_total",
		Help: "Compare-and-set writes lost to a newer version of the record, by step (finalizer, claim); each claim conflict is a dispatch that did not happen twice.",
	}, []string{"step"})
	outcomes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolledger_action_transitions_total",
		Help: "Recorded transitions to Succeeded, Failed, RetryScheduled or Unknown, by phase and error class.",
	}, []string{"phase", "error_class"})
	deletionWatchSynced = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "toolledger_deletion_watch_synced",
		Help: "1 while the watch for deletions of finished actions in a phase runs on a complete list; 0 while it lists, or retries a failed list or watch.",
	}, []string{"phase"})
	dispatchInFlight = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "toolledger_dispatch_in_flight",
		Help: "Downstream calls (attempts and lookups) of a tool that this manager has in flight, or holds a slot for.",
	}, toolLabels)
	dispatchWaiting = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "toolledger_dispatch_waiting",
		Help: "Actions of a tool waiting in this manager for a dispatch slot: the tool's in-flight or rate limit, or the namespace's or the manager's bound, is reached.",
	}, toolLabels)
	dispatchLimit = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "toolledger_dispatch_limit",
		Help: "A tool's spec.limits as this manager applies them: limit=in_flight is maxInFlight, limit=per_second is requestsPerSecond.",
	}, append(toolLabels, "limit"))
	shardMembers = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "toolledger_shard_members",
		Help: "Live managers sharing the active actions by key, as this manager last listed their member Leases; 0 until it has listed them.",
	})
)

// toolLabels name a tool in metrics: kind Tool or ClusterTool, the Tool's
// namespace (empty for a ClusterTool) and its name.
var toolLabels = []string{"tool_kind", "tool_namespace", "tool"}

func init() {
	metrics.Registry.MustRegister(claimConflicts, outcomes, deletionWatchSynced, dispatchInFlight, dispatchWaiting, dispatchLimit, shardMembers)
}
