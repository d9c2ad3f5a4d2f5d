package controllers

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

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
