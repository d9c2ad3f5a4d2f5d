package controllers

import "github.com/toolledger/toolledger/internal/keyhistory"

// earlierRecord is what a key settled before, and where that is kept, for
// the messages, reasons and metrics of an action answered from it.
type earlierRecord struct {
	keyhistory.Earlier
	// settledReason answers the same request; conflictReason refuses
	// another; source labels the duplicate and conflict metrics.
	settledReason, conflictReason, source string
}

// earlierFrom is what the rules read of the key's history; nil for none.
func earlierFrom(e *keyhistory.Earlier) *earlierRecord {
	if e == nil {
		return nil
	}
	r := &earlierRecord{Earlier: *e, settledReason: ReasonSettledByTombstone, conflictReason: ReasonTombstoneConflict, source: sourceTombstone}
	if e.Archived {
		r.settledReason, r.conflictReason, r.source = ReasonSettledByArchive, ReasonArchiveConflict, sourceArchive
	}
	return r
}
