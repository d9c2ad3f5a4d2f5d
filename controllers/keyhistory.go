package controllers

import (
	"encoding/json"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/keyhistory"
)

// earlierRecord is what a key settled before, and where that is kept, for
// the messages, reasons and metrics of an action answered from it.
type earlierRecord struct {
	record v1alpha1.TombstoneRecord
	// result is the stored result of the downstream's answer, which an
	// archived record keeps and a Tombstone does not.
	result json.RawMessage
	// where names the record in messages: "Tombstone order-1".
	where string
	// settledReason answers the same request; conflictReason refuses
	// another; source labels the duplicate and conflict metrics.
	settledReason, conflictReason, source string
}

// earlierFrom is what the rules read of the key's history; nil for none.
func earlierFrom(e *keyhistory.Earlier) *earlierRecord {
	if e == nil {
		return nil
	}
	r := &earlierRecord{record: e.Record, result: e.Result, where: e.Where,
		settledReason: ReasonSettledByTombstone, conflictReason: ReasonTombstoneConflict, source: sourceTombstone}
	if e.Archived {
		r.settledReason, r.conflictReason, r.source = ReasonSettledByArchive, ReasonArchiveConflict, sourceArchive
	}
	return r
}
