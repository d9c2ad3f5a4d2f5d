package dispatch

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"
)

// The dispatcher's gauges, per tool: toolledger_dispatch_<name>.
var (
	dispatchInFlight = toolGauge("in_flight",
		"Downstream calls (attempts and lookups) of a tool that this manager has in flight, or holds a slot for.")
	dispatchWaiting = toolGauge("waiting",
		"Actions of a tool waiting in this manager for a dispatch slot: the tool's in-flight or rate limit, or the namespace's or the manager's bound, is reached.")
	dispatchLimit = toolGauge("limit",
		"A tool's spec.limits as this manager applies them: limit=in_flight is maxInFlight, limit=per_second is requestsPerSecond.", "limit")
)

// toolGauge is a gauge per tool, named by its kind, its own namespace and
// its name, and by the labels extra.
func toolGauge(name, help string, extra ...string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "toolledger_dispatch_" + name, Help: help},
		slices.Concat([]string{"tool_kind", "tool_namespace", "tool"}, extra))
}

// Metrics are the dispatcher's collectors, which the manager registers.
func Metrics() []prometheus.Collector {
	return []prometheus.Collector{dispatchInFlight, dispatchWaiting, dispatchLimit}
}
