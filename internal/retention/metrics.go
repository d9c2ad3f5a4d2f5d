package retention

import "github.com/prometheus/client_golang/prometheus"

var pace = prometheus.NewGauge(prometheus.GaugeOpts{
	Name: "toolledger_retention_pace",
	Help: "Retention work a second this replica allows now: --retention-rate plus the rate at which records came due on their own over the last minute.",
})

// Metrics are the retention pace's collectors, which the manager registers.
func Metrics() []prometheus.Collector {
	return []prometheus.Collector{pace}
}
