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
)

func init() {
	metrics.Registry.MustRegister(claimConflicts, outcomes, deletionWatchSynced)
}
