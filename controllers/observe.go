package controllers

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

// tally is what a transition adds to the metrics beyond its change of
// phase, which observe reads from the record itself.
type tally struct {
	// duplicate names where a repeat of a recorded intent was seen, and
	// conflict where a key was used again for another request.
	duplicate, conflict string
	// firstCompleted is when the intent a duplicate repeats finished, for
	// the duplicate's age; zero when unknown (a downstream replay).
	firstCompleted time.Time
	// resolution is the outcome of the ToolResolution applied.
	resolution v1alpha1.ResolutionOutcome
}

// observe counts a change of an action the API server accepted, once:
// several replicas never count one write twice, as only one wins it. tool
// may be nil; it is then read from the cache for the class label.
func (l *Ledger) observe(ctx context.Context, before, after *v1alpha1.ToolAction, tool *v1alpha1.Tool, t tally) {
	from, to := before.Status.Phase, after.Status.Phase
	if from == to && t == (tally{}) {
		return
	}
	if tool == nil {
		// An action whose tool is gone is counted with an empty class,
		// and one whose tool never resolved under unresolvedTool.
		tool, _ = l.tools.find(ctx, after)
	}
	labels := prometheus.Labels{"namespace": after.Namespace, "tool_kind": after.Spec.ToolRef.KindOrDefault(),
		"tool": toolLabel(after, tool), "class": classOf(tool)}
	with := func(name, value string) prometheus.Labels {
		l := prometheus.Labels{name: value}
		for k, v := range labels {
			l[k] = v
		}
		return l
	}
	if from == "" {
		actionsCreated.With(labels).Inc()
		if after.Spec.Compensates != "" {
			compensations.With(labels).Inc()
		}
	}
	if from != to {
		switch to {
		case v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed:
			finished := with("phase", string(to))
			finished["error_class"] = errorClass(after)
			actionsFinished.With(finished).Inc()
			if done := after.Status.CompletionTime; done != nil && !after.CreationTimestamp.IsZero() {
				actionDuration.With(with("phase", string(to))).Observe(max(done.Sub(after.CreationTimestamp.Time), 0).Seconds())
			}
		case v1alpha1.PhaseRetryScheduled:
			retries.With(labels).Inc()
		case v1alpha1.PhaseEscalated:
			reason := ""
			if after.Status.Error != nil {
				reason = after.Status.Error.Reason
			}
			escalations.With(with("reason", reason)).Inc()
		}
	}
	if t.resolution != "" {
		resolutions.With(with("outcome", string(t.resolution))).Inc()
	}
	delete(labels, "class")
	if t.conflict != "" {
		keyConflicts.With(with("source", t.conflict)).Inc()
	}
	if t.duplicate != "" {
		source := with("source", t.duplicate)
		duplicateHits.With(source).Inc()
		if !t.firstCompleted.IsZero() {
			age := max(l.clock.Now().Sub(t.firstCompleted), 0)
			duplicateAge.With(source).Observe(age.Seconds())
			if tool != nil && tool.Spec.KeyRetention != nil && tool.Spec.KeyRetention.Duration > 0 {
				duplicateRetentionRatio.With(source).Observe(age.Seconds() / tool.Spec.KeyRetention.Seconds())
			}
		}
	}
}

// observeCall counts one downstream call of an action: its result and
// its duration, by operation (attempt, lookup).
func observeCall(action *v1alpha1.ToolAction, tool *v1alpha1.Tool, operation, result string, took time.Duration) {
	values := []string{action.Namespace, action.Spec.ToolRef.KindOrDefault(), action.Spec.ToolRef.Name, classOf(tool)}
	dispatchDuration.WithLabelValues(append(values, operation)...).Observe(took.Seconds())
	counter := dispatchAttempts
	if operation == operationLookup {
		counter = lookups
	}
	counter.WithLabelValues(append(values, result)...).Inc()
}

const (
	operationAttempt = "attempt"
	operationLookup  = "lookup"
)
