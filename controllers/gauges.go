package controllers

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

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
