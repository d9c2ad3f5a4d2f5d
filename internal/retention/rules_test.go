package retention

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// finishedAgo is an action that succeeded ago before t0.
func finishedAgo(ago time.Duration) *v1alpha1.ToolAction {
	completed := metav1.NewTime(t0.Add(-ago))
	return &v1alpha1.ToolAction{Status: v1alpha1.ToolActionStatus{Phase: v1alpha1.PhaseSucceeded, Attempts: 1, CompletionTime: &completed}}
}

func TestRetention(t *testing.T) {
	hours := func(h float64) *metav1.Duration {
		return &metav1.Duration{Duration: time.Duration(h * float64(time.Hour))}
	}
	tests := []struct {
		name         string
		record, key  *metav1.Duration
		completedAgo time.Duration
		want         Retirement
		wantAfter    time.Duration
	}{
		{"no retention: kept for good", nil, nil, time.Hour, KeepRecord, 0},
		{"keyRetention alone, before: kept until it", nil, hours(2), time.Hour, KeepRecord, time.Hour},
		{"keyRetention alone, passed: the key is freed (the record deleted, no tombstone)", nil, hours(1), time.Hour, FreeKey, 0},
		{"recordRetention alone, before: kept until it", hours(3), nil, time.Hour, KeepRecord, 2 * time.Hour},
		{"recordRetention alone, passed: a tombstone keeps the key for good", hours(1), nil, 90 * time.Minute, ToTombstone, 0},
		{"both, before either: the record's end comes first", hours(2), hours(24), time.Hour, KeepRecord, time.Hour},
		{"both, record passed: a tombstone until the key's end", hours(1), hours(24), 2 * time.Hour, ToTombstone, 0},
		{"both, key passed: freed", hours(1), hours(24), 25 * time.Hour, FreeKey, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tool := &v1alpha1.Tool{}
			tool.Spec.RecordRetention, tool.Spec.KeyRetention = tt.record, tt.key
			finished := finishedAgo(tt.completedAgo)
			if got, after := Due(finished, tool, t0); got != tt.want || after != tt.wantAfter {
				t.Errorf("retention = %d, %s; want %d, %s", got, after, tt.want, tt.wantAfter)
			}
		})
	}
	if got, _ := Due(&v1alpha1.ToolAction{Status: v1alpha1.ToolActionStatus{Phase: v1alpha1.PhaseSucceeded}}, &v1alpha1.Tool{}, t0); got != KeepRecord {
		t.Errorf("retention without a completion time = %d, want KeepRecord", got)
	}
}

// With an archive, a tool that sets no recordRetention has its records
// leave etcd after the manager's default; its own setting wins, and
// without an archive nothing changes.
func TestRetentionWithAnArchive(t *testing.T) {
	hours := func(h int) *metav1.Duration { return &metav1.Duration{Duration: time.Duration(h) * time.Hour} }
	archiving := Defaults{Record: 5 * time.Minute}
	finished := finishedAgo(10 * time.Minute)
	tests := []struct {
		name      string
		defaults  Defaults
		record    *metav1.Duration
		want      Retirement
		wantAfter time.Duration
	}{
		{"no recordRetention, an archive: the default applies", archiving, nil, ToTombstone, 0},
		{"the tool's recordRetention wins over the default", archiving, hours(1), KeepRecord, 50 * time.Minute},
		{"no archive: kept for good, as before", Defaults{}, nil, KeepRecord, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tool := &v1alpha1.Tool{}
			tool.Spec.RecordRetention = tt.record
			spec := tt.defaults.Of(&tool.Spec)
			if got, after := Due(finished, &v1alpha1.Tool{Spec: *spec}, t0); got != tt.want || after != tt.wantAfter {
				t.Errorf("retention = %d, %s; want %d, %s", got, after, tt.want, tt.wantAfter)
			}
			if tool.Spec.RecordRetention != tt.record {
				t.Error("Of changed the tool's own spec")
			}
		})
	}
}

// An action's keptUntil is a promise to its callers: a Tool whose
// keyRetention was shortened after the action finished does not free the
// key before it.
func TestKeptUntilIsAFloor(t *testing.T) {
	hours := func(h int) *metav1.Duration { return &metav1.Duration{Duration: time.Duration(h) * time.Hour} }
	promised := func(after time.Duration) *metav1.Time { at := metav1.NewTime(t0.Add(after)); return &at }
	tests := []struct {
		name         string
		record, key  *metav1.Duration
		keptUntil    *metav1.Time
		completedAgo time.Duration
		want         Retirement
		wantAfter    time.Duration
	}{
		{"keyRetention shortened to 1h, promised 24h: kept until the promise", nil, hours(1), promised(21 * time.Hour), 3 * time.Hour, KeepRecord, 21 * time.Hour},
		{"the promise passed too: freed", nil, hours(1), promised(-time.Minute), 3 * time.Hour, FreeKey, 0},
		{"recordRetention still moves the record: its Tombstone keeps the promise", hours(1), hours(1), promised(21 * time.Hour), 3 * time.Hour, ToTombstone, 0},
		{"no promise: the tool alone decides", nil, hours(1), nil, 3 * time.Hour, FreeKey, 0},
		{"recordRetention before the key's end: the record's end comes first, promise or not", hours(2), hours(24), promised(23 * time.Hour), time.Hour, KeepRecord, time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tool := &v1alpha1.Tool{}
			tool.Spec.RecordRetention, tool.Spec.KeyRetention = tt.record, tt.key
			finished := finishedAgo(tt.completedAgo)
			finished.Status.KeptUntil = tt.keptUntil
			if got, after := Due(finished, tool, t0); got != tt.want || after != tt.wantAfter {
				t.Errorf("retention = %d, %s; want %d, %s", got, after, tt.want, tt.wantAfter)
			}
		})
	}
}

func TestKeptUntil(t *testing.T) {
	day := &metav1.Duration{Duration: 24 * time.Hour}
	dispatched := finishedAgo(time.Hour)
	if got := KeptUntil(dispatched, &v1alpha1.ToolSpec{KeyRetention: day}); got == nil || !got.Equal(ptrTime(t0.Add(23*time.Hour))) {
		t.Errorf("KeptUntil of a dispatched action = %v, want completion + 24h = %s", got, t0.Add(23*time.Hour))
	}
	if got := KeptUntil(dispatched, Defaults{Key: 90 * 24 * time.Hour}.Of(&v1alpha1.ToolSpec{})); got == nil || !got.Equal(ptrTime(t0.Add(90*24*time.Hour-time.Hour))) {
		t.Errorf("KeptUntil by the archive's default = %v, want completion + 90 days", got)
	}
	if got := KeptUntil(dispatched, &v1alpha1.ToolSpec{}); got != nil {
		t.Errorf("KeptUntil without a keyRetention = %v, want none: only an administrator frees the key", got)
	}
	rejected := finishedAgo(time.Hour)
	rejected.Status.Attempts = 0
	if got := KeptUntil(rejected, &v1alpha1.ToolSpec{KeyRetention: day}); got != nil {
		t.Errorf("KeptUntil of an action never dispatched = %v, want none", got)
	}
	if got := KeptUntil(&v1alpha1.ToolAction{Status: v1alpha1.ToolActionStatus{Attempts: 1}}, &v1alpha1.ToolSpec{KeyRetention: day}); got != nil {
		t.Errorf("KeptUntil of a running action = %v, want none", got)
	}
}

func ptrTime(t time.Time) *metav1.Time { m := metav1.NewTime(t); return &m }

// A record refused because its key's tombstone or archived record holds
// another request leaves at once, whatever the tool keeps: while it stays,
// a retry of the original request meets its spec. One refused for another
// reason, or one that dispatched, is kept as the tool says.
func TestARecordRefusedByItsKeysEarlierRecordLeavesAtOnce(t *testing.T) {
	keep := &v1alpha1.Tool{Spec: v1alpha1.ToolSpec{RecordRetention: &metav1.Duration{Duration: 24 * time.Hour}}}
	refused := func(reason string, attempts int32) *v1alpha1.ToolAction {
		a := finishedAgo(time.Second)
		a.Status.Phase, a.Status.Attempts = v1alpha1.PhaseFailed, attempts
		a.Status.Error = &v1alpha1.ActionError{Class: v1alpha1.ErrorClassDuplicateConflict, Reason: reason}
		return a
	}
	for name, tc := range map[string]struct {
		action *v1alpha1.ToolAction
		want   Retirement
	}{
		"refused by the key's archived record":  {refused(v1alpha1.ReasonArchiveConflict, 0), ToTombstone},
		"refused by the key's tombstone":        {refused(v1alpha1.ReasonTombstoneConflict, 0), ToTombstone},
		"refused for a changed request in etcd": {refused("RequestChanged", 0), KeepRecord},
		"failed after a dispatch":               {refused(v1alpha1.ReasonArchiveConflict, 1), KeepRecord},
	} {
		if got, _ := Due(tc.action, keep, t0); got != tc.want {
			t.Errorf("%s: retention = %d, want %d", name, got, tc.want)
		}
	}
}
