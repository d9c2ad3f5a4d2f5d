package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/testenv"
	"github.com/toolledger/toolledger/pkg/sdk"
)

// latencyResult is create→Succeeded at a fixed share of the maximum.
type latencyResult struct {
	// State says what the control plane stored, as a table row's label.
	State         string
	MaxThroughput float64
	MaxAt         int // the concurrency that reached it
	Load          float64
	Rate          float64
	Offered       int
	Samples       int
	P50, P95, P99 time.Duration
	Achieved      float64
	Errors        int
	Dropped       int
	FirstError    string
	// Ceiling is the bare client (create + two status writes, no watch)
	// offered the same rate on the same control plane right after: what
	// of the tail is the control plane's own.
	Ceiling openLoopSummary
	// Plane is the control plane's load around the toolledger run, and
	// CeilingPlane around the bare client's.
	Plane, CeilingPlane planeLoad
}

// planeLoad is what the control plane stored and how its kube-apiserver's
// Go runtime fared: its garbage collection grows with the objects it holds
// decoded in its watch cache, and on two shared cores lengthens the tail.
type planeLoad struct {
	ToolActions, CeilingObjects int
	Tombstones                  int
	HeapInuse                   float64 // go_memstats_heap_inuse_bytes at the end
	GCs                         float64 // GC cycles (go_gc_duration_seconds_count) during a run
	Seconds                     float64
}

// stored counts the ToolActions and ceiling objects in the cluster.
func (b *bench) stored(ctx context.Context) (planeLoad, error) {
	var load planeLoad
	var err error
	if load.ToolActions, err = countToolActions(ctx, b.c.k8s); err != nil {
		return load, fmt.Errorf("cannot count the ToolActions: %w", err)
	}
	if load.CeilingObjects, err = countObjects(ctx, b.c.k8s, ceilingList()); err != nil {
		return load, fmt.Errorf("cannot count the ceiling's objects: %w", err)
	}
	if load.Tombstones, err = countObjects(ctx, b.c.k8s, &v1alpha1.TombstoneList{}); err != nil {
		return load, fmt.Errorf("cannot count the Tombstones: %w", err)
	}
	return load, nil
}

// planeLoad is what is stored now, with the kube-apiserver's heap.
func (b *bench) planeLoad(ctx context.Context) (planeLoad, error) {
	load, err := b.stored(ctx)
	if err != nil {
		return load, err
	}
	m, err := scrapeAPIServer(ctx, b.c.cs)
	if err != nil {
		return load, err
	}
	load.HeapInuse = m.sum("go_memstats_heap_inuse_bytes", nil)
	return load, nil
}

// duringRun is what is stored when fn starts, with the kube-apiserver's GC
// cycles while it runs and its heap at the end.
func (b *bench) duringRun(ctx context.Context, fn func()) (planeLoad, error) {
	load, err := b.stored(ctx)
	if err != nil {
		return load, err
	}
	before, err := scrapeAPIServer(ctx, b.c.cs)
	if err != nil {
		return load, err
	}
	began := time.Now()
	fn()
	load.Seconds = time.Since(began).Seconds()
	after, err := scrapeAPIServer(ctx, b.c.cs)
	if err != nil {
		return load, err
	}
	load.GCs = after.since(before, "go_gc_duration_seconds_count", nil)
	load.HeapInuse = after.sum("go_memstats_heap_inuse_bytes", nil)
	return load, nil
}

type openLoopSummary struct {
	Samples       int
	P50, P95, P99 time.Duration
	Errors        int
}

func summarizeOpenLoop(r openLoopResult) openLoopSummary {
	return openLoopSummary{Samples: len(r.Latencies), Errors: r.Errors,
		P50: percentile(r.Latencies, 50), P95: percentile(r.Latencies, 95), P99: percentile(r.Latencies, 99)}
}

// latency offers Load × the best baseline throughput as a fixed arrival
// rate (an open loop: arrivals do not wait for earlier ones) and times each
// SDK Invoke from the apply to the Succeeded it returns; then it offers the
// bare client the same rate. state describes what the control plane holds.
func (b *bench) latency(ctx context.Context, state string) error {
	base := b.baseline()
	res := &latencyResult{State: state, Load: b.settings.LatencyLoad}
	for _, l := range b.results.Levels {
		if t := l.Toolledger[base.ID].Throughput; t > res.MaxThroughput {
			res.MaxThroughput, res.MaxAt = t, l.Concurrency
		}
	}
	if res.MaxThroughput == 0 {
		return fmt.Errorf("no baseline throughput was measured")
	}
	res.Rate = res.Load * res.MaxThroughput
	if err := b.useManager(ctx, base.manager()); err != nil {
		return err
	}
	run := len(b.results.Latency) + 1
	ns := fmt.Sprintf("tl-latency-%d", run)
	if err := b.c.namespace(ctx, b.fastTool(ns)); err != nil {
		return err
	}
	warmup := min(2*time.Second, b.settings.LatencyDuration/5)
	var r openLoopResult
	for attempt := 1; ; attempt++ {
		var planeErr error
		share, _ := b.othersShare(func() error {
			res.Plane, planeErr = b.duringRun(ctx, func() {
				r = openLoop(ctx, res.Rate, warmup, b.settings.LatencyDuration, 4096, func(ctx context.Context, _, seq int) error {
					_, err := invokeSucceeded(ctx, b.sdk, request(ns, fmt.Sprintf("open-a%d-%06d", attempt, seq), seq+1))
					return err
				})
			})
			return nil
		})
		if planeErr != nil {
			return planeErr
		}
		if err := b.waitQuiet(ctx); err != nil {
			return err
		}
		if !b.tooBusy(share, attempt, "latency run") {
			break
		}
	}
	res.Offered, res.Samples, res.Achieved, res.Errors, res.Dropped = r.Offered, len(r.Latencies), r.Achieved, r.Errors, r.Dropped
	res.P50, res.P95, res.P99 = percentile(r.Latencies, 50), percentile(r.Latencies, 95), percentile(r.Latencies, 99)
	if r.FirstErr != nil {
		res.FirstError = r.FirstErr.Error()
		b.fail("latency run (%s): %d errors, first: %v", state, r.Errors, r.FirstErr)
	}
	b.results.Latency = append(b.results.Latency, res)
	b.logf("latency at %.0f%% of %.1f actions/s (%.1f/s offered), %s (%d ToolActions, %d ceiling objects): p50 %s ms, p95 %s ms, p99 %s ms (%d samples, %d dropped); kube-apiserver: %.0f GCs in %.0f s, heap in use %s",
		res.Load*100, res.MaxThroughput, res.Rate, state, res.Plane.ToolActions, res.Plane.CeilingObjects, ms(res.P50), ms(res.P95), ms(res.P99),
		res.Samples, res.Dropped, res.Plane.GCs, res.Plane.Seconds, mib(res.Plane.HeapInuse))
	if err := b.waitQuiet(ctx); err != nil {
		return err
	}

	ceilingNS := fmt.Sprintf("ceiling-latency-%d", run)
	if err := b.c.namespace(ctx, b.fastTool(ceilingNS)); err != nil {
		return err
	}
	var c openLoopResult
	var err error
	res.CeilingPlane, err = b.duringRun(ctx, func() {
		c = openLoop(ctx, res.Rate, warmup, b.settings.LatencyDuration, 4096, func(ctx context.Context, _, seq int) error {
			return b.ceiling.object(ctx, ceilingNS, fmt.Sprintf("open-%06d", seq), seq+1, false)
		})
	})
	if err != nil {
		return err
	}
	res.Ceiling = summarizeOpenLoop(c)
	if c.FirstErr != nil {
		b.fail("ceiling latency run (%s): %d errors, first: %v", state, c.Errors, c.FirstErr)
	}
	b.logf("ceiling at the same rate: p50 %s ms, p95 %s ms, p99 %s ms (%d samples); kube-apiserver: %.0f GCs in %.0f s, heap in use %s",
		ms(res.Ceiling.P50), ms(res.Ceiling.P95), ms(res.Ceiling.P99), res.Ceiling.Samples, res.CeilingPlane.GCs, res.CeilingPlane.Seconds, mib(res.CeilingPlane.HeapInuse))
	return nil
}

// writeRow is one series of apiserver_request_total that moved.
type writeRow struct {
	Verb, Resource, Subresource, Code string
	Count                             float64
	PerAction                         float64
}

// writesResult is what the API server counted for a batch of actions.
type writesResult struct {
	Actions             int
	Concurrency         int
	WritesPerAction     float64 // successful writes to toolactions (and its status)
	ConflictsPerAction  float64
	EventWritesPerAct   float64
	EtcdWritesPerAction float64
	EtcdMetric          bool
	// The tombstone check, per new action: every request to tombstones
	// (expected: one GET of the key, 404 for a key never used), the GETs
	// among them, and the writes (expected: none).
	TombstoneRequestsPerAction float64
	TombstoneGetsPerAction     float64
	TombstoneWritesPerAction   float64
	Rows                       []writeRow
	Manifest                   *writesVariant
	ManifestNoPolicy           *writesVariant
}

type writesVariant struct {
	Actions         int
	WritesPerAction float64
	Rows            []writeRow
}

// writes creates a batch of actions through the SDK with nothing else
// running and reads, from the API server's own metrics, what it did to
// toolactions: the writes per action and their breakdown.
func (b *bench) writes(ctx context.Context) error {
	base := b.baseline()
	if err := b.useManager(ctx, base.manager()); err != nil {
		return err
	}
	n, conc := b.settings.WritesActions, min(16, b.settings.WritesActions)
	ns := "tl-writes"
	if err := b.c.namespace(ctx, b.fastTool(ns)); err != nil {
		return err
	}
	rows, before, after, err := b.countBatch(ctx, n, func(ctx context.Context, i int) error {
		_, err := invokeSucceeded(ctx, b.sdk, request(ns, fmt.Sprintf("writes-%06d", i), i+1))
		return err
	}, conc)
	if err != nil {
		return err
	}
	res := &writesResult{Actions: n, Concurrency: conc, Rows: rows}
	for _, r := range rows {
		switch {
		case r.Resource == "toolactions" && mutating(r.Verb) && successful(r.Code):
			res.WritesPerAction += r.PerAction
		case r.Resource == "toolactions" && r.Code == "409":
			res.ConflictsPerAction += r.PerAction
		case r.Resource == "events" && mutating(r.Verb) && successful(r.Code):
			res.EventWritesPerAct += r.PerAction
		}
		if r.Resource == "tombstones" {
			res.TombstoneRequestsPerAction += r.PerAction
			if r.Verb == "GET" {
				res.TombstoneGetsPerAction += r.PerAction
			}
			if mutating(r.Verb) && successful(r.Code) {
				res.TombstoneWritesPerAction += r.PerAction
			}
		}
	}
	if before.has("etcd_requests_total") {
		res.EtcdMetric = true
		res.EtcdWritesPerAction = (after.etcdWrites() - before.etcdWrites()) / float64(n)
	}
	b.results.Writes = res
	for _, r := range rows {
		b.logf("  %s %s/%s %s: %.0f (%.2f per action)", r.Verb, r.Resource, r.Subresource, r.Code, r.Count, r.PerAction)
	}
	b.logf("writes per action (API server metrics, %d actions): %.2f to toolactions, %.2f conflicts, %.2f event writes, %.2f etcd writes",
		n, res.WritesPerAction, res.ConflictsPerAction, res.EventWritesPerAct, res.EtcdWritesPerAction)
	b.logf("tombstone check per new action: %.2f requests to tombstones (%.2f GETs), %.2f writes",
		res.TombstoneRequestsPerAction, res.TombstoneGetsPerAction, res.TombstoneWritesPerAction)

	if b.settings.CompareManifest {
		if res.Manifest, err = b.manifestWrites(ctx, n, conc, true); err != nil {
			return err
		}
		if res.ManifestNoPolicy, err = b.manifestWrites(ctx, n, conc, false); err != nil {
			return err
		}
		if err := b.usePolicy(ctx, true); err != nil {
			return err
		}
	}
	return nil
}

// manifestWrites counts the writes of a batch applied as plain manifests,
// with or without the admission policy that sets the finalizer.
func (b *bench) manifestWrites(ctx context.Context, n, conc int, policy bool) (*writesVariant, error) {
	if err := b.usePolicy(ctx, policy); err != nil {
		return nil, err
	}
	ns := "tl-writes-manifest"
	if !policy {
		ns += "-nopolicy"
	}
	if err := b.c.namespace(ctx, b.fastTool(ns)); err != nil {
		return nil, err
	}
	rows, _, _, err := b.countBatch(ctx, n, func(ctx context.Context, i int) error {
		return b.manifest.invoke(ctx, ns, fmt.Sprintf("writes-%06d", i), i+1)
	}, conc)
	if err != nil {
		return nil, err
	}
	v := &writesVariant{Actions: n, Rows: rows}
	for _, r := range rows {
		if r.Resource == "toolactions" && mutating(r.Verb) && successful(r.Code) {
			v.WritesPerAction += r.PerAction
		}
	}
	b.logf("writes per action applied as a manifest (admission policy: %t): %.2f", policy, v.WritesPerAction)
	return v, nil
}

// countBatch runs n operations and returns the request series that moved,
// for toolledger's resources (toolactions, tombstones, tools, …) and
// events, once the manager is quiet again.
func (b *bench) countBatch(ctx context.Context, n int, fn func(ctx context.Context, i int) error, conc int) ([]writeRow, metrics, metrics, error) {
	if err := b.waitQuiet(ctx); err != nil {
		return nil, nil, nil, err
	}
	before, err := scrapeAPIServer(ctx, b.c.cs)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := parallel(ctx, n, conc, fn); err != nil {
		return nil, nil, nil, fmt.Errorf("writes batch: %w", err)
	}
	// Late reconciles and the event broadcaster's batches land after the
	// outcome the SDK saw.
	if err := b.waitQuiet(ctx); err != nil {
		return nil, nil, nil, err
	}
	if err := testenv.Sleep(ctx, 2*time.Second); err != nil {
		return nil, nil, nil, err
	}
	after, err := scrapeAPIServer(ctx, b.c.cs)
	if err != nil {
		return nil, nil, nil, err
	}
	delta := after.requests().minus(before.requests())
	var rows []writeRow
	for _, k := range delta.sorted() {
		if k.Group == v1alpha1.GroupVersion.Group || k.Resource == "events" {
			rows = append(rows, writeRow{Verb: k.Verb, Resource: k.Resource, Subresource: k.Subresource, Code: k.Code,
				Count: delta[k], PerAction: delta[k] / float64(n)})
		}
	}
	return rows, before, after, nil
}

// duplicateResult is an SDK Invoke of a key that already Succeeded.
type duplicateResult struct {
	Calls              int
	P50, P95, P99      time.Duration
	RequestsPerCall    float64
	MaxRequests        int64
	RVChanged          int
	NotDeduplicated    int
	APIWrites          float64 // successful writes to toolactions the API server counted
	APIApplies         float64 // APPLY requests the API server counted
	EtcdWrites         float64
	EtcdMetric         bool
	VerbsSeen          []writeRow
	ResourceVersionsOK bool
}

// duplicates invokes, one call at a time, keys the writes step left
// Succeeded, with the very same request, through an SDK client whose
// transport counts requests; the resourceVersion is read before and after
// with another client.
func (b *bench) duplicates(ctx context.Context) error {
	var count atomic.Int64
	counted, err := sdk.NewClient(countingConfig(b.c.cfg, &count))
	if err != nil {
		return err
	}
	ns := "tl-writes"
	n := min(b.settings.Duplicates, b.settings.WritesActions)
	res := &duplicateResult{Calls: n}
	before, err := scrapeAPIServer(ctx, b.c.cs)
	if err != nil {
		return err
	}
	var latencies []time.Duration
	var requests int64
	for i := range n {
		key := fmt.Sprintf("writes-%06d", i)
		var prior v1alpha1.ToolAction
		if err := b.c.k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: key}, &prior); err != nil {
			return err
		}
		count.Store(0)
		began := time.Now()
		out, err := invokeSucceeded(ctx, counted, request(ns, key, i+1))
		elapsed := time.Since(began)
		if err != nil {
			return fmt.Errorf("duplicate invoke of %s: %w", key, err)
		}
		calls := count.Load()
		latencies = append(latencies, elapsed)
		requests += calls
		res.MaxRequests = max(res.MaxRequests, calls)
		if !out.Deduplicated {
			res.NotDeduplicated++
		}
		var later v1alpha1.ToolAction
		if err := b.c.k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: key}, &later); err != nil {
			return err
		}
		if later.ResourceVersion != prior.ResourceVersion {
			res.RVChanged++
		}
	}
	after, err := scrapeAPIServer(ctx, b.c.cs)
	if err != nil {
		return err
	}
	delta := after.requests().minus(before.requests())
	for _, k := range delta.sorted() {
		if k.Group != v1alpha1.GroupVersion.Group || k.Resource != "toolactions" {
			continue
		}
		res.VerbsSeen = append(res.VerbsSeen, writeRow{Verb: k.Verb, Resource: k.Resource, Subresource: k.Subresource, Code: k.Code, Count: delta[k], PerAction: delta[k] / float64(n)})
		if k.Verb == "APPLY" {
			res.APIApplies += delta[k]
		}
		if mutating(k.Verb) && successful(k.Code) && k.Verb != "APPLY" {
			res.APIWrites += delta[k]
		}
	}
	if before.has("etcd_requests_total") {
		res.EtcdMetric = true
		res.EtcdWrites = after.etcdWrites() - before.etcdWrites()
	}
	res.P50, res.P95, res.P99 = percentile(latencies, 50), percentile(latencies, 95), percentile(latencies, 99)
	if n > 0 {
		res.RequestsPerCall = float64(requests) / float64(n)
	}
	res.ResourceVersionsOK = res.RVChanged == 0
	b.results.Duplicate = res
	b.logf("duplicate invoke (%d calls): p50 %s ms, p99 %s ms, %.2f requests/call (max %d), %d resourceVersions changed, %.0f etcd writes",
		n, ms(res.P50), ms(res.P99), res.RequestsPerCall, res.MaxRequests, res.RVChanged, res.EtcdWrites)
	if res.NotDeduplicated > 0 {
		b.fail("duplicate invoke: %d of %d calls were not reported as deduplicated", res.NotDeduplicated, n)
	}
	return nil
}

// limiterResult compares the SDK under client-go's default client-side
// rate limit with the same SDK unlimited, at one concurrency.
type limiterResult struct {
	Concurrency int
	QPS         float32
	Burst       int
	Limited     runSummary
	Unlimited   runSummary
}

// sdkLimiter measures sdk.NewClient on a rest.Config with client-go's
// defaults (5 requests/s, burst 10), as an agent gets from a kubeconfig
// unless it sets QPS and Burst: every Invoke's apply and watch wait for a
// token.
func (b *bench) sdkLimiter(ctx context.Context) error {
	base := b.baseline()
	level := b.results.Levels[0]
	for _, l := range b.results.Levels {
		if l.Concurrency == 8 {
			level = l
		}
	}
	if err := b.useManager(ctx, base.manager()); err != nil {
		return err
	}
	cfg := rest.CopyConfig(b.c.cfg)
	cfg.QPS, cfg.Burst = 5, 10 // client-go's DefaultQPS and DefaultBurst
	limited, err := sdk.NewClient(cfg)
	if err != nil {
		return err
	}
	ns := fmt.Sprintf("tl-sdkqps-c%d", level.Concurrency)
	if err := b.c.namespace(ctx, b.fastTool(ns)); err != nil {
		return err
	}
	sum, _, err := b.measured(ctx, v1alpha1.GroupVersion.Group, "toolactions", func() runResult {
		return closedLoop(ctx, level.Concurrency, b.settings.Warmup, b.settings.Measure, func(ctx context.Context, w, seq int) error {
			_, err := invokeSucceeded(ctx, limited, request(ns, objectName(w, seq), amount(w, seq)))
			return err
		})
	})
	if err != nil {
		return err
	}
	if sum.Errors > 0 {
		b.fail("SDK with client-go's default rate limit: %d errors, first: %s", sum.Errors, sum.FirstError)
	}
	b.results.Limiter = &limiterResult{Concurrency: level.Concurrency, QPS: cfg.QPS, Burst: cfg.Burst, Limited: sum, Unlimited: level.Toolledger[base.ID]}
	b.logf("SDK with QPS %.0f/burst %d at concurrency %d: %.1f actions/s (unlimited: %.1f), p99 %s ms",
		cfg.QPS, cfg.Burst, level.Concurrency, sum.Throughput, level.Toolledger[base.ID].Throughput, ms(sum.P99))
	return b.waitQuiet(ctx)
}
