package ledgerclient

import (
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

func tombstone(namespace string, tool v1alpha1.ToolReference) v1alpha1.Tombstone {
	return v1alpha1.Tombstone{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "a"},
		Record: v1alpha1.TombstoneRecord{
			ActionUID:        "3f6d2c4e-0000-4000-8000-000000000001",
			RequestDigest:    "sha256:362d4b1d",
			Phase:            v1alpha1.PhaseSucceeded,
			ExternalRef:      "ch_1",
			Attempts:         1,
			CompletionTime:   at(-5 * time.Hour),
			ToolRef:          tool,
			IdempotencyClass: v1alpha1.KeyProtected,
			Cause:            v1alpha1.TombstoneCauseDeleted,
			DeletionTime:     at(-10 * time.Minute),
		},
	}
}

var (
	chargeTool   = v1alpha1.ToolReference{Kind: v1alpha1.KindTool, Name: "charge"}
	refundTool   = v1alpha1.ToolReference{Kind: v1alpha1.KindTool, Name: "refund"}
	goneTool     = v1alpha1.ToolReference{Kind: v1alpha1.KindTool, Name: "gone"}
	platformTool = v1alpha1.ToolReference{Kind: v1alpha1.KindClusterTool, Name: "platform-charge"}
)

// catalog has charge (keyRetention 24h) and refund (none) in shop, and
// ClusterTool platform-charge (keyRetention 1h).
func catalog() ToolRetentions {
	tools := NewToolRetentions()
	tools.Retentions[ToolKey{Kind: v1alpha1.KindTool, Namespace: "shop", Name: "charge"}] = &metav1.Duration{Duration: 24 * time.Hour}
	tools.Retentions[ToolKey{Kind: v1alpha1.KindTool, Namespace: "shop", Name: "refund"}] = nil
	tools.Retentions[ToolKey{Kind: v1alpha1.KindClusterTool, Name: "platform-charge"}] = &metav1.Duration{Duration: time.Hour}
	return tools
}

// promised is tomb with a keptUntil at timePtr(after).
func promised(tomb v1alpha1.Tombstone, after time.Duration) v1alpha1.Tombstone {
	tomb.Record.KeptUntil = timePtr(after)
	return tomb
}

func TestKeyFreed(t *testing.T) {
	unreadable := catalog()
	unreadable.Unreadable[v1alpha1.KindClusterTool] = errors.New("cannot list ClusterTools: forbidden")
	tests := []struct {
		name  string
		tomb  v1alpha1.Tombstone
		tools ToolRetentions
		want  KeyFreed
	}{
		{name: "by keyRetention", tomb: tombstone("shop", chargeTool), tools: catalog(),
			want: KeyFreed{By: FreedByKeyRetention, Time: timePtr(19 * time.Hour), KeyRetention: &metav1.Duration{Duration: 24 * time.Hour}}},
		{name: "a ClusterTool's keyRetention, passed", tomb: tombstone("shop", platformTool), tools: catalog(),
			want: KeyFreed{By: FreedByKeyRetention, Time: timePtr(-4 * time.Hour), KeyRetention: &metav1.Duration{Duration: time.Hour}}},
		{name: "a ClusterTool's keyRetention, shortened after the answers promised later", tomb: promised(tombstone("shop", platformTool), 20*time.Hour), tools: catalog(),
			want: KeyFreed{By: FreedByKeyRetention, Time: timePtr(20 * time.Hour), KeyRetention: &metav1.Duration{Duration: time.Hour}, Promised: true}},
		{name: "no keyRetention", tomb: tombstone("shop", refundTool), tools: catalog(), want: KeyFreed{By: FreedByAdministrator}},
		{name: "tool gone", tomb: tombstone("shop", goneTool), tools: catalog(), want: KeyFreed{By: FreedUnknown, Reason: "tool not found"}},
		// Tools are namespaced: billing's charge is another tool.
		{name: "same tool name elsewhere", tomb: tombstone("billing", chargeTool), tools: catalog(), want: KeyFreed{By: FreedUnknown, Reason: "tool not found"}},
		{name: "kind left empty means Tool", tomb: tombstone("shop", v1alpha1.ToolReference{Name: "refund"}), tools: catalog(), want: KeyFreed{By: FreedByAdministrator}},
		{name: "kind unreadable", tomb: tombstone("shop", platformTool), tools: unreadable,
			want: KeyFreed{By: FreedUnknown, Reason: "cannot list ClusterTools: forbidden"}},
		{name: "other kind still read", tomb: tombstone("shop", refundTool), tools: unreadable, want: KeyFreed{By: FreedByAdministrator}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.tools.KeyFreed(&tt.tomb)
			if got.By != tt.want.By || got.Reason != tt.want.Reason || got.Promised != tt.want.Promised ||
				(got.Time == nil) != (tt.want.Time == nil) || (got.Time != nil && !got.Time.Equal(tt.want.Time)) ||
				(got.KeyRetention == nil) != (tt.want.KeyRetention == nil) || (got.KeyRetention != nil && *got.KeyRetention != *tt.want.KeyRetention) {
				t.Errorf("keyFreed = %+v, want %+v", got, tt.want)
			}
		})
	}
}
