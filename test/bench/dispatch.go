package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/cmd/manager/app"
	"github.com/toolledger/toolledger/internal/testenv"
)

// dispatchResult is section 8: the dispatcher with a slow downstream,
// beside a hung tool, and with more replicas.
type dispatchResult struct {
	Concurrency       int
	Delay, Jitter     time.Duration
	MaxDispatches     int // the shipped --max-concurrent-dispatches
	PerNamespace      int // and its per-namespace bound
	Ceiling, Slow     runSummary
	SlowDuplicates    int
	FastAlone, Beside openLoopSummary
	Hung              int // actions queued on the hung tool
	// Rate and Duration shape the fast tool's two runs; Bounded is the
	// dispatches of the replica runs bounded by the replicas, whose
	// downstream takes BoundedDelay ± BoundedJitter.
	Rate                        float64
	Duration                    time.Duration
	Bounded                     int
	BoundedDelay, BoundedJitter time.Duration
	// BoundedWarmup and BoundedMeasure time those runs.
	BoundedWarmup, BoundedMeasure time.Duration
	// HungHeld is how many of them the hung downstream held during the
	// run beside them; HungWaiting how many waited in the dispatcher.
	HungHeld, HungWaiting int
	Replicas              []replicaRun
}

// replicaRun is one closed-loop run against N manager processes.
type replicaRun struct {
	Downstream string // "fast" or the slow downstream's latency
	Dispatches int    // each process's --max-concurrent-dispatches
	Sharded    bool
	Replicas   int
	// Bounded marks the runs where the replicas' slots, not the API
	// server, bound throughput: at most Bound actions/s.
	Bounded bool
	Bound   float64
	Callers int
	Run     runSummary
	// ClaimConflicts are the claims and finalizer writes the processes
	// lost, per action completed.
	ClaimConflicts float64
	Duplicates     int
}

// slowDownstream is a countingDownstream whose every request takes delay ±
// jitter, uniformly.
func slowDownstream(delay, jitter time.Duration) *countingDownstream {
	d := newCountingDownstream(delay)
	d.jitter = jitter
	return d
}

// hungDownstream holds every request until released, counting those held;
// once released it applies them.
type hungDownstream struct {
	mu       sync.Mutex
	held     int
	applied  int
	released chan struct{}
}

func (h *hungDownstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body map[string]any
	_ = json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&body)
	h.mu.Lock()
	h.held++
	h.mu.Unlock()
	select {
	case <-h.released:
	case <-r.Context().Done():
	}
	h.mu.Lock()
	h.held--
	h.applied++
	id := fmt.Sprintf("hung_%06d", h.applied)
	h.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(map[string]any{"id": id, "status": "succeeded", "amount": body["amount"], "currency": body["currency"]})
}

func (h *hungDownstream) holding() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.held
}

// dispatch measures, on a control plane of its own: the shipped manager's
// throughput with a 300 ms ± 100 ms downstream against the 3-write
// ceiling at the same concurrency; a fast tool's latency alone and beside
// a hung tool's backlog in another namespace; and 1, 2 and 3 manager
// processes, sharded as shipped (and racing, unsharded), with a fast and a
// slow downstream.
func (b *bench) dispatch(ctx context.Context) error {
	s := b.settings
	res := &dispatchResult{Concurrency: s.DispatchConcurrency, Delay: s.DispatchDelay, Jitter: s.DispatchJitter,
		MaxDispatches: app.DefaultMaxConcurrentDispatches, PerNamespace: app.DefaultMaxConcurrentDispatches / 2, Hung: s.DispatchHung,
		Rate: s.DispatchRate, Duration: s.DispatchDuration, Bounded: s.DispatchBounded,
		BoundedDelay: s.DispatchBoundedDelay, BoundedJitter: s.DispatchBoundedJitter,
		BoundedWarmup: s.DispatchBoundedWarmup, BoundedMeasure: s.DispatchBoundedMeasure}
	b.results.Dispatch = res
	slow := slowDownstream(s.DispatchDelay, s.DispatchJitter)
	slowServer := httptest.NewServer(slow)
	defer slowServer.Close()
	slowTool := func(ns string) *v1alpha1.Tool {
		return chargeTool(ns, slowServer.URL+"/effects", v1alpha1.Compensatable, 5*time.Second)
	}

	// The ceiling and the shipped manager with the slow downstream, side by side.
	c := s.DispatchConcurrency
	if err := b.c.namespace(ctx, b.fastTool("dispatch-ceiling")); err != nil {
		return err
	}
	var err error
	if res.Ceiling, _, err = b.measured(ctx, benchGroup, benchResource, func() runResult {
		return closedLoop(ctx, c, s.Warmup, s.Measure, func(ctx context.Context, w, seq int) error {
			return b.ceiling.object(ctx, "dispatch-ceiling", objectName(w, seq), amount(w, seq), false)
		})
	}); err != nil {
		return err
	}
	if err := b.useManager(ctx, b.baseline().manager()); err != nil {
		return err
	}
	if res.Slow, err = b.invokeRun(ctx, "dispatch-slow", slowTool, c, s.Warmup, s.Measure); err != nil {
		return err
	}
	res.SlowDuplicates = duplicates(slow)
	b.logf("dispatch: ceiling %.1f/s, toolledger with a %s ± %s downstream %.1f/s at concurrency %d",
		res.Ceiling.Throughput, s.DispatchDelay, s.DispatchJitter, res.Slow.Throughput, c)

	if err := b.besideHung(ctx, res); err != nil {
		return err
	}
	b.stopManager()

	bounded := slowDownstream(s.DispatchBoundedDelay, s.DispatchBoundedJitter)
	boundedServer := httptest.NewServer(bounded)
	defer boundedServer.Close()
	boundedTool := func(ns string) *v1alpha1.Tool {
		return chargeTool(ns, boundedServer.URL+"/effects", v1alpha1.Compensatable, 5*time.Second)
	}
	for _, r := range b.replicaPlan(slowTool, boundedTool) {
		downstream := slow
		if r.Bounded {
			downstream = bounded
		}
		run, err := b.replicaRun(ctx, r, len(res.Replicas), downstream)
		if err != nil {
			return err
		}
		res.Replicas = append(res.Replicas, run)
	}
	return nil
}

// invokeRun is a closed loop of SDK invocations at concurrency c against the
// tool that tool makes, in a new namespace ns, measured for measure after
// warmup.
func (b *bench) invokeRun(ctx context.Context, ns string, tool func(string) *v1alpha1.Tool, c int, warmup, measure time.Duration) (runSummary, error) {
	if err := b.c.namespace(ctx, tool(ns)); err != nil {
		return runSummary{}, err
	}
	sum, _, err := b.measured(ctx, v1alpha1.GroupVersion.Group, "toolactions", func() runResult {
		return closedLoop(ctx, c, warmup, measure, func(ctx context.Context, w, seq int) error {
			_, err := invokeSucceeded(ctx, b.sdk, request(ns, objectName(w, seq), amount(w, seq)))
			return err
		})
	})
	if err == nil && sum.Errors > 0 {
		b.fail("dispatch: %d errors in %s, first: %s", sum.Errors, ns, sum.FirstError)
	}
	return sum, err
}

// besideHung times a fast tool's actions at a fixed rate alone, then with
// a backlog of actions on a hung tool in another namespace, whose limits
// let it take every slot but the per-namespace bound.
func (b *bench) besideHung(ctx context.Context, res *dispatchResult) error {
	s := b.settings
	hung := &hungDownstream{released: make(chan struct{})}
	hungServer := httptest.NewServer(hung)
	defer hungServer.Close()
	released := false
	defer func() {
		if !released {
			close(hung.released)
		}
	}()
	run := func(ns string) (openLoopSummary, error) {
		if err := b.c.namespace(ctx, b.fastTool(ns)); err != nil {
			return openLoopSummary{}, err
		}
		r := openLoop(ctx, s.DispatchRate, min(2*time.Second, s.DispatchDuration/5), s.DispatchDuration, 10*int(s.DispatchRate)+10, func(ctx context.Context, _, seq int) error {
			_, err := invokeSucceeded(ctx, b.sdk, request(ns, fmt.Sprintf("a-%06d", seq), seq+1))
			return err
		})
		if r.Errors > 0 {
			b.fail("dispatch: %d errors timing the fast tool in %s, first: %v", r.Errors, ns, r.FirstErr)
		}
		return summarizeOpenLoop(r), nil
	}
	var err error
	if res.FastAlone, err = run("dispatch-fast-alone"); err != nil {
		return err
	}
	hungNS := "dispatch-hung"
	if err := b.c.namespace(ctx, chargeTool(hungNS, hungServer.URL+"/effects", v1alpha1.KeyProtected, 2*time.Minute)); err != nil {
		return err
	}
	if err := parallel(ctx, s.DispatchHung, 32, func(ctx context.Context, i int) error {
		return b.c.k8s.Create(ctx, &v1alpha1.ToolAction{ObjectMeta: metav1.ObjectMeta{Namespace: hungNS, Name: fmt.Sprintf("hung-%05d", i)}, Spec: spec(i + 1)})
	}); err != nil {
		return fmt.Errorf("cannot create the hung tool's actions: %w", err)
	}
	// The backlog is in place once the dispatcher holds as many calls as
	// the namespace may have (or every action, if fewer) and every other
	// action waits in it, and the manager is quiet: each action's first
	// reconcile costs requests that must not fall into the timed run.
	want := min(s.DispatchHung, res.PerNamespace)
	waiting := func() int { return int(gatherGauges("toolledger_dispatch_waiting")) }
	parked := func() bool {
		held := hung.holding()
		return held >= want && held+waiting() >= s.DispatchHung
	}
	for deadline := time.Now().Add(time.Minute); !parked(); {
		if time.Now().After(deadline) {
			return fmt.Errorf("the hung downstream held %d requests and %d actions waited after a minute, want %d and %d",
				hung.holding(), waiting(), want, s.DispatchHung-want)
		}
		if err := testenv.Sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	if err := b.waitQuiet(ctx); err != nil {
		return err
	}
	if res.Beside, err = run("dispatch-fast-beside"); err != nil {
		return err
	}
	res.HungHeld, res.HungWaiting = hung.holding(), waiting()
	b.logf("dispatch: fast tool p99 %s ms alone, %s ms beside %d hung actions (%d held downstream, %d waiting)",
		ms(res.FastAlone.P99), ms(res.Beside.P99), s.DispatchHung, res.HungHeld, res.HungWaiting)
	// Released, the backlog succeeds, so that no later run meets it.
	close(hung.released)
	released = true
	for deadline := time.Now().Add(2 * time.Minute); ; {
		var list v1alpha1.ToolActionList
		if err := b.c.k8s.List(ctx, &list, client.InNamespace(hungNS)); err != nil {
			return err
		}
		succeeded := 0
		for _, a := range list.Items {
			if a.Status.Phase == v1alpha1.PhaseSucceeded {
				succeeded++
			}
		}
		if succeeded == s.DispatchHung {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of the hung tool's %d actions succeeded within 2 minutes of its release", succeeded, s.DispatchHung)
		}
		if err := testenv.Sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
}

// replicaPlan is every replica run: fast and slow as shipped, and with a
// slower downstream and a bounded dispatcher, sharded at each replica
// count, and unsharded beside the sharded runs with a fast downstream.
func (b *bench) replicaPlan(slowTool, boundedTool func(string) *v1alpha1.Tool) []replicaPlanned {
	s := b.settings
	fast := func(ns string) *v1alpha1.Tool { return b.fastTool(ns) }
	shipped := app.DefaultMaxConcurrentDispatches
	slowName := fmt.Sprintf("%s ± %s", s.DispatchDelay, s.DispatchJitter)
	boundedName := fmt.Sprintf("%s ± %s", s.DispatchBoundedDelay, s.DispatchBoundedJitter)
	var plan []replicaPlanned
	for _, n := range s.DispatchReplicas {
		c := s.DispatchConcurrency
		// Twice the slots in callers: every slot stays busy, and each
		// caller waits about one call for a slot.
		callers := 2 * n * s.DispatchBounded
		plan = append(plan,
			replicaPlanned{replicaRun{Downstream: "fast", Dispatches: shipped, Sharded: true, Replicas: n, Callers: c}, fast},
			replicaPlanned{replicaRun{Downstream: slowName, Dispatches: shipped, Sharded: true, Replicas: n, Callers: c}, slowTool},
			replicaPlanned{replicaRun{Downstream: boundedName, Dispatches: s.DispatchBounded, Sharded: true, Replicas: n, Callers: callers,
				Bounded: true, Bound: float64(n*s.DispatchBounded) / s.DispatchBoundedDelay.Seconds()}, boundedTool})
		if n > 1 {
			plan = append(plan, replicaPlanned{replicaRun{Downstream: "fast", Dispatches: shipped, Replicas: n, Callers: c}, fast})
		}
	}
	return plan
}

type replicaPlanned struct {
	replicaRun
	tool func(string) *v1alpha1.Tool
}

// replicaRun starts the run's manager processes, waits until each sees
// the others' member Leases, measures a closed loop and stops them.
func (b *bench) replicaRun(ctx context.Context, p replicaPlanned, index int, slow *countingDownstream) (replicaRun, error) {
	run := p.replicaRun
	procs := make([]*managerProcess, 0, run.Replicas)
	defer func() {
		for _, proc := range procs {
			proc.stop()
		}
	}()
	for i := range run.Replicas {
		args := []string{
			fmt.Sprintf("--executor-id=bench-replicas-%02d-%d", index, i),
			fmt.Sprintf("--max-concurrent-dispatches=%d", run.Dispatches),
			fmt.Sprintf("--member-lease-duration=%s", benchMemberLease),
		}
		if run.Dispatches != app.DefaultMaxConcurrentDispatches {
			// The bounded runs have one tenant: all of a replica's slots are its.
			args = append(args, fmt.Sprintf("--max-dispatches-per-namespace=%d", run.Dispatches))
		}
		if !run.Sharded {
			args = append(args, "--no-sharding")
		}
		proc, err := startManagerProcess(ctx, b.managerBin, b.kubeconfig, filepath.Join(b.tmp, "replicas-manager.log"), args...)
		if err != nil {
			return run, err
		}
		procs = append(procs, proc)
	}
	if run.Sharded {
		if err := b.waitMembers(ctx, procs); err != nil {
			return run, err
		}
	}
	conflicts := func() float64 {
		total := 0.0
		for _, proc := range procs {
			if m, err := proc.metrics(ctx); err == nil {
				total += m.sum("toolledger_claim_conflicts_total", nil)
			}
		}
		return total
	}
	duplicatesBefore := duplicates(slow)
	before := conflicts()
	ns := fmt.Sprintf("dispatch-replicas-%02d", index)
	warmup, measure := b.settings.Warmup, b.settings.Measure
	if run.Bounded {
		warmup, measure = b.settings.DispatchBoundedWarmup, b.settings.DispatchBoundedMeasure
	}
	sum, err := b.invokeRun(ctx, ns, p.tool, run.Callers, warmup, measure)
	if err != nil {
		return run, err
	}
	run.Run = sum
	run.ClaimConflicts = safeDiv(conflicts()-before, float64(sum.Total))
	run.Duplicates = duplicates(slow) - duplicatesBefore
	if run.Duplicates > 0 {
		b.fail("dispatch: %d keys with two effects with %d replicas", run.Duplicates, run.Replicas)
	}
	b.logf("dispatch: %d replicas (sharded %t, %d dispatches each), %s downstream: %.1f/s, %.2f lost claims per action",
		run.Replicas, run.Sharded, run.Dispatches, run.Downstream, sum.Throughput, run.ClaimConflicts)
	return run, nil
}

// benchMemberLease is the replicas' --member-lease-duration: a run's
// processes see each other within a third of it.
const benchMemberLease = 3 * time.Second

// waitMembers waits until the member Leases live are exactly those of
// procs (a stopped run's Leases lapse first) and every process has listed
// them since (one renewal period, with room).
func (b *bench) waitMembers(ctx context.Context, procs []*managerProcess) error {
	want := make([]string, 0, len(procs))
	for _, p := range procs {
		want = append(want, p.executorID)
	}
	slices.Sort(want)
	for deadline := time.Now().Add(time.Minute); ; {
		live, err := testenv.LiveMemberIdentities(ctx, b.c.k8s, benchMemberLease)
		if err == nil && slices.Equal(live, want) {
			return testenv.Sleep(ctx, benchMemberLease/3+time.Second)
		}
		if time.Now().After(deadline) {
			return errors.Join(err, fmt.Errorf("member Leases live after a minute: %v, want %v", live, want))
		}
		if err := testenv.Sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
}

// duplicates counts the keys with more than one effect.
func duplicates(d *countingDownstream) int {
	effects, _, _, _, _ := d.snapshot()
	n := 0
	for _, e := range effects {
		if e > 1 {
			n++
		}
	}
	return n
}

// jittered is d ± jitter, uniformly.
func jittered(d, jitter time.Duration) time.Duration {
	if jitter <= 0 {
		return d
	}
	return d - jitter + time.Duration(rand.Int64N(int64(2*jitter)+1))
}
