package archive

import "github.com/prometheus/client_golang/prometheus"

var (
	// archiveUp has no labels; as a vector, it exports nothing until a
	// manager with an archive sets it, so that the alert on it stays quiet
	// where there is no archive.
	archiveUp = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "toolledger_archive_up",
		Help: "With an archive: 1 while this manager's last use of it (a key check, a keep, or its ping every 10s) succeeded; 0 while it cannot be reached: new actions wait for their key check and no record retires. Absent without an archive.",
	}, nil)
	archiveErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolledger_archive_errors_total",
		Help: "Uses of the archive that failed, by operation: check (a new action's key), keep (a record leaving etcd), durable (a keep the server committed without its synchronous standbys' confirmation: the record stays in etcd), read, list and verify (the archive API), prune, ping.",
	}, []string{"operation"})
	// standbys and synchronousCommit have no labels, as archiveUp.
	standbys = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "toolledger_archive_standbys",
		Help: "With an archive: the standbys streaming from its server (pg_stat_replication), as the manager last read them.",
	}, nil)
	synchronousCommit = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "toolledger_archive_synchronous_commit",
		Help: "With an archive: 1 while its server's commits wait for a synchronous standby (synchronous_standby_names is set), so that a record leaves etcd only once durable where a failover lands; 0 while they wait for none (docs/archive.md#durable-before-delete).",
	}, nil)
	recordsPruned = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "toolledger_archive_records_pruned_total",
		Help: "Archived records deleted by --archive-history-retention: their tool's keyRetention and then the history retention had passed since they finished.",
	})
)

// Metrics are the archive's collectors, which the manager registers.
func Metrics() []prometheus.Collector {
	return []prometheus.Collector{archiveUp, archiveErrors, recordsPruned, standbys, synchronousCommit}
}

// observe records the outcome of one use of the archive.
func observe(operation string, err error) {
	if err != nil {
		archiveUp.WithLabelValues().Set(0)
		archiveErrors.WithLabelValues(operation).Inc()
		return
	}
	archiveUp.WithLabelValues().Set(1)
}
