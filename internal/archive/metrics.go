package archive

import "github.com/prometheus/client_golang/prometheus"

var (
	archiveUp = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "toolledger_archive_up",
		Help: "1 while this manager's last use of the archive (a key check, a keep, or its ping every 10s) succeeded; 0 while the archive cannot be reached: new actions wait for their key check and no record retires.",
	})
	archiveErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolledger_archive_errors_total",
		Help: "Uses of the archive that failed, by operation: check (a new action's key), keep (a record leaving etcd), ping.",
	}, []string{"operation"})
)

// Metrics are the archive's collectors, which the manager registers.
func Metrics() []prometheus.Collector {
	return []prometheus.Collector{archiveUp, archiveErrors}
}

// observe records the outcome of one use of the archive.
func observe(operation string, err error) {
	if err != nil {
		archiveUp.Set(0)
		archiveErrors.WithLabelValues(operation).Inc()
		return
	}
	archiveUp.Set(1)
}
