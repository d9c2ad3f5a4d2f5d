package controllers

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/dispatch"
)

// An action comes back to the controller's work queue from the informer,
// and otherwise through the requeue.Queue alone: the deletion watch, the
// dispatcher's wakes, the Ledger's hand-backs, the retention sweep, a
// change of shard members (ResyncOwned) and a downstream call's result.

// ResyncOwned has the active actions that owns accepts reconciled: a
// change of members may have given this manager some.
func (r *ToolActionReconciler) ResyncOwned(ctx context.Context, owns func(types.NamespacedName) bool) {
	if !r.Queue.Started() {
		return // nor has the cache: the controller's first list reconciles every action
	}
	var actions v1alpha1.ToolActionList
	if err := r.Client.List(ctx, &actions); err != nil {
		log.FromContext(ctx).Error(err, "Cannot list the active actions to take up a changed share")
		return
	}
	for i := range actions.Items {
		if key := client.ObjectKeyFromObject(&actions.Items[i]); owns(key) {
			r.Queue.Add(key)
		}
	}
}

// RecheckWaiting hands the controller again the active actions of namespace
// (every namespace when empty) that wait for their key check: a person
// decided about an earlier life of the namespace, or acknowledged the
// archive's loss, and the key may be checked now rather than at the wait's
// next retry.
func (r *ToolActionReconciler) RecheckWaiting(ctx context.Context, namespace string) {
	if !r.Queue.Started() {
		return
	}
	var actions v1alpha1.ToolActionList
	if err := r.Client.List(ctx, &actions, client.InNamespace(namespace)); err != nil {
		log.FromContext(ctx).Error(err, "Cannot list the actions waiting for their key check")
		return
	}
	for i := range actions.Items {
		if a := &actions.Items[i]; a.Status.KeyUncheckable() {
			r.Queue.Add(client.ObjectKeyFromObject(a))
		}
	}
}

// callIn makes call, a downstream call and the record of its outcome, in
// slot s, off the workers, and hands its result to the work queue. The
// call carries the reconcile's hold on the action's key, so that no
// reconcile of the action runs until its outcome is recorded. Both outlive
// the reconcile and a manager shutdown: a call that finishes while the
// process drains leaves a known outcome, not a lapsed claim.
func (r *ToolActionReconciler) callIn(ctx context.Context, s *dispatch.Slot, key types.NamespacedName, call func(context.Context) (ctrl.Result, error)) {
	release := r.Queue.Carry(ctx)
	ctx = context.WithoutCancel(ctx)
	s.Run(func() {
		result, err := call(ctx)
		// Released first: a reconcile the result queues must not be turned
		// away by this call's own hold, which would forget its backoff.
		release()
		r.Queue.Result(ctx, key, result, err)
	})
}

// SetupWithManager registers the reconciler.
func (r *ToolActionReconciler) SetupWithManager(mgr ctrl.Manager) error {
	ledgerGauges.readFrom(r.Client, r.Clock)
	return ctrl.NewControllerManagedBy(mgr).
		// An action leaving the cache is finishing (its executor scheduled
		// what follows) or gone: neither needs a reconcile. Deletions of
		// finished actions arrive from the DeletionWatch. The cache holds
		// active actions only, so another member's are dropped here, before
		// the queue (Reconcile checks again: members may change meanwhile).
		For(&v1alpha1.ToolAction{}, builder.WithPredicates(predicate.Funcs{
			CreateFunc: func(e event.CreateEvent) bool { return r.Shards.Owns(client.ObjectKeyFromObject(e.Object)) },
			UpdateFunc: func(e event.UpdateEvent) bool {
				return !r.ownClaim(e.ObjectOld, e.ObjectNew) && r.Shards.Owns(client.ObjectKeyFromObject(e.ObjectNew))
			},
			DeleteFunc: func(event.DeleteEvent) bool { return false },
		})).
		WatchesRawSource(r.Queue.Source()).
		WithOptions(controller.Options{
			MaxConcurrentReconciles: r.MaxConcurrentReconciles,
			// A missing Secret or an unreachable API is retried at least
			// once a minute, so a fix is picked up without a watch on Secrets.
			RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](5*time.Millisecond, time.Minute),
		}).
		Named("toolaction").
		Complete(r.Queue.Serialize(r))
}
