package dispatch

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"
)

// toolLabels name a tool, its own namespace included.
var toolLabels = []string{"tool_kind", "tool_namespace", "tool"}

var (
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
	}, slices.Concat(toolLabels, []string{"limit"}))
)

// Metrics are the dispatcher's collectors, which the manager registers.
func Metrics() []prometheus.Collector {
	return []prometheus.Collector{dispatchInFlight, dispatchWaiting, dispatchLimit}
}
