package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/dispatch"
	"github.com/toolledger/toolledger/internal/toolcontract"
	"github.com/toolledger/toolledger/pkg/adapter"
)

// lookup has the dispatcher ask the downstream whether the last attempt of
// an Unknown action applied; an action that must wait for a slot is parked.
func (r *ToolActionReconciler) lookup(ctx context.Context, action *v1alpha1.ToolAction, tool *resolvedTool) (ctrl.Result, error) {
	key := client.ObjectKeyFromObject(action)
	s := r.Dispatcher.Reserve(dispatch.LaneOf(action, tool.tool), dispatch.LimitsOf(tool.tool), key)
	if s == nil {
		return ctrl.Result{}, nil
	}
	r.callIn(ctx, s, key, func(ctx context.Context) (ctrl.Result, error) {
		return r.lookUp(ctx, s, action, tool)
	})
	return ctrl.Result{}, nil
}

// lookUp makes the lookup in slot s and carries out what its answer means
// (rules.afterLookup): a request proved absent is sent again in the same
// slot.
func (r *ToolActionReconciler) lookUp(ctx context.Context, s *dispatch.Slot, action *v1alpha1.ToolAction, tool *resolvedTool) (ctrl.Result, error) {
	// A reconcile that read the cache before it saw this manager's last
	// write (the previous lookup's outcome, say) must not ask the
	// downstream again: the stored action is read first, and a newer one
	// is left to the next reconcile.
	if current, err := r.isCurrent(ctx, action); err != nil || !current {
		return ctrl.Result{RequeueAfter: 50 * time.Millisecond}, err
	}
	// The deadline is judged at the time the lookup was asked.
	rules := r.rules()
	outcome, err := r.lookUpKey(ctx, action, tool)
	next := rules.afterLookup(action, tool, outcome, err)
	if next.kind == stepAttempt {
		return r.attemptIn(ctx, s, action, tool, next.reason)
	}
	// Recording what the answer means needs no slot.
	s.Release()
	return r.perform(ctx, action, tool, next)
}

func (r *ToolActionReconciler) lookUpKey(ctx context.Context, action *v1alpha1.ToolAction, tool *resolvedTool) (adapter.Outcome, error) {
	conn, err := tool.adapter.Connect(ctx, tool.tool)
	if err != nil {
		return adapter.Outcome{}, fmt.Errorf("tool %q cannot be used: %w", tool.tool.Name, err)
	}
	action, err = r.withParameters(ctx, action)
	if err != nil {
		return adapter.Outcome{}, err
	}
	// The parameters were verified when the action was first dispatched.
	parameters, err := toolcontract.Parameters(action.Spec.Parameters)
	if err != nil {
		return adapter.Outcome{}, err
	}
	req := requestOf(action, parameters)
	ctx, span := startCallSpan(ctx, action, operationLookup, &req, r.TrustCallerTraceContext)
	start := time.Now()
	outcome, err := conn.Lookup(ctx, req)
	result := "found"
	switch {
	case errors.Is(err, adapter.ErrNotFound):
		result = "absent"
	case err != nil:
		result = "inconclusive"
	}
	took := time.Since(start)
	endCallSpan(span, result, outcome, err)
	observeCall(action, tool.tool, operationLookup, result, took)
	log.FromContext(ctx).Info("Lookup answered", "result", result, "duration", took.Round(time.Millisecond))
	return outcome, err
}

// isCurrent reports whether action is the stored version: one read of the
// API server, which a lookup (a downstream request) is worth.
func (r *ToolActionReconciler) isCurrent(ctx context.Context, action *v1alpha1.ToolAction) (bool, error) {
	var stored v1alpha1.ToolAction
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(action), &stored); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	return stored.UID == action.UID && stored.ResourceVersion == action.ResourceVersion, nil
}
