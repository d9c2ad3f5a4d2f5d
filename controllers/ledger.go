package controllers

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

// commit is the one path by which a transition reaches the ledger, the
// claim included: it writes the status, counts it, emits
// the events, and schedules what follows a finished action (its
// compensation link and its retention), so that no branch forgets one. A
// transition that changes nothing writes and reports nothing. tool may be
// nil when it was not resolved: what follows a finished action is then left
// to the caller (a revisit, or the retention sweep).
func (r *ToolActionReconciler) commit(ctx context.Context, current *v1alpha1.ToolAction, tool *v1alpha1.Tool, t transition) (ctrl.Result, error) {
	_, result, err := r.record(ctx, current, tool, t)
	return result, err
}

// record is commit that also returns the action as recorded: nil when the
// record moved on without the transition.
func (r *ToolActionReconciler) record(ctx context.Context, current *v1alpha1.ToolAction, tool *v1alpha1.Tool, t transition) (*v1alpha1.ToolAction, ctrl.Result, error) {
	next := current.DeepCopy()
	t.apply(next)
	if statusEqual(current, next) {
		return current, ctrl.Result{RequeueAfter: t.requeueAfter}, t.retry
	}
	recorded, err := r.write(ctx, current, next, t)
	if err != nil || recorded == nil {
		return nil, ctrl.Result{}, err
	}
	r.observe(ctx, current, recorded, tool, t.tally)
	for _, e := range t.events {
		if !e.routine || !r.QuietRoutine {
			r.Recorder.Eventf(recorded, e.related, e.eventType, e.reason, e.verb, "%s", truncate(e.message, maxEventNote))
		}
	}
	if recorded.Status.Phase.IsTerminal() && tool != nil {
		// The finished action leaves the cache; what follows is scheduled
		// here, by the executor that finished it.
		result, err := r.finish(ctx, recorded, tool)
		return recorded, result, err
	}
	return recorded, ctrl.Result{RequeueAfter: t.requeueAfter}, t.retry
}

// write stores next. A transition with reapplyWhile survives changes made
// to the record meanwhile; any other conflict means a newer version exists,
// whose watch event brings the action back. It returns nil when the record
// moved on without this transition.
func (r *ToolActionReconciler) write(ctx context.Context, current, next *v1alpha1.ToolAction, t transition) (*v1alpha1.ToolAction, error) {
	if t.reapplyWhile == nil {
		err := r.Client.Status().Update(ctx, next)
		if apierrors.IsConflict(err) && t.race != "" {
			claimConflicts.WithLabelValues(t.race).Inc()
			log.FromContext(ctx).V(1).Info("Transition lost to a newer version", "race", t.race, "attempt", next.Status.Attempts)
		}
		if err != nil {
			return nil, ignoreConflict(err, "cannot record the transition of %s to %s", current.Name, next.Status.Phase)
		}
		return next, nil
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		err := r.Client.Status().Update(ctx, next)
		if !apierrors.IsConflict(err) {
			return err
		}
		var latest v1alpha1.ToolAction
		if getErr := r.APIReader.Get(ctx, client.ObjectKeyFromObject(current), &latest); getErr != nil {
			return getErr
		}
		if !t.reapplyWhile(&latest) {
			next = nil
			return nil
		}
		next = latest.DeepCopy()
		t.apply(next)
		return err
	})
	if err != nil {
		// A claimed attempt that cannot record its outcome ends with its
		// lease: the action then becomes Unknown.
		return nil, fmt.Errorf("cannot record the transition of %s/%s (attempt %d): %w", current.Namespace, current.Name, current.Status.Attempts, err)
	}
	if next == nil {
		log.FromContext(ctx).V(1).Info("Transition not reapplied: the record changed and no longer takes it", "phase", current.Status.Phase)
	}
	return next, nil
}

// finish does what follows a finished action: a succeeded compensation is
// linked to its original, and the tool's retentions are applied (expire;
// requeued until one is due). Without a tool there is no retention to apply.
func (r *ToolActionReconciler) finish(ctx context.Context, action *v1alpha1.ToolAction, tool *v1alpha1.Tool) (ctrl.Result, error) {
	if action.Status.Phase == v1alpha1.PhaseSucceeded {
		if err := r.linkCompensation(ctx, action); err != nil {
			return ctrl.Result{}, err
		}
	}
	if tool == nil {
		return ctrl.Result{}, nil
	}
	return r.expire(ctx, action, tool)
}
