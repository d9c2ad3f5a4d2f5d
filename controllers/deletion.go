package controllers

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

// release removes the finalizer from an action whose effect is settled (and
// tombstoned where it may have happened) or never started, letting a
// pending deletion finish.
func (r *ToolActionReconciler) release(ctx context.Context, action *v1alpha1.ToolAction) error {
	_, err := r.releaseVersion(ctx, action)
	return err
}

// releaseVersion is release that returns the action as released: the
// action itself when it had no finalizer, nil when a newer version won.
func (r *ToolActionReconciler) releaseVersion(ctx context.Context, action *v1alpha1.ToolAction) (*v1alpha1.ToolAction, error) {
	if !controllerutil.ContainsFinalizer(action, v1alpha1.Finalizer) {
		return action, nil
	}
	// A patch, guarded by the resourceVersion: only the finalizer changes.
	next := action.DeepCopy()
	controllerutil.RemoveFinalizer(next, v1alpha1.Finalizer)
	patch := client.MergeFromWithOptions(action, client.MergeFromWithOptimisticLock{})
	if err := r.Client.Patch(ctx, next, patch); err != nil {
		return nil, ignoreConflict(err, "cannot remove the finalizer of %s", action.Name)
	}
	return next, nil
}
