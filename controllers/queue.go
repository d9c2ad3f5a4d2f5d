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
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

// The ways an action comes back to the controller's work queue: the
// informer and the DeletionWatch (SetupWithManager), a revisit of an action
// that left the cache, a downstream call's result off the workers, the
// dispatcher's wakes, and a change of shard members (ResyncOwned).

// Progressing reports whether the workers keep up: nothing is queued, or a
// reconcile returned within the last period. Until the first returns (the
// cache may take long to sync) they are taken to. A replica whose workers
// are wedged stops renewing its member Lease, so the others take its share.
func (r *ToolActionReconciler) Progressing(period time.Duration) bool {
	q, last := r.queue.Load(), r.reconciled.Load()
	if q == nil || last == 0 || (*q).Len() == 0 {
		return true
	}
	return time.Since(time.Unix(0, last)) < period
}

// ResyncOwned has the active actions that owns accepts reconciled: a
// change of members may have given this manager some.
func (r *ToolActionReconciler) ResyncOwned(ctx context.Context, owns func(types.NamespacedName) bool) {
	q := r.queue.Load()
	if q == nil {
		return // the controller has not started: its first list reconciles every action
	}
	var actions v1alpha1.ToolActionList
	if err := r.Client.List(ctx, &actions); err != nil {
		log.FromContext(ctx).Error(err, "Cannot list the active actions to take up a changed share")
		return
	}
	for i := range actions.Items {
		if key := client.ObjectKeyFromObject(&actions.Items[i]); owns(key) {
			(*q).Add(reconcile.Request{NamespacedName: key})
		}
	}
}

// revisit has the controller reconcile an action that left its cache, such
// as one a ToolResolution finished, so that what follows it (the
// compensation link, retention) is scheduled on the controller's own queue.
func (r *ToolActionReconciler) revisit(ctx context.Context, action *v1alpha1.ToolAction) error {
	r.revisited.Store(client.ObjectKeyFromObject(action), struct{}{})
	select {
	case r.revisits <- event.GenericEvent{Object: action}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// callIn makes call, a downstream call and the record of its outcome, in
// slot s, off the workers, and hands its result to the work queue. Both
// outlive the reconcile and a manager shutdown: a call that finishes while
// the process drains leaves a known outcome, not a lapsed claim.
func (r *ToolActionReconciler) callIn(ctx context.Context, s *slot, key types.NamespacedName, call func(context.Context) (ctrl.Result, error)) {
	ctx = context.WithoutCancel(ctx)
	s.run(func() {
		result, err := call(ctx)
		r.requeue(ctx, key, result, err)
	})
}

// requeue hands what a call made off the workers returned to the work
// queue, as the controller does with a reconcile's result.
func (r *ToolActionReconciler) requeue(ctx context.Context, key types.NamespacedName, result ctrl.Result, err error) {
	q := r.queue.Load()
	if q == nil {
		return
	}
	req := reconcile.Request{NamespacedName: key}
	switch {
	case err != nil:
		log.FromContext(ctx).Error(err, "Downstream call not recorded; reconciled again with backoff")
		(*q).AddRateLimited(req)
	case result.RequeueAfter > 0:
		(*q).Forget(req)
		(*q).AddAfter(req, result.RequeueAfter)
	default:
		(*q).Forget(req)
	}
}

// SetupWithManager registers the reconciler.
func (r *ToolActionReconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.revisits = make(chan event.GenericEvent)
	ledgerGauges.readFrom(r.Client, r.Clock)
	r.Dispatcher.wake = func(key types.NamespacedName) {
		if q := r.queue.Load(); q != nil {
			(*q).Add(reconcile.Request{NamespacedName: key})
		}
	}
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
		WatchesRawSource(source.Channel(r.Deleting, &handler.EnqueueRequestForObject{})).
		WatchesRawSource(source.Channel(r.revisits, &handler.EnqueueRequestForObject{})).
		WatchesRawSource(source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
			r.queue.Store(&q)
			return nil
		})).
		WithOptions(controller.Options{
			MaxConcurrentReconciles: r.MaxConcurrentReconciles,
			// A missing Secret or an unreachable API is retried at least
			// once a minute, so a fix is picked up without a watch on Secrets.
			RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](5*time.Millisecond, time.Minute),
		}).
		Named("toolaction").
		Complete(r)
}
