package controllers

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

// bury keeps the action's record in the key's history (its tombstone, or
// the archive) before the record may disappear (its finalizer released), so
// a ToolAction created again under the key always finds it.
func (r *ToolActionReconciler) bury(ctx context.Context, action *v1alpha1.ToolAction, tool *v1alpha1.Tool, cause string) error {
	// A manager that the archive binding refuses keeps no record: the
	// Tombstone it would write guards a key that the managers with the
	// archive no longer read once every Tombstone moved. The record waits
	// in etcd for one of them.
	if err := r.Binding.Check(ctx); err != nil {
		return fmt.Errorf("cannot keep the record of %s before it leaves etcd: %w", action.Name, err)
	}
	deleted, deletedBy := metav1.NewTime(r.Clock.Now()), "toolledger ("+r.Executor+")"
	if cause == v1alpha1.TombstoneCauseDeleted {
		deletedBy = ""
		if action.DeletionTimestamp != nil {
			deleted = *action.DeletionTimestamp
		}
	}
	return r.History.Keep(ctx, action, tool, cause, deletedBy, deleted)
}
