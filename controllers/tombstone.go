package controllers

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

// +kubebuilder:rbac:groups=toolledger.dev,resources=tombstones,verbs=get;list;create;delete

// needsTombstone reports whether a finished action may have caused an
// effect, so that its key must outlive its record: it was dispatched at
// least once. An action rejected before any dispatch caused nothing, and
// neither did one answered by a tombstone (the tombstone stays).
func needsTombstone(a *v1alpha1.ToolAction) bool {
	return a.Status.Phase.IsTerminal() && a.Status.Attempts > 0
}

// newTombstone is what remains of a finished action once its record goes.
func newTombstone(a *v1alpha1.ToolAction, tool *v1alpha1.Tool, cause, deletedBy string, deleted metav1.Time) *v1alpha1.Tombstone {
	rec := v1alpha1.TombstoneRecord{
		ActionUID:      a.UID,
		RequestDigest:  a.Status.RequestDigest,
		Phase:          a.Status.Phase,
		ExternalRef:    a.Status.ExternalRef,
		Attempts:       a.Status.Attempts,
		CompletionTime: *a.Status.CompletionTime,
		KeptUntil:      a.Status.KeptUntil,
		ToolRef:        a.Spec.ToolRef,
		Cause:          cause,
		DeletedBy:      deletedBy,
		DeletionTime:   deleted,
	}
	if tool != nil {
		rec.IdempotencyClass = tool.Spec.IdempotencyClass
	}
	if e := a.Status.Error; e != nil {
		rec.ErrorClass, rec.ErrorReason = e.Class, e.Reason
	}
	return v1alpha1.NewTombstone(a.Namespace, a.Name, rec)
}

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
	return r.keys().keep(ctx, action, tool, cause, deletedBy, deleted)
}
