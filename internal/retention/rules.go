// Package retention holds the tools' retentions: the rules that say when a
// finished record leaves etcd and when its key is free again (used by the
// ToolAction controller's retire step, its key check and the sweep), the
// Pacer that spreads that work, and the Sweep that finds what no executor
// scheduled.
package retention

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

// Retirement is what the retention rules make of a finished record.
type Retirement int

const (
	// KeepRecord means nothing is due yet.
	KeepRecord Retirement = iota
	// ToTombstone means recordRetention passed: the record is deleted, leaving a
	// tombstone when it may have caused an effect.
	ToTombstone
	// FreeKey means keyRetention passed: the record is deleted without a
	// tombstone and its name may mean a new intent.
	FreeKey
)

// Due applies the tool's two retentions to a finished action: what is due
// at now, and otherwise how long until something is (zero: never). The
// action's keptUntil is a promise made to its callers: its key is not
// freed sooner, whatever the tool says now.
func Due(a *v1alpha1.ToolAction, tool *v1alpha1.Tool, now time.Time) (Retirement, time.Duration) {
	if a.Status.CompletionTime == nil {
		return KeepRecord, 0
	}
	if a.Status.RefusedByEarlierRecord() {
		// It holds the key with a spec its earlier record refused.
		return ToTombstone, 0
	}
	completed, promised := a.Status.CompletionTime.Time, a.Status.KeptUntil
	if KeyPassed(completed, promised, tool, now) {
		return FreeKey, 0
	}
	if d := tool.Spec.RecordRetention; d != nil && !now.Before(completed.Add(d.Duration)) {
		return ToTombstone, 0
	}
	// The record's end, or the key's (not before the promise), whichever
	// comes first.
	var due time.Time
	if d := tool.Spec.RecordRetention; d != nil {
		due = completed.Add(d.Duration)
	}
	if d := tool.Spec.KeyRetention; d != nil {
		freed := v1alpha1.KeyFreedAt(completed, promised, d.Duration)
		if due.IsZero() || freed.Before(due) {
			due = freed
		}
	}
	if due.IsZero() {
		return KeepRecord, 0
	}
	return KeepRecord, due.Sub(now)
}

// KeyPassed reports whether a key whose action finished at completed is
// free again by the tool's keyRetention, and by promised, its keptUntil,
// when it has one.
func KeyPassed(completed time.Time, promised *metav1.Time, tool *v1alpha1.Tool, now time.Time) bool {
	return tool != nil && tool.Spec.KeyRetention != nil && !now.Before(v1alpha1.KeyFreedAt(completed, promised, tool.Spec.KeyRetention.Duration))
}

// KeptUntil is until when the key of a finished action that was
// dispatched is kept, by spec (its tool's, the archive's defaults
// applied): its keyRetention after completion. Nil when only an
// administrator frees the key, and for an action never dispatched, whose
// key guards no effect.
func KeptUntil(a *v1alpha1.ToolAction, spec *v1alpha1.ToolSpec) *metav1.Time {
	if a.Status.CompletionTime == nil || a.Status.Attempts == 0 || spec.KeyRetention == nil {
		return nil
	}
	kept := metav1.NewTime(a.Status.CompletionTime.Add(spec.KeyRetention.Duration))
	return &kept
}

// Earliest is the shorter of the tool's retentions: a finished record is
// looked at once it has passed.
func Earliest(spec *v1alpha1.ToolSpec) *time.Duration {
	record, key := durationOf(spec.RecordRetention), durationOf(spec.KeyRetention)
	if record == nil || (key != nil && *key < *record) {
		return key
	}
	return record
}

func durationOf(d *metav1.Duration) *time.Duration {
	if d == nil {
		return nil
	}
	return &d.Duration
}

// Defaults are the retentions of a tool that sets none, with an archive:
// its finished records stay in etcd for Record, then in the archive, and
// its keys are kept for Key. Zero sets none: without an archive, a tool's
// own retentions are all there is.
type Defaults struct {
	Record, Key time.Duration
}

// Of is the spec whose retentions apply to a tool's records.
func (d Defaults) Of(spec *v1alpha1.ToolSpec) *v1alpha1.ToolSpec {
	if d == (Defaults{}) {
		return spec
	}
	defaulted := *spec
	if spec.RecordRetention == nil && d.Record > 0 {
		defaulted.RecordRetention = &metav1.Duration{Duration: d.Record}
	}
	if spec.KeyRetention == nil && d.Key > 0 {
		defaulted.KeyRetention = &metav1.Duration{Duration: d.Key}
	}
	return &defaulted
}
