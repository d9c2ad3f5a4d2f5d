package controllers

import (
	"k8s.io/apimachinery/pkg/fields"

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

// DropManagedFields is a cache transform: the controller never reads managed
// fields, which are often the largest part of an action's metadata.
func DropManagedFields(obj any) (any, error) {
	if action, ok := obj.(*v1alpha1.ToolAction); ok {
		action.ManagedFields = nil
	}
	return obj, nil
}
