package controllers

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/fields"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

// ActiveActions selects the actions the manager caches: those not yet
// Succeeded or Failed. The ledger's finished records can outnumber the active
// ones by far, and the controller reads a finished one only to expire its key,
// to link a compensation and to release its finalizer on deletion; those reads
// go to the API server (see DeletionWatch and RetentionSweep), so the
// manager's memory follows the work in flight, not the size of the ledger.
// When an action finishes, the informer sees it leave the selection as a
// deletion.
func ActiveActions() fields.Selector {
	return fields.AndSelectors(
		fields.OneTermNotEqualSelector("status.phase", string(v1alpha1.PhaseSucceeded)),
		fields.OneTermNotEqualSelector("status.phase", string(v1alpha1.PhaseFailed)),
	)
}

// TrimForCache is a cache transform: it keeps what the controller decides
// with and drops what can be large. Managed fields and kubectl's
// last-applied configuration are never read; the parameters, up to 1 MiB
// an action, are read from the API server when an attempt or a lookup
// needs them (withParameters), so that the cache's size follows the number
// of active actions, not the size of their requests.
func TrimForCache(obj any) (any, error) {
	if action, ok := obj.(*v1alpha1.ToolAction); ok {
		action.ManagedFields = nil
		delete(action.Annotations, lastAppliedAnnotation)
		action.Spec.Parameters = nil
	}
	return obj, nil
}

// lastAppliedAnnotation is where kubectl apply keeps a copy of the whole
// object, parameters included (corev1.LastAppliedConfigAnnotation).
const lastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"

// withParameters returns the action with its parameters, which the cache
// does not keep: read from the API server, as the spec is immutable, once
// per attempt or lookup.
func (r *ToolActionReconciler) withParameters(ctx context.Context, action *v1alpha1.ToolAction) (*v1alpha1.ToolAction, error) {
	if action.Spec.Parameters != nil {
		return action, nil
	}
	var stored v1alpha1.ToolAction
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(action), &stored); err != nil {
		return nil, fmt.Errorf("cannot read the parameters of %s: %w", action.Name, err)
	}
	if stored.UID != action.UID {
		return nil, fmt.Errorf("cannot read the parameters of %s: the action was replaced", action.Name)
	}
	action = action.DeepCopy()
	action.Spec.Parameters = stored.Spec.Parameters
	return action, nil
}
