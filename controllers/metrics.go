package controllers

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	claimConflicts = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "toolledger_claim_conflicts_total",
		Help: "Claims lost to a newer version of the record; each is a dispatch that did not happen twice.",
	})
	outcomes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolledger_action_transitions_total",
		Help: "Recorded transitions to Succeeded, Failed, RetryScheduled or Unknown, by phase and error class.",
	}, []string{"phase", "error_class"})
)

func init() {
	metrics.Registry.MustRegister(claimConflicts, outcomes)
}
