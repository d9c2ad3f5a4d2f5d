package controllers

import (
	"context"
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/fields"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

// ActiveActions selects the actions the manager caches: those not yet
// Succeeded or Failed. The ledger's finished records can outnumber the active
// ones by far, and the controller reads a finished one only to expire its key,
// to link a compensation and to release its finalizer on deletion; those reads
// go to the API server (see DeletionWatch and retention.Sweep), so the
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
// last-applied configuration are never read. Parameters larger than
// cachedParametersBytes (up to 1 MiB an action) are read from the API
// server when an attempt or a lookup needs them (withParameters), so that
// the cache's size follows the number of active actions, not the size of
// their requests; smaller ones, most of them, stay, and cost no read.
func TrimForCache(obj any) (any, error) {
	if action, ok := obj.(*v1alpha1.ToolAction); ok {
		action.ManagedFields = nil
		delete(action.Annotations, lastAppliedAnnotation)
		if parametersSize(action.Spec.Parameters) > cachedParametersBytes {
			action.Spec.Parameters = nil
		}
	}
	return obj, nil
}

// cachedParametersBytes is the most parameters the cache keeps of an
// action: about a third of a small action's whole object.
const cachedParametersBytes = 1 << 10

// parametersSize is about the parameters' encoded size: their members'
// names and values.
func parametersSize(parameters map[string]apiextensionsv1.JSON) int {
	n := 0
	for name, value := range parameters {
		n += len(name) + len(value.Raw)
	}
	return n
}

// lastAppliedAnnotation is where kubectl apply keeps a copy of the whole
// object, parameters included (corev1.LastAppliedConfigAnnotation).
const lastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"

// withParameters returns the action with its parameters, which the cache
// may not keep: read from the API server, as the spec is immutable, once
// per attempt or lookup. An action without parameters is read too.
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
