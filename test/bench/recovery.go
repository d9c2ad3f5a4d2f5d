package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/cmd/manager/app"
	"github.com/toolledger/toolledger/internal/testenv"
)

// countingDownstream applies every request it gets — it does NOT
// deduplicate by Idempotency-Key — after holding it for delay, even if the
// caller went away meanwhile (as a real service would). It counts effects
// per key, so a duplicate dispatch shows as a second effect. Its lookup
// answers 200 once a key has an effect, 409 while one is in progress and
// 404 otherwise.
type countingDownstream struct {
	// delay ± jitter (uniformly) is how long each request takes.
	delay    time.Duration
	jitter   time.Duration
	mu       sync.Mutex
	effects  map[string]int
	inflight map[string]int
	ids      map[string]string
	requests int
	lookups  int
	seq      int
}

func newCountingDownstream(delay time.Duration) *countingDownstream {
	return &countingDownstream{delay: delay, effects: map[string]int{}, inflight: map[string]int{}, ids: map[string]string{}}
}

func (d *countingDownstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/effects":
		d.apply(w, r)
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/effects/by-key/"):
		d.lookup(w, strings.TrimPrefix(r.URL.Path, "/effects/by-key/"))
	default:
		http.NotFound(w, r)
	}
}

func idempotencyKey(r *http.Request) string {
	v := r.Header.Get("Idempotency-Key")
	if k, err := strconv.Unquote(v); err == nil {
		return k
	}
	return v
}

func (d *countingDownstream) apply(w http.ResponseWriter, r *http.Request) {
	key := idempotencyKey(r)
	var body map[string]any
	raw, _ := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	_ = json.Unmarshal(raw, &body)
	d.mu.Lock()
	d.requests++
	d.inflight[key]++
	d.mu.Unlock()
	time.Sleep(jittered(d.delay, d.jitter)) // not the request's context: the effect happens anyway
	d.mu.Lock()
	d.inflight[key]--
	d.effects[key]++
	d.seq++
	id := fmt.Sprintf("fx_%08d", d.seq)
	if d.ids[key] == "" {
		d.ids[key] = id
	}
	d.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(map[string]any{"id": id, "status": "succeeded", "amount": body["amount"], "currency": body["currency"]})
}

// lookup answers for key, taken from the decoded path (net/http unescapes
// the %2F the adapter sends).
func (d *countingDownstream) lookup(w http.ResponseWriter, key string) {
	d.mu.Lock()
	d.lookups++
	n, inflight, id := d.effects[key], d.inflight[key], d.ids[key]
	d.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch {
	case n > 0:
		_ = json.NewEncoder(w).Encode(map[string]any{"id": id, "status": "succeeded"})
	case inflight > 0:
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusConflict)
		_, _ = io.WriteString(w, `{"error":"in progress"}`)
	default:
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"error":"not found"}`)
	}
}

func (d *countingDownstream) snapshot() (effects map[string]int, ids map[string]string, requests, lookups, held int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, n := range d.inflight {
		held += n
	}
	return maps.Clone(d.effects), maps.Clone(d.ids), d.requests, d.lookups, held
}

// recoveryResult is the crash-and-restart run.
type recoveryResult struct {
	Actions     int
	Workers     int
	Delay       time.Duration
	ToolTimeout time.Duration
	LeaseGrace  time.Duration

	KillAfter            time.Duration // manager start → SIGKILL
	TerminalAtKill       int
	ExecutingAtKill      int
	HeldDownstreamAtKill int
	RestartGap           time.Duration // SIGKILL → the new manager answering
	KillToAllTerminal    time.Duration
	Total                time.Duration // first manager start → all terminal
	TimedOut             bool

	Phases      map[string]int
	Paths       map[string]int
	Duplicates  int // keys with more than one effect downstream
	Lost        int // Succeeded actions with no effect downstream
	RefMismatch int // Succeeded actions naming another effect than the key's first
	Requests    int
	Lookups     int
	Effects     int
}

// recovery puts Actions in flight against a slow downstream that does not
// deduplicate, SIGKILLs the manager process part-way, starts a new one, and
// counts how long until every action is terminal and how many keys got
// more than one effect.
func (b *bench) recovery(ctx context.Context) error {
	s := b.settings
	b.stopManager()
	ds := newCountingDownstream(s.RecoveryDelay)
	hs := httptest.NewServer(ds)
	defer hs.Close()
	toolTimeout := max(5*time.Second, 2*s.RecoveryDelay+time.Second)
	res := &recoveryResult{Actions: s.RecoveryActions, Workers: s.RecoveryWorkers, Delay: s.RecoveryDelay,
		ToolTimeout: toolTimeout, LeaseGrace: s.RecoveryLeaseGrace}
	b.results.Recovery = res
	ns := "recovery"
	if err := b.c.namespace(ctx, chargeTool(ns, hs.URL+"/effects", v1alpha1.Compensatable, toolTimeout)); err != nil {
		return err
	}
	if err := parallel(ctx, s.RecoveryActions, 32, func(ctx context.Context, i int) error {
		a := &v1alpha1.ToolAction{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("rec-%05d", i)}, Spec: spec(i + 1)}
		return b.c.k8s.Create(ctx, a)
	}); err != nil {
		return fmt.Errorf("cannot create the recovery actions: %w", err)
	}

	tracker, stopTracker, err := trackNamespace(ctx, b.c, ns)
	if err != nil {
		return err
	}
	defer stopTracker()

	args := []string{
		fmt.Sprintf("--max-concurrent-reconciles=%d", s.RecoveryWorkers),
		"--lease-grace=" + s.RecoveryLeaseGrace.String(),
	}
	log := filepath.Join(b.tmp, "recovery-manager.log")
	started := time.Now()
	first, err := startManagerProcess(ctx, b.managerBin, b.kubeconfig, log, append(args, "--executor-id=bench-recovery-a")...)
	if err != nil {
		return err
	}
	b.logf("recovery: %d actions, manager pid %s started with %d workers", s.RecoveryActions, first.pid(), s.RecoveryWorkers)
	killAt := int(float64(s.RecoveryActions) * s.RecoveryKillAt)
	deadline := time.Now().Add(10 * time.Minute)
	for {
		terminal, _ := tracker()
		if terminal >= killAt {
			break
		}
		if time.Now().After(deadline) {
			first.kill()
			return fmt.Errorf("recovery: only %d of %d actions terminal after 10 minutes before the kill", terminal, s.RecoveryActions)
		}
		if err := testenv.Sleep(ctx, 50*time.Millisecond); err != nil {
			first.kill()
			return err
		}
	}
	// Workers that start together finish together: right after a batch
	// completes nothing may be in flight. Wait until at least half of the
	// workers hold a request downstream, so that the kill lands mid-call.
	want := max(1, min(s.RecoveryWorkers, s.RecoveryActions-killAt)/2)
	for heldBy := time.Now().Add(2*s.RecoveryDelay + 5*time.Second); time.Now().Before(heldBy); {
		if _, _, _, _, held := ds.snapshot(); held >= want {
			break
		}
		if err := testenv.Sleep(ctx, 10*time.Millisecond); err != nil {
			first.kill()
			return err
		}
	}
	res.TerminalAtKill, res.ExecutingAtKill = tracker()
	_, _, _, _, res.HeldDownstreamAtKill = ds.snapshot()
	first.kill()
	killed := time.Now()
	res.KillAfter = killed.Sub(started)
	b.logf("recovery: SIGKILL after %s with %d terminal, %d Executing, %d requests held downstream",
		res.KillAfter.Round(time.Millisecond), res.TerminalAtKill, res.ExecutingAtKill, res.HeldDownstreamAtKill)

	second, err := startManagerProcess(ctx, b.managerBin, b.kubeconfig, log, append(args, "--executor-id=bench-recovery-b")...)
	if err != nil {
		return err
	}
	defer second.stop()
	res.RestartGap = time.Since(killed)
	deadline = time.Now().Add(b.settings.RecoveryTimeout)
	for {
		terminal, _ := tracker()
		if terminal >= s.RecoveryActions {
			break
		}
		if time.Now().After(deadline) {
			res.TimedOut = true
			b.fail("recovery: only %d of %d actions terminal %s after the restart", terminal, s.RecoveryActions, b.settings.RecoveryTimeout)
			break
		}
		if err := testenv.Sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
	done := time.Now()
	res.KillToAllTerminal, res.Total = done.Sub(killed), done.Sub(started)

	var list v1alpha1.ToolActionList
	if err := b.c.k8s.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return err
	}
	effects, ids, requests, lookups, _ := ds.snapshot()
	res.Requests, res.Lookups = requests, lookups
	res.Phases, res.Paths = map[string]int{}, map[string]int{}
	for _, a := range list.Items {
		res.Phases[string(a.Status.Phase)]++
		var path []string
		for _, t := range a.Status.History {
			path = append(path, t.Reason)
		}
		res.Paths[strings.Join(path, " → ")]++
		key := v1alpha1.IdempotencyKey(a.Namespace, a.Name)
		if a.Status.Phase == v1alpha1.PhaseSucceeded {
			if effects[key] == 0 {
				res.Lost++
			} else if a.Status.ExternalRef != ids[key] {
				res.RefMismatch++
			}
		}
	}
	for _, n := range effects {
		res.Effects += n
		if n > 1 {
			res.Duplicates++
		}
	}
	b.logf("recovery: all terminal %s after the kill (%s in all); phases %v; %d duplicate effects, %d lost, %d requests, %d lookups",
		res.KillToAllTerminal.Round(time.Millisecond), res.Total.Round(time.Millisecond), res.Phases, res.Duplicates, res.Lost, res.Requests, res.Lookups)
	if res.Duplicates > 0 || res.Lost > 0 || res.RefMismatch > 0 {
		b.fail("recovery: %d keys with duplicate effects, %d Succeeded without an effect, %d naming another effect", res.Duplicates, res.Lost, res.RefMismatch)
	}
	return nil
}

// trackNamespace keeps the ToolActions of ns in an informer cache (one
// watch, no polling of the API server) and returns a function that counts
// the terminal (Succeeded, Failed, Escalated) and Executing ones.
func trackNamespace(ctx context.Context, c *cluster, ns string) (func() (terminal, executing int), func(), error) {
	ca, err := cache.New(c.cfg, cache.Options{Scheme: app.Scheme(), DefaultNamespaces: map[string]cache.Config{ns: {}}})
	if err != nil {
		return nil, nil, err
	}
	cctx, cancel := context.WithCancel(ctx)
	go func() { _ = ca.Start(cctx) }()
	if _, err := ca.GetInformer(ctx, &v1alpha1.ToolAction{}); err != nil {
		cancel()
		return nil, nil, err
	}
	if !ca.WaitForCacheSync(ctx) {
		cancel()
		return nil, nil, fmt.Errorf("the tracking cache of %s did not sync", ns)
	}
	count := func() (terminal, executing int) {
		var list v1alpha1.ToolActionList
		if err := ca.List(cctx, &list, client.UnsafeDisableDeepCopy); err != nil {
			return 0, 0
		}
		for i := range list.Items {
			switch p := list.Items[i].Status.Phase; {
			case p.IsSettled():
				terminal++
			case p == v1alpha1.PhaseExecuting:
				executing++
			}
		}
		return terminal, executing
	}
	return count, cancel, nil
}

func sortedKeys(m map[string]int) []string {
	return slices.Sorted(maps.Keys(m))
}
