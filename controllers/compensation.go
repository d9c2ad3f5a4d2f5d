package controllers

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

// checkCompensationTarget requires the action being compensated to exist and
// to have succeeded: there is nothing to offset otherwise. While it is still
// in flight the compensation waits.
func (r *ToolActionReconciler) checkCompensationTarget(ctx context.Context, action *v1alpha1.ToolAction) error {
	key := types.NamespacedName{Namespace: action.Namespace, Name: action.Spec.Compensates}
	var original v1alpha1.ToolAction
	err := r.getConfirmed(ctx, key, &original)
	switch {
	case apierrors.IsNotFound(err):
		return r.checkTombstonedTarget(ctx, key)
	case err != nil:
		return fmt.Errorf("cannot get ToolAction %s: %w", key, err)
	}
	switch original.Status.Phase {
	case v1alpha1.PhaseSucceeded:
		// A compensation already sent goes on; a new one is refused once the
		// original lists as many as it can hold.
		if action.Status.Attempts == 0 && len(original.Status.CompensatedBy) >= v1alpha1.MaxCompensations &&
			!slices.Contains(original.Status.CompensatedBy, action.Name) {
			return &invalidError{class: v1alpha1.ErrorClassInvalidInput, reason: ReasonCompensationInvalid,
				message: fmt.Sprintf("spec.compensates: ToolAction %q has %d compensations already, the most it records", key.Name, len(original.Status.CompensatedBy))}
		}
		return nil
	case v1alpha1.PhaseFailed:
		return &invalidError{class: v1alpha1.ErrorClassInvalidInput, reason: ReasonCompensationInvalid,
			message: fmt.Sprintf("spec.compensates: ToolAction %q failed, so there is no effect to compensate", key.Name)}
	default:
		return &pendingError{message: fmt.Sprintf("waiting for ToolAction %q to succeed before compensating it (it is %s)", key.Name, phaseOrPending(original.Status.Phase))}
	}
}

// checkTombstonedTarget: an original whose record is gone may still be
// compensated when its tombstone shows it succeeded.
func (r *ToolActionReconciler) checkTombstonedTarget(ctx context.Context, key types.NamespacedName) error {
	var tomb v1alpha1.Tombstone
	err := r.APIReader.Get(ctx, key, &tomb)
	switch {
	case apierrors.IsNotFound(err):
		return &invalidError{class: v1alpha1.ErrorClassInvalidInput, reason: ReasonCompensationInvalid,
			message: fmt.Sprintf("spec.compensates: ToolAction %q not found in namespace %q, and no tombstone of it either", key.Name, key.Namespace)}
	case err != nil:
		return fmt.Errorf("cannot get the Tombstone %s: %w", key, err)
	case tomb.Record.Phase != v1alpha1.PhaseSucceeded:
		return &invalidError{class: v1alpha1.ErrorClassInvalidInput, reason: ReasonCompensationInvalid,
			message: fmt.Sprintf("spec.compensates: ToolAction %q failed (its Tombstone says %s), so there is no effect to compensate", key.Name, tomb.Record.ErrorClass)}
	}
	return nil
}

// linkCompensation records a succeeded compensation on the original. It runs
// again on every reconcile of the succeeded compensation until the original
// shows it, so a crash between the two writes loses nothing.
func (r *ToolActionReconciler) linkCompensation(ctx context.Context, action *v1alpha1.ToolAction) error {
	if action.Spec.Compensates == "" {
		return nil
	}
	key := types.NamespacedName{Namespace: action.Namespace, Name: action.Spec.Compensates}
	var original v1alpha1.ToolAction
	if err := r.getConfirmed(ctx, key, &original); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("cannot get %s to record compensation %s: %w", key, action.Name, err))
	}
	if slices.Contains(original.Status.CompensatedBy, action.Name) {
		return nil
	}
	if len(original.Status.CompensatedBy) >= v1alpha1.MaxCompensations {
		// Only compensations sent while the list was filling get here.
		r.Recorder.Eventf(&original, action, corev1.EventTypeWarning, ReasonCompensationNotListed, "Compensate",
			"compensated by ToolAction %s too, which status.compensatedBy cannot list: it holds %d at most", action.Name, v1alpha1.MaxCompensations)
		return nil
	}
	// The original's own retention is not scheduled from here (no tool).
	_, err := r.commit(ctx, &original, nil, r.rules().compensatedBy(action))
	return err
}

func phaseOrPending(p v1alpha1.Phase) v1alpha1.Phase {
	if p == "" {
		return v1alpha1.PhasePending
	}
	return p
}
