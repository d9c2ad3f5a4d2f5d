package controllers

import (
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

// ownClaim reports an update that records a new claim of this executor. The
// dispatcher goes on to send the attempt and record the outcome (an error
// requeues the action with backoff), so the claim needs no reconcile of its
// own; one would read a cache that has not caught up with the outcome and
// leave a requeue behind. Any other change to a claimed action, a deletion
// for one, still triggers a reconcile.
func (r *ToolActionReconciler) ownClaim(previous, current client.Object) bool {
	before, ok := previous.(*v1alpha1.ToolAction)
	if !ok {
		return false
	}
	after, ok := current.(*v1alpha1.ToolAction)
	if !ok {
		return false
	}
	claim := after.Status.Claim
	if after.Status.Phase != v1alpha1.PhaseExecuting || claim == nil || claim.Executor != r.Executor {
		return false
	}
	return before.Status.Phase != v1alpha1.PhaseExecuting || before.Status.Claim == nil || before.Status.Claim.Attempt != claim.Attempt
}
