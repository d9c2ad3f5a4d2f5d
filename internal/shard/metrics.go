package shard

import "github.com/prometheus/client_golang/prometheus"

var shardMembers = prometheus.NewGauge(prometheus.GaugeOpts{
	Name: "toolledger_shard_members",
	Help: "Live managers sharing the active actions by key, as this manager last listed their member Leases; 0 until it has listed them.",
})

// Metrics are the membership's collectors, which the manager registers.
func Metrics() []prometheus.Collector {
	return []prometheus.Collector{shardMembers}
}
