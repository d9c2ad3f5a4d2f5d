package controllers

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

// keyHistory reads a key's earlier life: what a record since deleted
// settled under the key. An action's first attempt reads it, and the
// rules answer the action from it (rules.beforeConnect).
type keyHistory interface {
	// earlier returns the key's earlier record, or nil when the key has
	// none the action's tool still keeps.
	earlier(ctx context.Context, action *v1alpha1.ToolAction, tool *v1alpha1.Tool) (*earlierRecord, error)
}

// earlierRecord is what a key settled before, and where that is kept, for
// the messages, reasons and metrics of an action answered from it.
type earlierRecord struct {
	record v1alpha1.TombstoneRecord
	// where names the record in messages: "Tombstone order-1".
	where string
	// settledReason answers the same request; conflictReason refuses
	// another; source labels the duplicate and conflict metrics.
	settledReason, conflictReason, source string
}

// tombstoneHistory keeps a key's earlier life in its Tombstone.
type tombstoneHistory struct {
	// reader reads the API server (tombstones are not cached, and a miss
	// must be a real miss); client deletes a tombstone whose key
	// retention has passed.
	reader client.Reader
	client client.Client
	clock  clock.PassiveClock
}

// keys is where this reconciler reads a key's earlier life.
func (r *ToolActionReconciler) keys() keyHistory {
	return tombstoneHistory{reader: r.APIReader, client: r.Client, clock: r.Clock}
}

// earlier reads the key's tombstone. A tombstone whose key retention has
// passed by the action's tool is deleted and reported absent: the key may
// mean a new intent.
func (h tombstoneHistory) earlier(ctx context.Context, action *v1alpha1.ToolAction, tool *v1alpha1.Tool) (*earlierRecord, error) {
	var tomb v1alpha1.Tombstone
	if err := h.reader.Get(ctx, client.ObjectKeyFromObject(action), &tomb); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("cannot read the Tombstone of key %s: %w", action.Name, err)
	}
	sameTool := tomb.Record.ToolRef.Name == action.Spec.ToolRef.Name && tomb.Record.ToolRef.Kind == action.Spec.ToolRef.KindOrDefault()
	if sameTool && keyRetentionPassed(tomb.Record.CompletionTime.Time, tool, h.clock.Now()) {
		return nil, unbury(ctx, h.client, &tomb)
	}
	return &earlierRecord{record: tomb.Record, where: "Tombstone " + tomb.Name,
		settledReason: ReasonSettledByTombstone, conflictReason: ReasonTombstoneConflict, source: sourceTombstone}, nil
}
