// Package duplicates declares what the manager and the SDK share of the
// series that count repeated keys: their names and buckets. The manager
// counts the repeats it sees (source tombstone, downstream_replay), the SDK
// those only the agent's process sees (source sdk, an apply that wrote
// nothing), so the two must agree for their series to sum. It imports
// nothing, so that the SDK and the controllers depend on it and not on
// each other.
package duplicates

// The series' names.
const (
	HitsName           = "toolledger_duplicate_hits_total"
	KeyConflictsName   = "toolledger_key_conflicts_total"
	AgeName            = "toolledger_duplicate_age_seconds"
	RetentionRatioName = "toolledger_duplicate_age_retention_ratio"
)

// AgeBuckets span a retry within seconds to a backup restored months
// later; RetentionRatioBuckets are tenths of a key retention.
var (
	AgeBuckets            = []float64{1, 10, 60, 300, 900, 3600, 6 * 3600, 24 * 3600, 3 * 24 * 3600, 7 * 24 * 3600, 30 * 24 * 3600, 90 * 24 * 3600}
	RetentionRatioBuckets = []float64{.1, .2, .3, .4, .5, .6, .7, .8, .9, 1}
)
