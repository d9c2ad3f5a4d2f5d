package controllers

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

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

// ledgerGauges reports what is true of the active actions now, computed
// from the cache when scraped: restarts and replicas do not skew it, as
// every replica caches every active action (replicas report the same
// values; aggregate them with max).
var ledgerGauges = &ledgerCollector{}

var (
	unknownOutcomesDesc = prometheus.NewDesc("toolledger_unknown_outcomes",
		"Actions whose last attempt's outcome is unknown (phase Unknown), which lookups are settling.", actionLabels, nil)
	unknownOldestDesc = prometheus.NewDesc("toolledger_unknown_outcome_oldest_age_seconds",
		"Age of the oldest unknown outcome (since status.unknownSince); 0 when none.", actionLabels, nil)
	unknownOverdueDesc = prometheus.NewDesc("toolledger_unknown_outcomes_overdue",
		"Unknown outcomes older than their tool's unknownOutcomeDeadline: the controller should have escalated them, so it is not settling them.", actionLabels, nil)
	awaitingApprovalDesc = prometheus.NewDesc("toolledger_awaiting_approval",
		"Actions waiting for a ToolApproval of their request.", actionLabels, nil)
)

// ledgerCollector collects the gauges from the cache of the manager that
// set its source last: a process runs one manager (tests run several, all
// reading the same API server).
type ledgerCollector struct {
	source atomic.Pointer[ledgerSource]
}

type ledgerSource struct {
	reader client.Reader
	clock  clock.PassiveClock
}

// readFrom has the gauges computed from reader, a manager's cache.
func (c *ledgerCollector) readFrom(reader client.Reader, clock clock.PassiveClock) {
	c.source.Store(&ledgerSource{reader: reader, clock: clock})
}

func (c *ledgerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{unknownOutcomesDesc, unknownOldestDesc, unknownOverdueDesc, awaitingApprovalDesc} {
		ch <- d
	}
}

// toolGauges are one tool's gauges in one namespace.
type toolGauges struct {
	unknown, overdue, awaiting float64
	oldest                     time.Duration
}

func (c *ledgerCollector) Collect(ch chan<- prometheus.Metric) {
	src := c.source.Load()
	if src == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// The cache's objects are only read here: no copies of the whole ledger per scrape.
	var (
		actions      v1alpha1.ToolActionList
		tools        v1alpha1.ToolList
		clusterTools v1alpha1.ClusterToolList
	)
	for _, list := range []client.ObjectList{&actions, &tools, &clusterTools} {
		if err := src.reader.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
			log.FromContext(ctx).Error(err, "Cannot list the cache for the ledger's gauges")
			return
		}
	}
	type toolKey struct{ namespace, kind, name string }
	specs := map[toolKey]*v1alpha1.ToolSpec{}
	groups := map[actionGroup]*toolGauges{}
	for i := range tools.Items {
		t := &tools.Items[i]
		specs[toolKey{t.Namespace, v1alpha1.KindTool, t.Name}] = &t.Spec
		// A namespaced Tool reports zeros, so its gauges fall back to 0.
		groups[actionGroup{t.Namespace, v1alpha1.KindTool, t.Name, string(t.Spec.IdempotencyClass)}] = &toolGauges{}
	}
	for i := range clusterTools.Items {
		t := &clusterTools.Items[i]
		specs[toolKey{"", v1alpha1.KindClusterTool, t.Name}] = &t.Spec.ToolSpec
	}
	now := src.clock.Now()
	for i := range actions.Items {
		a := &actions.Items[i]
		phase := a.Status.Phase
		if phase != v1alpha1.PhaseUnknown && phase != v1alpha1.PhaseAwaitingApproval {
			continue
		}
		kind, key := a.Spec.ToolRef.KindOrDefault(), toolKey{a.Namespace, a.Spec.ToolRef.KindOrDefault(), a.Spec.ToolRef.Name}
		if kind == v1alpha1.KindClusterTool {
			key.namespace = ""
		}
		spec := specs[key]
		group := actionGroup{a.Namespace, kind, a.Spec.ToolRef.Name, ""}
		if spec != nil {
			group.class = string(spec.IdempotencyClass)
		}
		g := groups[group]
		if g == nil {
			g = &toolGauges{}
			groups[group] = g
		}
		if phase == v1alpha1.PhaseAwaitingApproval {
			g.awaiting++
			continue
		}
		g.unknown++
		if since := a.Status.UnknownSince; since != nil {
			age := max(now.Sub(since.Time), 0)
			g.oldest = max(g.oldest, age)
			if spec != nil && age > unknownDeadline(&v1alpha1.Tool{Spec: *spec}) {
				g.overdue++
			}
		}
	}
	for group, g := range groups {
		values := []string{group.namespace, group.kind, group.name, group.class}
		ch <- prometheus.MustNewConstMetric(unknownOutcomesDesc, prometheus.GaugeValue, g.unknown, values...)
		ch <- prometheus.MustNewConstMetric(unknownOldestDesc, prometheus.GaugeValue, g.oldest.Seconds(), values...)
		ch <- prometheus.MustNewConstMetric(unknownOverdueDesc, prometheus.GaugeValue, g.overdue, values...)
		ch <- prometheus.MustNewConstMetric(awaitingApprovalDesc, prometheus.GaugeValue, g.awaiting, values...)
	}
}

// actionGroup is a gauge's labels: the actions of one tool in one namespace.
type actionGroup struct{ namespace, kind, name, class string }
