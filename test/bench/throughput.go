package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/testenv"
)

// variant is one configuration of toolledger under load.
type variant struct {
	ID string
	// Workers is the manager's MaxConcurrentReconciles.
	Workers int
	// Manifest applies actions as a plain manifest would, without the
	// finalizer the SDK sets (see manifestInvoker), instead of through the SDK.
	Manifest bool
	// WatchPerInvoke applies as the SDK does but waits with a watch of the
	// one action per invocation, as the SDK did before (see manifestInvoker).
	WatchPerInvoke bool
	// Create creates the same body as WatchPerInvoke applies, and waits the
	// same way: server-side apply's first write beside a plain create.
	Create bool
	// NoPolicy removes the admission policy that sets the finalizer at
	// creation, as before it was shipped.
	NoPolicy bool
	// Events is how many happy paths the manager tells as events: as
	// shipped when empty, eventsEvery or eventsWarnings.
	Events string
	// Baseline marks the configuration as shipped.
	Baseline bool
}

func (v variant) manager() managerConfig {
	return managerConfig{Workers: v.Workers, Events: v.Events}
}

func (v variant) label() string {
	s := fmt.Sprintf("%d workers", v.Workers)
	switch {
	case v.Manifest:
		s += ", applied as a manifest"
	case v.Create:
		s += ", SDK body created (POST) with a watch per invocation"
	case v.WatchPerInvoke:
		s += ", SDK apply with a watch per invocation"
	default:
		s += ", SDK Invoke"
	}
	if v.NoPolicy {
		s += " without the admission policy"
	}
	switch v.Events {
	case eventsEvery:
		s += ", an event for every change of phase"
	case eventsWarnings:
		s += ", events for warnings only"
	}
	if v.Baseline {
		s += " (as shipped)"
	}
	return s
}

// runSummary is one load run as the report shows it.
type runSummary struct {
	Concurrency   int
	Throughput    float64 // the median over the rounds
	ThroughputMin float64
	ThroughputMax float64
	Rounds        int
	P50, P95, P99 time.Duration
	Samples       int
	Completed     int
	Total         int
	Errors        int
	FirstError    string
	// WritesPerOp counts the successful writes (create, update, patch,
	// apply) to the run's resource, from the API server's metrics, per
	// operation; RequestsPerOp counts every request to it (gets, lists,
	// watches and failed writes included); EventWritesPerOp the event writes.
	WritesPerOp      float64
	RequestsPerOp    float64
	ConflictsPerOp   float64
	EventWritesPerOp float64
	// ReconcilesPerOp is the in-process manager's reconciles per action,
	// counted until it is idle again.
	ReconcilesPerOp float64
	// CPUPerOp is the CPU milliseconds each process spent per operation
	// over the whole run (warm-up included), from /proc.
	CPUPerOp processCPU
}

type levelResult struct {
	Concurrency int
	Ceiling3    runSummary
	Ceiling4    runSummary
	// Floor is the 3-write ceiling beside the watches any controller with
	// waiting callers makes the API server serve: a controller's floor.
	Floor runSummary
	// Toolledger is keyed by variant ID.
	Toolledger map[string]runSummary
	// SharedCeiling3 and SharedToolledger are the 3-write ceiling and the
	// shipped configuration with every process on every CPU, where measured
	// beside the split layout (-compare-shared-cores).
	SharedCeiling3, SharedToolledger *runSummary
}

// measured runs fn and reads the API server's request counters around it.
// It returns the run's summary and its latencies.
func (b *bench) measured(ctx context.Context, group, resource string, fn func() runResult) (runSummary, []time.Duration, error) {
	before, err := scrapeAPIServer(ctx, b.c.cs)
	if err != nil {
		return runSummary{}, nil, err
	}
	cpuBefore := readProcessCPU()
	r := fn()
	cpu := readProcessCPU().perOp(cpuBefore, r.Total)
	after, err := scrapeAPIServer(ctx, b.c.cs)
	if err != nil {
		return runSummary{}, nil, err
	}
	s := runSummary{
		Concurrency: r.Concurrency, Throughput: r.Throughput, ThroughputMin: r.Throughput, ThroughputMax: r.Throughput, Rounds: 1,
		P50: r.percentile(50), P95: r.percentile(95), P99: r.percentile(99),
		Samples: len(r.Latencies), Completed: r.Completed, Total: r.Total, Errors: r.Errors, CPUPerOp: cpu,
	}
	if r.FirstError != nil {
		s.FirstError = r.FirstError.Error()
	}
	delta := after.requests().minus(before.requests())
	var writes, requests, conflicts, events float64
	for k, v := range delta {
		switch {
		case k.Group == group && k.Resource == resource:
			requests += v
			if mutating(k.Verb) && successful(k.Code) {
				writes += v
			}
			if k.Code == "409" {
				conflicts += v
			}
		case k.Resource == "events" && mutating(k.Verb) && successful(k.Code):
			events += v
		}
	}
	if r.Total > 0 {
		n := float64(r.Total)
		s.WritesPerOp, s.RequestsPerOp, s.ConflictsPerOp, s.EventWritesPerOp = writes/n, requests/n, conflicts/n, events/n
	}
	return s, r.Latencies, nil
}

// pooled gathers the rounds of one configuration at one level.
type pooled struct {
	runs      []runSummary
	latencies []time.Duration
}

// summary is the median throughput of the rounds (with their spread), so
// that one round caught in a stall of the shared control plane does not
// move it; the percentiles of all their latencies together; and the
// per-operation counts over all their operations.
func (p *pooled) summary() runSummary {
	if len(p.runs) == 0 {
		return runSummary{}
	}
	out := runSummary{Concurrency: p.runs[0].Concurrency, Rounds: len(p.runs), ThroughputMin: math.Inf(1)}
	throughputs := make([]float64, 0, len(p.runs))
	for _, r := range p.runs {
		throughputs = append(throughputs, r.Throughput)
	}
	slices.Sort(throughputs)
	mid := len(throughputs) / 2
	out.Throughput = throughputs[mid]
	if len(throughputs)%2 == 0 {
		out.Throughput = (throughputs[mid-1] + throughputs[mid]) / 2
	}
	var total float64
	for _, r := range p.runs {
		out.ThroughputMin = math.Min(out.ThroughputMin, r.Throughput)
		out.ThroughputMax = math.Max(out.ThroughputMax, r.Throughput)
		out.Completed += r.Completed
		out.Total += r.Total
		out.Errors += r.Errors
		if out.FirstError == "" {
			out.FirstError = r.FirstError
		}
		n := float64(r.Total)
		total += n
		out.WritesPerOp += r.WritesPerOp * n
		out.RequestsPerOp += r.RequestsPerOp * n
		out.ConflictsPerOp += r.ConflictsPerOp * n
		out.EventWritesPerOp += r.EventWritesPerOp * n
		out.ReconcilesPerOp += r.ReconcilesPerOp * n
		out.CPUPerOp.APIServer += r.CPUPerOp.APIServer * n
		out.CPUPerOp.Etcd += r.CPUPerOp.Etcd * n
		out.CPUPerOp.Harness += r.CPUPerOp.Harness * n
	}
	if total > 0 {
		out.WritesPerOp /= total
		out.RequestsPerOp /= total
		out.ConflictsPerOp /= total
		out.EventWritesPerOp /= total
		out.ReconcilesPerOp /= total
		out.CPUPerOp.APIServer /= total
		out.CPUPerOp.Etcd /= total
		out.CPUPerOp.Harness /= total
	}
	out.Samples = len(p.latencies)
	out.P50, out.P95, out.P99 = percentile(p.latencies, 50), percentile(p.latencies, 95), percentile(p.latencies, 99)
	return out
}

// slot is one configuration measured at a level: a ceiling, the floor or a
// variant, in the run's CPU layout or with every process on every CPU
// (shared).
type slot struct {
	ceilingWrites int  // 3 or 4 for a ceiling or the floor, 0 for a toolledger variant
	floor         bool // the 3-write ceiling with a controller's and its callers' watches
	variant       variant
	shared        bool
}

// poolID names the pool of a slot's rounds.
func (sl slot) poolID() string {
	id := sl.variant.ID
	switch {
	case sl.floor:
		id = "floor"
	case sl.ceilingWrites > 0:
		id = fmt.Sprintf("ceiling%d", sl.ceilingWrites)
	}
	if sl.shared {
		id += "-shared"
	}
	return id
}

// throughput measures, level by level, the ceiling (3 and 4 writes), the
// floor and every toolledger variant at the same concurrency, one after the other so
// that the control plane's drift over the run touches all alike. With
// several rounds the whole sweep is repeated, every other round in reverse
// order within each level, and the rounds are pooled.
func (b *bench) throughput(ctx context.Context) error {
	s := b.settings
	pools := map[int]map[string]*pooled{}
	for _, c := range s.Concurrency {
		pools[c] = map[string]*pooled{}
	}
	for round := range s.Rounds {
		for _, c := range s.Concurrency {
			if err := b.restartPlane(ctx, fmt.Sprintf("%s-r%d-c%d", sweepPlane, round+1, c)); err != nil {
				return err
			}
			// The 3-write ceiling, the shipped configuration and the floor,
			// whose ratios are the headline, run next to each other so that
			// they meet the control plane in the same state, as it fills
			// during the level.
			slots := []slot{{ceilingWrites: 3}, {variant: b.baseline()}, {ceilingWrites: 3, floor: true}}
			if b.layout.split && slices.Contains(s.CompareSharedCores, c) {
				slots = append(slots, slot{variant: b.baseline(), shared: true}, slot{ceilingWrites: 3, shared: true})
			}
			slots = append(slots, slot{ceilingWrites: 4})
			if c >= s.TuneMinConcurrency {
				for _, v := range b.variants[1:] {
					slots = append(slots, slot{variant: v})
				}
			}
			if round%2 == 1 {
				slices.Reverse(slots)
			}
			for _, sl := range slots {
				if err := b.measureSlot(ctx, round, c, sl, pools[c]); err != nil {
					return err
				}
			}
		}
	}
	for _, c := range s.Concurrency {
		level := levelResult{Concurrency: c, Toolledger: map[string]runSummary{}}
		level.Ceiling3, level.Ceiling4, level.Floor = pools[c]["ceiling3"].summary(), pools[c]["ceiling4"].summary(), pools[c]["floor"].summary()
		if p, ok := pools[c]["ceiling3-shared"]; ok {
			ceiling, shipped := p.summary(), pools[c][b.baseline().ID+"-shared"].summary()
			level.SharedCeiling3, level.SharedToolledger = &ceiling, &shipped
		}
		for _, v := range b.variants {
			if p, ok := pools[c][v.ID]; ok {
				level.Toolledger[v.ID] = p.summary()
			}
		}
		b.results.Levels = append(b.results.Levels, level)
	}
	return nil
}

// sweepPlane prefixes the names of the sweep's control planes.
const sweepPlane = "sweep"

func (b *bench) measureSlot(ctx context.Context, round, c int, sl slot, pools map[string]*pooled) (err error) {
	s := b.settings
	id := sl.poolID()
	group, resource := v1alpha1.GroupVersion.Group, "toolactions"
	label := "toolledger [" + sl.variant.label() + "]"
	switch {
	case sl.floor:
		group, resource = benchGroup, benchResource
		label = "floor (3 writes, a controller's watch and its callers')"
	case sl.ceilingWrites > 0:
		group, resource = benchGroup, benchResource
		label = fmt.Sprintf("ceiling (%d writes)", sl.ceilingWrites)
	}
	if sl.shared {
		label += ", every process on every CPU"
		if err := b.layout.share(true); err != nil {
			return err
		}
		defer func() { err = errors.Join(err, b.layout.share(false)) }()
	}
	if sl.ceilingWrites == 0 {
		if err := b.usePolicy(ctx, !sl.variant.NoPolicy); err != nil {
			return err
		}
		if err := b.useManager(ctx, sl.variant.manager()); err != nil {
			return err
		}
	}
	var (
		sum       runSummary
		latencies []time.Duration
	)
	for attempt := 1; ; attempt++ {
		ns := fmt.Sprintf("tl-%s-c%d-r%d-a%d", id, c, round+1, attempt)
		fn := func(ctx context.Context, w, seq int) error {
			return b.invoke(ctx, sl.variant, ns, objectName(w, seq), amount(w, seq))
		}
		if sl.ceilingWrites > 0 {
			ns = fmt.Sprintf("%s-c%d-r%d-a%d", id, c, round+1, attempt)
			finalizer := sl.ceilingWrites == 4
			fn = func(ctx context.Context, w, seq int) error {
				return b.ceiling.object(ctx, ns, objectName(w, seq), amount(w, seq), finalizer)
			}
		}
		if err := b.c.namespace(ctx, b.fastTool(ns)); err != nil {
			return err
		}
		stopWatches := func() {}
		if sl.floor {
			if stopWatches, err = floorWatches(ctx, b.c.cfg, ns); err != nil {
				return err
			}
		}
		reconciles := inProcessReconciles()
		share, err := b.othersShare(func() error {
			var err error
			profiled := b.profileAPIServer(ctx, fmt.Sprintf("%s-c%d-r%d-a%d", id, c, round+1, attempt))
			sum, latencies, err = b.measured(ctx, group, resource, func() runResult {
				return closedLoop(ctx, c, s.Warmup, s.Measure, fn)
			})
			return errors.Join(err, profiled())
		})
		stopWatches()
		if err != nil {
			return err
		}
		if sl.ceilingWrites == 0 {
			if err := b.waitQuiet(ctx); err != nil {
				return err
			}
			if sum.Total > 0 {
				sum.ReconcilesPerOp = (inProcessReconciles() - reconciles) / float64(sum.Total)
			}
		}
		if !b.tooBusy(share, attempt, fmt.Sprintf("round %d, concurrency %d, %s", round+1, c, label)) {
			break
		}
		if err := testenv.Sleep(ctx, 5*time.Second); err != nil {
			return err
		}
	}
	if pools[id] == nil {
		pools[id] = &pooled{}
	}
	pools[id].runs = append(pools[id].runs, sum)
	pools[id].latencies = append(pools[id].latencies, latencies...)
	b.logf("round %d, concurrency %d, %s: %.1f/s, p50 %s ms, p99 %s ms, %.2f writes each, %d errors",
		round+1, c, label, sum.Throughput, ms(sum.P50), ms(sum.P99), sum.WritesPerOp, sum.Errors)
	if sum.Errors > 0 {
		b.fail("%s at concurrency %d, round %d: %d errors, first: %s", label, c, round+1, sum.Errors, sum.FirstError)
	}
	return nil
}

// maxAttempts bounds the repetitions of a run that other processes disturbed.
const maxAttempts = 3

// othersShare runs fn and returns the share of the machine's capacity that
// processes other than this run's took meanwhile.
func (b *bench) othersShare(fn func() error) (float64, error) {
	busy0, ours0, at0 := b.cpu.snapshot()
	err := fn()
	busy1, ours1, at1 := b.cpu.snapshot()
	capacity := float64(runtime.NumCPU()) * at1.Sub(at0).Seconds()
	if capacity <= 0 || !b.cpu.ok {
		return 0, err
	}
	return math.Max(0, (busy1-busy0)-(ours1-ours0)) / capacity, err
}

// tooBusy reports whether a timed run must be repeated because other
// processes took more than -max-other-load of the machine during it; the
// last attempt is kept whatever happened, and counted.
func (b *bench) tooBusy(share float64, attempt int, what string) bool {
	if share <= b.settings.MaxOtherLoad {
		b.results.OtherLoad = append(b.results.OtherLoad, share)
		return false
	}
	if attempt >= maxAttempts {
		b.results.OtherLoad = append(b.results.OtherLoad, share)
		b.results.KeptBusy++
		b.logf("%s: other processes took %.0f%% of the machine; kept after %d attempts", what, share*100, attempt)
		return false
	}
	b.results.Repeated++
	b.logf("%s: other processes took %.0f%% of the machine; repeating the run", what, share*100)
	return true
}

// invoke runs one action of variant v to its outcome.
func (b *bench) invoke(ctx context.Context, v variant, ns, key string, amount int) error {
	if v.Manifest {
		return b.manifest.invoke(ctx, ns, key, amount)
	}
	if v.Create {
		return b.createPerInvoke.invoke(ctx, ns, key, amount)
	}
	if v.WatchPerInvoke {
		return b.watchPerInvoke.invoke(ctx, ns, key, amount)
	}
	_, err := invokeSucceeded(ctx, b.sdk, request(ns, key, amount))
	return err
}

func objectName(w, seq int) string { return fmt.Sprintf("w%03d-%06d", w, seq) }

func amount(w, seq int) int { return seq*1000 + w + 1 }

// useManager makes sure the in-process manager runs with workers, and
// that a freshly started one has finished its first pass over the actions
// already in the cluster before anything is measured.
func (b *bench) useManager(ctx context.Context, config managerConfig) error {
	if b.mgr != nil && b.mgr.config == config {
		return nil
	}
	b.stopManager()
	m, err := startInProcess(b.c, config)
	if err != nil {
		return err
	}
	b.mgr = m
	// Every action from earlier runs is finished, so none is cached or
	// reconciled; the manager is ready once its deletion watches have listed them.
	deadline := time.Now().Add(5 * time.Minute)
	for gatherGauges("toolledger_deletion_watch_synced") < deletionWatches {
		if time.Now().After(deadline) {
			return errors.New("the in-process manager's deletion watch did not list the existing actions within 5 minutes")
		}
		if err := testenv.Sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
	return b.waitQuiet(ctx)
}

func (b *bench) stopManager() {
	if b.mgr != nil {
		_ = b.mgr.stop()
		b.mgr = nil
	}
}

// waitQuiet waits until the in-process manager has reconciled nothing for a
// second (at most a minute). The queue-depth gauge is not used: a stopped
// manager's queue may leave it behind.
func (b *bench) waitQuiet(ctx context.Context) error {
	last, quietSince := inProcessReconciles(), time.Now()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if err := testenv.Sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
		now := inProcessReconciles()
		if now != last {
			last, quietSince = now, time.Now()
			continue
		}
		if time.Since(quietSince) >= time.Second {
			return nil
		}
	}
	return nil // busy for a minute: measure anyway
}

// inProcessReconciles is controller_runtime_reconcile_total of the
// ToolAction controllers in this process.
func inProcessReconciles() float64 {
	return gatherSum("controller_runtime_reconcile_total", "controller", "toolaction")
}

func gatherSum(name, label, value string) float64 {
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		return 0
	}
	total := 0.0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					total += m.GetCounter().GetValue() + m.GetGauge().GetValue()
				}
			}
		}
	}
	return total
}

// gatherGauges sums every series of a gauge of this process.
func gatherGauges(name string) float64 {
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		return 0
	}
	total := 0.0
	for _, f := range families {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				total += m.GetGauge().GetValue()
			}
		}
	}
	return total
}

// deletionWatches is the number of deletion watches a manager runs (one per
// final phase), each reporting toolledger_deletion_watch_synced 1 once it
// has listed the finished actions.
const deletionWatches = 2

// countToolActions counts the ToolActions in the cluster.
func countToolActions(ctx context.Context, k8s client.Client) (int, error) {
	return countObjects(ctx, k8s, &v1alpha1.ToolActionList{})
}

// countObjects counts the objects of list's kind in the cluster with one
// list of one item (the API server reports how many remain).
func countObjects(ctx context.Context, k8s client.Client, list client.ObjectList) (int, error) {
	if err := k8s.List(ctx, list, client.Limit(1)); err != nil {
		return 0, err
	}
	return listCount(list), nil
}

// listCount is the items of a page and those the API server reports remain.
func listCount(list client.ObjectList) int {
	n := meta.LenList(list)
	if remaining := list.GetRemainingItemCount(); remaining != nil {
		n += int(*remaining)
	}
	return n
}
