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
