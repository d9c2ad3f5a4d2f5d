package controllers

import (
	"context"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/keyhistory"
	"github.com/toolledger/toolledger/internal/retention"
)

// expire applies the retention rules to a finished action, at the pace the
// Pacer allows.
func (r *ToolActionReconciler) expire(ctx context.Context, action *v1alpha1.ToolAction, tool *v1alpha1.Tool) (ctrl.Result, error) {
	due, after := retention.Due(action, &v1alpha1.Tool{Spec: *r.Retention.Of(&tool.Spec)}, r.Clock.Now())
	if due == retention.KeepRecord {
		return ctrl.Result{RequeueAfter: after}, nil
	}
	// Its events are owed from the record: it stays until they are
	// delivered, when the notifier hands it back; the requeue is a safety net.
	if r.Ledger.holdsBack(action) {
		log.FromContext(ctx).V(1).Info("Retention waits for the action's notifications to be delivered")
		return ctrl.Result{RequeueAfter: 10 * time.Minute}, nil
	}
	// A record refused by its key's earlier record leaves at once, outside
	// the pace: while it stays, a retry of the original request meets its
	// spec.
	if !action.Status.RefusedByEarlierRecord() {
		if wait := r.Pacer.Turn(action.UID, time.Now()); wait > 0 {
			return ctrl.Result{RequeueAfter: wait}, nil
		}
	}
	if r.Archive != nil || (due == retention.ToTombstone && keyhistory.NeedsTombstone(action)) {
		cause := v1alpha1.TombstoneCauseRecordRetention
		if due == retention.FreeKey {
			cause = v1alpha1.TombstoneCauseKeyRetention
		}
		if err := r.bury(ctx, action, tool, cause); err != nil {
			return ctrl.Result{}, err
		}
	}
	if err := r.retire(ctx, action); err != nil {
		return ctrl.Result{}, err
	}
	log.FromContext(ctx).V(1).Info("Retired a finished action", "keyFreed", due == retention.FreeKey)
	return ctrl.Result{}, nil
}

// retire deletes a finished record whose key is guarded by its tombstone,
// or free: it lets the finalizer go first, so the record is gone at once,
// and deletes only the version it released. A newer version (the sweep's
// listed one was changed since, or the record deleted) is read again: the
// cache of active actions brings no event of a finished record's change.
func (r *ToolActionReconciler) retire(ctx context.Context, action *v1alpha1.ToolAction) error {
	released, err := r.releaseVersion(ctx, action)
	if err != nil {
		return err
	}
	if released == nil {
		r.Queue.Revisit(client.ObjectKeyFromObject(action))
		return nil
	}
	err = r.Client.Delete(ctx, released, client.Preconditions{UID: &released.UID, ResourceVersion: &released.ResourceVersion})
	return ignoreConflict(err, "cannot delete the retired action %s", action.Name)
}
