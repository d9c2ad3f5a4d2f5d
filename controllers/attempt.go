package controllers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/dispatch"
	"github.com/toolledger/toolledger/pkg/adapter"
)

// attempt verifies the request, claims the next attempt and has the
// dispatcher send it. reason says why this attempt happens, for the history.
func (r *ToolActionReconciler) attempt(ctx context.Context, action *v1alpha1.ToolAction, tool *resolvedTool, reason string) (ctrl.Result, error) {
	return r.attemptIn(ctx, nil, action, tool, reason)
}

// attemptIn is attempt in a dispatcher slot already held (a lookup that
// proved the request absent sends it in its own slot), or, when held is
// nil, in a slot reserved before the claim: an action that must wait for
// one is parked unclaimed, so that no lease runs while it waits. It reads
// the attempt's facts, has the rules decide, and then either records what
// they decided or connects, claims and dispatches.
func (r *ToolActionReconciler) attemptIn(ctx context.Context, held *dispatch.Slot, action *v1alpha1.ToolAction, tool *resolvedTool, reason string) (ctrl.Result, error) {
	action, facts, err := r.readAttemptFacts(ctx, action, tool.tool)
	if err != nil {
		return ctrl.Result{}, err
	}
	decided, err := r.rules().beforeConnect(action, facts)
	if decided != nil {
		return r.commit(ctx, action, tool.tool, *decided)
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	conn, err := tool.adapter.Connect(ctx, tool.tool)
	if err != nil {
		return r.commit(ctx, action, tool.tool, r.rules().notConnected(action, facts.requestDigest, err))
	}
	if action, err = r.ensureFinalizer(ctx, action); err != nil || action == nil {
		return ctrl.Result{}, err
	}
	s := held
	if s == nil {
		if s = r.Dispatcher.Reserve(dispatch.LaneOf(action, tool.tool), dispatch.LimitsOf(tool.tool), client.ObjectKeyFromObject(action)); s == nil {
			return ctrl.Result{}, nil
		}
	}
	d, err := r.claim(ctx, action, tool, conn, reason, facts)
	if err != nil || d == nil {
		if held == nil {
			s.Release()
		}
		return ctrl.Result{}, err
	}
	d.slot = s
	ctx = withActionLog(ctx, d.claimed, r.Executor)
	if held != nil {
		return r.dispatch(ctx, d)
	}
	r.callIn(ctx, s, client.ObjectKeyFromObject(d.claimed), func(ctx context.Context) (ctrl.Result, error) {
		return r.dispatch(ctx, d)
	})
	return ctrl.Result{}, nil
}

// ensureFinalizer puts the finalizer in place before anything can be in
// flight. It returns the updated action, or nil when a newer version won.
func (r *ToolActionReconciler) ensureFinalizer(ctx context.Context, action *v1alpha1.ToolAction) (*v1alpha1.ToolAction, error) {
	if controllerutil.ContainsFinalizer(action, v1alpha1.Finalizer) {
		return action, nil
	}
	// A patch, guarded by the resourceVersion: only the finalizer is sent.
	patch := client.MergeFromWithOptions(action, client.MergeFromWithOptimisticLock{})
	action = action.DeepCopy()
	controllerutil.AddFinalizer(action, v1alpha1.Finalizer)
	if err := r.Client.Patch(ctx, action, patch); err != nil {
		if apierrors.IsConflict(err) {
			claimConflicts.WithLabelValues("finalizer").Inc()
		}
		return nil, ignoreConflict(err, "cannot add the finalizer to %s", action.Name)
	}
	return action, nil
}

// claimedAttempt is an attempt this executor claimed, ready to be sent: everything its sending
// and the record of its outcome need, and nothing of the reconcile.
type claimedAttempt struct {
	claimed *v1alpha1.ToolAction
	tool    *resolvedTool
	conn    adapter.Connection
	request adapter.Request
	// slot is the dispatcher's slot the request is sent in, given back as
	// soon as the downstream answered: recording the outcome needs none.
	slot *dispatch.Slot
}

// claim writes the Executing phase with the resourceVersion the action was
// read at, through the commit path like every transition. The API server
// accepts exactly one such write per version, so only one executor ever
// dispatches a given attempt; a conflict means another executor (or a newer
// version of the record) won, and nothing is dispatched (nil is returned).
func (r *ToolActionReconciler) claim(ctx context.Context, action *v1alpha1.ToolAction, tool *resolvedTool, conn adapter.Connection,
	reason string, facts attemptFacts) (*claimedAttempt, error) {
	claimed, _, err := r.commitRecorded(ctx, action, tool.tool, r.rules().claimed(action, attemptTimeout(conn.Capabilities)+r.LeaseGrace, reason, facts.requestDigest, facts.target))
	if err != nil || claimed == nil {
		return nil, err
	}
	// Once connected, the connection's capabilities are the ones that hold.
	connected := *tool
	connected.caps = conn.Capabilities
	return &claimedAttempt{
		claimed: claimed,
		tool:    &connected,
		conn:    conn,
		request: requestOf(claimed, facts.parameters),
	}, nil
}

// requestOf is what the adapter is given of a recorded action, for an
// attempt or a lookup alike.
func requestOf(action *v1alpha1.ToolAction, parameters json.RawMessage) adapter.Request {
	req := adapter.Request{
		IdempotencyKey: idempotencyKey(action), Parameters: parameters, RequestDigest: action.Status.RequestDigest,
		Provenance:  action.Spec.Provenance,
		RequestedBy: action.Annotations[v1alpha1.RequestedByAnnotation], ApprovedBy: approverOf(action),
	}
	if action.Status.StartTime != nil {
		req.FirstAttemptTime = action.Status.StartTime.Time
	}
	return req
}

func approverOf(action *v1alpha1.ToolAction) string {
	if a := action.Status.Approval; a != nil && a.Decision == v1alpha1.Approved {
		return a.DecidedBy
	}
	return ""
}

// dispatch sends a claimed attempt and commits its outcome. The attempt
// is sent only within its claim's lease, less the clock margin: past it,
// another replica may take the claim for lapsed and look the key up before
// this request arrives, so it is not sent (a definite non-attempt).
func (r *ToolActionReconciler) dispatch(ctx context.Context, d *claimedAttempt) (ctrl.Result, error) {
	budget := r.rules().sendBudget(d.claimed.Status.Claim, d.conn.Capabilities, r.LeaseMargin)
	if budget <= 0 {
		err := &adapter.RetryableError{Reason: ReasonLeaseSpent, Err: fmt.Errorf(
			"the claim's lease ends at %s, less the %s clock margin, before the request could be sent; it was not sent",
			d.claimed.Status.Claim.LeaseExpiry.UTC().Format(time.RFC3339), r.LeaseMargin)}
		log.FromContext(ctx).Info("Attempt not sent", "error", err.Error())
		observeCall(d.claimed, d.tool.tool, operationAttempt, attemptResult(err), 0)
		return r.commit(ctx, d.claimed, d.tool.tool, r.rules().afterDispatch(d.claimed, d.tool, adapter.Outcome{}, err))
	}
	sendCtx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	sendCtx, span := startCallSpan(sendCtx, d.claimed, operationAttempt, &d.request, r.TrustCallerTraceContext)
	start := time.Now()
	outcome, err := d.conn.Execute(sendCtx, d.request)
	d.slot.Release()
	took, result := time.Since(start), attemptResult(err)
	endCallSpan(span, result, outcome, err)
	observeCall(d.claimed, d.tool.tool, operationAttempt, result, took)
	logger := log.FromContext(ctx).WithValues("result", result, "duration", took.Round(time.Millisecond))
	if err != nil {
		logger.Info("Attempt dispatched", "error", err.Error())
	} else {
		logger.V(1).Info("Attempt dispatched", "externalRef", outcome.ExternalRef)
	}
	return r.commit(ctx, d.claimed, d.tool.tool, r.rules().afterDispatch(d.claimed, d.tool, outcome, err))
}

// attemptResult is what an adapter's answer means, for the metrics:
// succeeded, failed (permanently), retryable (definitely not applied) or
// unknown (it may have applied).
func attemptResult(err error) string {
	var (
		permanent *adapter.PermanentError
		retryable *adapter.RetryableError
	)
	switch {
	case err == nil:
		return "succeeded"
	case errors.As(err, &permanent):
		return "failed"
	case errors.As(err, &retryable):
		return "retryable"
	}
	return "unknown"
}
