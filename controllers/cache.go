package controllers

import (
	"github.com/toolledger/toolledger/api/v1alpha1"
)

// SlimTerminalActions is a cache transform. A finished action is read by the
// controller only to link a compensation, to expire its key and to release
// its finalizer on deletion, so the cache keeps just what those need; the
// parameters, result, history and conditions of the many finished actions
// stay in etcd. Managed fields are dropped from every action.
func SlimTerminalActions(obj any) (any, error) {
	action, ok := obj.(*v1alpha1.ToolAction)
	if !ok {
		return obj, nil
	}
	action.ManagedFields = nil
	if !action.Status.Phase.IsTerminal() {
		return action, nil
	}
	action.Spec = v1alpha1.ToolActionSpec{ToolRef: action.Spec.ToolRef, Compensates: action.Spec.Compensates}
	action.Status = v1alpha1.ToolActionStatus{
		Phase:          action.Status.Phase,
		CompletionTime: action.Status.CompletionTime,
		CompensatedBy:  action.Status.CompensatedBy,
	}
	return action, nil
}
