package controllers

import (
	"context"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

// withActionLog has the log lines of ctx name the action: its key, tool,
// attempt and this executor, and the run, step and trace of its
// provenance. controller-runtime's reconcile logger names its namespace.
// Called again for the same ctx (after a claim), it replaces the values
// rather than repeating them.
func withActionLog(ctx context.Context, a *v1alpha1.ToolAction, executor string) context.Context {
	base, named := ctx.Value(actionLogBase{}).(logr.Logger)
	if !named {
		base = log.FromContext(ctx)
		ctx = context.WithValue(ctx, actionLogBase{}, base)
	}
	values := []any{"key", a.Name, "tool", a.Spec.ToolRef.Name, "attempt", a.Status.Attempts, "executor", executor}
	if p := a.Spec.Provenance; p != nil {
		for _, kv := range [][2]string{{"runID", p.RunID}, {"stepID", p.StepID}, {"traceID", p.TraceID}} {
			if kv[1] != "" {
				values = append(values, kv[0], kv[1])
			}
		}
	}
	return log.IntoContext(ctx, base.WithValues(values...))
}

// actionLogBase keys the logger withActionLog started from.
type actionLogBase struct{}
