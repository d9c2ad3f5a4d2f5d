package controllers

import (
	"context"
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/pkg/adapter"
)

// lookup asks the downstream whether the last attempt of an Unknown action
// applied, and carries out what its answer means (rules.afterLookup).
func (r *ToolActionReconciler) lookup(ctx context.Context, action *v1alpha1.ToolAction, tool *resolvedTool) (ctrl.Result, error) {
	// The deadline is judged at the time the lookup was asked.
	rules := r.rules()
	outcome, err := r.lookUpKey(ctx, action, tool)
	return r.perform(ctx, action, tool, rules.afterLookup(action, tool, outcome, err))
}

func (r *ToolActionReconciler) lookUpKey(ctx context.Context, action *v1alpha1.ToolAction, tool *resolvedTool) (adapter.Outcome, error) {
	conn, err := tool.adapter.Connect(ctx, tool.tool)
	if err != nil {
		return adapter.Outcome{}, fmt.Errorf("tool %q cannot be used: %w", tool.tool.Name, err)
	}
	return conn.Lookup(ctx, idempotencyKey(action))
}
