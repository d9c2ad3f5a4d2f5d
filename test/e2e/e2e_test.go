//go:build e2e && linux

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/cmd/manager/app"
	"github.com/toolledger/toolledger/internal/testenv"
	"github.com/toolledger/toolledger/pkg/sdk"
)

// suite is what every scenario shares: one control plane, the admin
// clients, the processes, the seed and the results.
type suite struct {
	t       *testing.T
	ctx     context.Context
	dir     string
	seed    uint64
	trials  int
	cluster *cluster
	sdk     *sdk.Client
	procs   *processes
	began   time.Time

	mu       sync.Mutex
	rows     []Row
	managers int
	steady   [2]*manager
	// postgres serves the archive scenarios' databases; started by the
	// first of them.
	postgres *testenv.Postgres
}

// scenario is one row of the table; name is its subtest's name.
type scenario struct {
	name  string
	title string
	run   func(s *suite, sc *run) error
}

// run is a scenario being run: its row and its trials.
type run struct {
	name   string
	row    Row
	trials []*trial
	began  time.Time
	// archive is the scenario's archive, which its trials' records leave
	// etcd for; nil without one.
	archive *archiveDB
}

// trial is one trial's intents and what the driver saw of them.
type trial struct {
	ns      string
	d       *downstream
	mu      sync.Mutex
	keys    []string
	amounts map[string]int64
	extra   []Violation
	// tickets: the trial's intents open tickets, which the downstream
	// counts by incident (ticketEvidence), not charges by key.
	tickets bool
	// archive, when set, keeps the trial's records that left etcd: its
	// ledger is both.
	archive *archiveDB
	// watched are, with an archive, the trial's actions as a watch last
	// saw them, by uid: an action its key's archived record answered
	// leaves etcd without a row of its own (its row would repeat the
	// original's), and the watch is where the checks find it.
	watched map[types.UID]*v1alpha1.ToolAction
}

func (tr *trial) add(key string, amount int64) string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	full := tr.ns + "/" + key
	tr.keys = append(tr.keys, full)
	if tr.amounts == nil {
		tr.amounts = map[string]int64{}
	}
	tr.amounts[full] = amount
	return key
}

// amount is what the intent under key was first sent with.
func (tr *trial) amount(key string) int64 {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.amounts[tr.ns+"/"+key]
}

// violation records what the driver itself saw go wrong.
func (tr *trial) violation(key, format string, args ...any) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.extra = append(tr.extra, Violation{Kind: DriverObserved, Key: tr.ns + "/" + key, Detail: fmt.Sprintf(format, args...)})
}

// rngFor is a trial's own randomness, derived from the seed, so that the
// choices of trials running in parallel do not depend on their timing.
func (s *suite) rngFor(scenario string, n int) *rand.Rand {
	h := fnv.New64a()
	_, _ = fmt.Fprintf(h, "%s/%d", scenario, n)
	return rand.New(rand.NewPCG(s.seed, h.Sum64()))
}

// between returns a random duration in [lo, hi).
func between(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rng.Int64N(int64(hi-lo)))
}

// intRange returns a random int in [lo, hi].
func intRange(rng *rand.Rand, lo, hi int) int { return lo + rng.IntN(hi-lo+1) }

func (s *suite) logf(format string, args ...any) {
	s.t.Helper()
	s.t.Logf("[%6.1fs] "+format, append([]any{time.Since(s.began).Seconds()}, args...)...)
}

// newTrial creates a tenant whose tool calls d.
func (s *suite) newTrial(sc *run, d *downstream, opts toolOptions) (*trial, error) {
	ns, err := newTenant(s.ctx, s.cluster.client, sc.name, d, opts)
	if err != nil {
		return nil, err
	}
	tr := &trial{ns: ns, d: d, archive: sc.archive}
	if tr.archive != nil {
		if err := s.watchActions(tr); err != nil {
			return nil, err
		}
	}
	s.mu.Lock()
	sc.trials = append(sc.trials, tr)
	s.mu.Unlock()
	return tr, nil
}

// watchActions keeps, until the suite ends, the last version of each of
// the trial's actions in tr.watched; a watch that ends is started again
// from the last version it gave.
func (s *suite) watchActions(tr *trial) error {
	watcher, err := client.NewWithWatch(s.cluster.cfg, client.Options{Scheme: app.Scheme()})
	if err != nil {
		return err
	}
	tr.watched = map[types.UID]*v1alpha1.ToolAction{}
	var list v1alpha1.ToolActionList
	if err := s.cluster.client.List(s.ctx, &list, client.InNamespace(tr.ns)); err != nil {
		return err
	}
	go func() {
		version := list.ResourceVersion
		for s.ctx.Err() == nil {
			w, err := watcher.Watch(s.ctx, &v1alpha1.ToolActionList{}, client.InNamespace(tr.ns), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: version}})
			if err != nil {
				_ = testenv.Sleep(s.ctx, 200*time.Millisecond)
				continue
			}
			for e := range w.ResultChan() {
				if a, ok := e.Object.(*v1alpha1.ToolAction); ok {
					tr.mu.Lock()
					tr.watched[a.UID] = a
					tr.mu.Unlock()
					version = a.ResourceVersion
				}
			}
		}
	}()
	return nil
}

// request is the intent to charge amount under key in the trial's tenant.
func (tr *trial) request(key string, amount int64) sdk.Request {
	return sdk.Request{
		Namespace: tr.ns, Key: key, Tool: "charge",
		Parameters: map[string]any{"amount": amount, "currency": "EUR", "customer": "cus_e2e"},
	}
}

// invoke is an agent: it calls Invoke until it returns an outcome, as the
// SDK says is safe — the API server may be down or restarting — or until
// ctx ends. A DuplicateConflictError is returned at once.
func (s *suite) invoke(ctx context.Context, req sdk.Request) (*sdk.Outcome, error) {
	out, _, err := s.invokeCounting(ctx, req)
	return out, err
}

// invokeCounting is invoke that also says how often it called again after
// an error.
func (s *suite) invokeCounting(ctx context.Context, req sdk.Request) (*sdk.Outcome, int, error) {
	delay := 100 * time.Millisecond
	for again := 0; ; again++ {
		out, err := s.sdk.Invoke(ctx, req)
		var conflict *sdk.DuplicateConflictError
		if err == nil || errors.As(err, &conflict) || ctx.Err() != nil {
			return out, again, err
		}
		if testenv.Sleep(ctx, delay) != nil {
			return out, again, err
		}
		delay = min(2*delay, time.Second)
	}
}

// invokeAll invokes every intent of keys concurrently, each as its own
// agent, adding them to wg. An agent that gets no settled outcome is a
// violation the driver saw.
func (s *suite) invokeAll(ctx context.Context, tr *trial, keys []string, wg *sync.WaitGroup) {
	for _, key := range keys {
		wg.Go(func() {
			out, err := s.invoke(ctx, tr.request(key, tr.amount(key)))
			if err != nil {
				tr.violation(key, "the agent got no outcome: %v", err)
				return
			}
			if !out.Phase.IsSettled() {
				tr.violation(key, "Invoke returned unsettled phase %q", out.Phase)
			}
		})
	}
}

// settleTimeout bounds the wait, after a scenario's load, for every intent
// to settle; what has not settled by then is lost.
const settleTimeout = time.Minute

// waitSettled waits until every intent of every trial is settled in the
// ledger, or timeout passes.
func (s *suite) waitSettled(trials []*trial, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	pending := slices.Clone(trials)
	for len(pending) > 0 && time.Now().Before(deadline) && s.ctx.Err() == nil {
		pending = slices.DeleteFunc(pending, func(tr *trial) bool {
			ledger, err := s.ledger(s.ctx, tr)
			if err != nil {
				return false
			}
			tr.mu.Lock()
			defer tr.mu.Unlock()
			for _, key := range tr.keys {
				if !v1alpha1.Phase(ledger[key].Phase).IsSettled() {
					return false
				}
			}
			return true
		})
		if len(pending) > 0 {
			_ = testenv.Sleep(s.ctx, 300*time.Millisecond)
		}
	}
}

// verify checks every trial of a scenario once everything settled: the
// ledger from the API server, the downstream's first charge per key (a
// lookup, which also waits out requests still in progress) and then its
// effect counts.
func (s *suite) verify(sc *run) error {
	s.waitSettled(sc.trials, settleTimeout)
	byDownstream := map[*downstream][]*trial{}
	for _, tr := range sc.trials {
		byDownstream[tr.d] = append(byDownstream[tr.d], tr)
	}
	for d, trials := range byDownstream {
		// Faults left over from the load must not answer the evidence lookups.
		if err := d.clearFaults(s.ctx); err != nil {
			return fmt.Errorf("cannot clear the faults of downstream %s: %w", d.name, err)
		}
		charges := map[string]Charge{}
		actions := map[*trial]map[string]Action{}
		for _, tr := range trials {
			ledger, err := s.ledger(s.ctx, tr)
			if err != nil {
				return err
			}
			actions[tr] = ledger
			for _, key := range tr.keys {
				if tr.tickets {
					break
				}
				c, found, err := s.firstCharge(d, key)
				if err != nil {
					return err
				}
				if found {
					charges[key] = c
				}
			}
		}
		st, err := d.stats(s.ctx)
		if err != nil {
			return fmt.Errorf("cannot read the stats of downstream %s: %w", d.name, err)
		}
		for _, tr := range trials {
			effects, first := st.Effects, charges
			if tr.tickets {
				if effects, first, err = s.ticketEvidence(d, tr, st); err != nil {
					return err
				}
			}
			tr.mu.Lock()
			r := Check(Trial{
				Name: tr.ns, Prefix: tr.ns + "/", Keys: tr.keys, Amounts: tr.amounts,
				Actions: actions[tr], Effects: effects, Charges: first, Extra: tr.extra,
			})
			tr.mu.Unlock()
			sc.row.Add(r)
			for _, v := range r.Violations {
				s.t.Errorf("%s: trial %s: %s%s", sc.name, tr.ns, v, s.history(v.Key))
			}
		}
	}
	return nil
}

// records are the trial's ToolActions: those in etcd and, with an archive,
// the archived ones no longer there (each as the archive keeps it).
func (s *suite) records(ctx context.Context, tr *trial) ([]v1alpha1.ToolAction, error) {
	var list v1alpha1.ToolActionList
	if err := s.cluster.client.List(ctx, &list, client.InNamespace(tr.ns)); err != nil {
		return nil, fmt.Errorf("cannot list the actions of %s: %w", tr.ns, err)
	}
	if tr.archive == nil {
		return list.Items, nil
	}
	archived, err := tr.archive.records(ctx, tr.ns)
	if err != nil {
		return nil, err
	}
	kept := map[types.UID]bool{}
	for _, a := range list.Items {
		kept[a.UID] = true
	}
	all := list.Items
	for _, r := range archived {
		if !kept[r.action.UID] {
			kept[r.action.UID] = true
			all = append(all, r.action)
		}
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for uid, a := range tr.watched {
		if !kept[uid] && a.Status.Phase.IsSettled() {
			all = append(all, *a)
		}
	}
	return all, nil
}

// ledger is what the checker reads of the trial's keys: each key's record
// in etcd, else its newest archived one.
func (s *suite) ledger(ctx context.Context, tr *trial) (map[string]Action, error) {
	all, err := s.records(ctx, tr)
	if err != nil {
		return nil, err
	}
	newest := map[string]*v1alpha1.ToolAction{}
	for i := range all {
		a := &all[i]
		// etcd's records come first (a name has one at a time there, newer
		// than any archived), then the archived ones, newest first.
		if _, seen := newest[a.Name]; !seen {
			newest[a.Name] = a
		}
	}
	out := make(map[string]Action, len(newest))
	for _, a := range newest {
		action := toAction(a)
		out[action.Key] = action
	}
	return out, nil
}

// firstCharge looks the key up downstream, waiting (bounded) while a
// request for it is still in progress.
func (s *suite) firstCharge(d *downstream, key string) (Charge, bool, error) {
	deadline := time.Now().Add(15 * time.Second)
	for {
		status, c, err := d.lookup(s.ctx, key)
		switch {
		case err != nil:
			return c, false, fmt.Errorf("cannot look %s up: %w", key, err)
		case status == http.StatusOK:
			return c, true, nil
		case status == http.StatusNotFound:
			return c, false, nil
		case time.Now().After(deadline):
			return c, false, fmt.Errorf("lookup of %s still answers %d", key, status)
		}
		if err := testenv.Sleep(s.ctx, 100*time.Millisecond); err != nil {
			return c, false, err
		}
	}
}

// history describes an action's record for a violation report.
func (s *suite) history(key string) string {
	ns, name, _ := strings.Cut(key, "/")
	var a v1alpha1.ToolAction
	if err := s.cluster.client.Get(s.ctx, client.ObjectKey{Namespace: ns, Name: name}, &a); err != nil {
		return fmt.Sprintf(" (no record: %v)", err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n    phase %s, attempts %d, externalRef %q", a.Status.Phase, a.Status.Attempts, a.Status.ExternalRef)
	for _, h := range a.Status.History {
		fmt.Fprintf(&b, "\n    %s %s→%s %s attempt %d by %s: %s", h.Time.Format("15:04:05.000"), h.From, h.To, h.Reason, h.Attempt, h.Executor, h.Message)
	}
	return b.String()
}

// toAction reads what the checker needs from a ToolAction.
func toAction(a *v1alpha1.ToolAction) Action {
	out := Action{
		Key:         a.Namespace + "/" + a.Name,
		Phase:       string(a.Status.Phase),
		ExternalRef: a.Status.ExternalRef,
	}
	if out.Phase == "" {
		out.Phase = string(v1alpha1.PhasePending)
	}
	if e := a.Status.Error; e != nil {
		out.ErrorClass, out.Reason, out.Message = string(e.Class), e.Reason, e.Message
	}
	for _, t := range a.Status.History {
		switch {
		case t.To == v1alpha1.PhaseUnknown:
			out.Unseen = true
		case t.From == v1alpha1.PhaseEscalated && t.To == v1alpha1.PhaseRetryScheduled:
			out.Unseen = false // a resolver found it safe to retry
		}
	}
	if raw, ok := a.Spec.Parameters["amount"]; ok {
		var n json.Number
		if json.Unmarshal(raw.Raw, &n) == nil {
			out.Amount, _ = n.Int64()
		}
	}
	return out
}

// TestE2E runs every scenario against real processes and prints the table.
func TestE2E(t *testing.T) {
	s := newSuite(t)
	scenarios := allScenarios()
	t.Run("naive-downstream-self-check", func(t *testing.T) {
		parent := s.t
		s.t = t
		defer func() { s.t = parent }()
		if err := s.selfCheck(); err != nil {
			t.Fatal(err)
		}
	})
	ran := 0
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			ran++
			if s.ctx.Err() != nil {
				t.Fatalf("not run: the suite was interrupted or ran out of time (%v)", s.ctx.Err())
			}
			r := &run{name: sc.name, row: Row{Scenario: sc.title}, began: time.Now()}
			parent := s.t
			s.t = t
			defer func() { s.t = parent }()
			s.logf("scenario %s: start", sc.name)
			if err := sc.run(s, r); err != nil {
				t.Errorf("%s: %v", sc.name, err)
			}
			r.row.Trials = len(r.trials)
			if note := failedNote(r.row.FailedBy); note != "" {
				r.row.Notes = append(r.row.Notes, note)
			}
			r.row.Wall = time.Since(r.began)
			s.mu.Lock()
			s.rows = append(s.rows, r.row)
			s.mu.Unlock()
			s.logf("scenario %s: %d trials, %d actions, %d effects, %d duplicates, %d lost, %d escalated, %d failed, %d other violations in %s",
				sc.name, r.row.Trials, r.row.Actions, r.row.Effects, r.row.Duplicates, r.row.Lost, r.row.Escalated, r.row.Failed, r.row.Other(), r.row.Wall.Round(100*time.Millisecond))
		})
	}
	table := Table(s.rows)
	t.Logf("seed %d, %d trials per scenario, %s in all\n\n%s", s.seed, s.trials, time.Since(s.began).Round(time.Second), table)
	if ran == len(scenarios) {
		if err := s.writeResults(table); err != nil {
			t.Errorf("cannot write the results: %v", err)
		}
	}
}

func newSuite(t *testing.T) *suite {
	// The suite's own clients (the managers log in their processes) have
	// nothing to say; without a logger, controller-runtime prints a stack
	// trace for the first client made after 30s.
	testenv.SetLogger(io.Discard)
	s := &suite{t: t, began: time.Now(), trials: 50, seed: uint64(time.Now().UnixNano())}
	if v := os.Getenv("E2E_TRIALS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("E2E_TRIALS=%q is not a positive number", v)
		}
		s.trials = n
	}
	if v := os.Getenv("E2E_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("E2E_SEED=%q is not a number", v)
		}
		s.seed = n
	}
	t.Logf("seed %d (E2E_SEED=%d reproduces the choices), %d trials per scenario (E2E_TRIALS)", s.seed, s.seed, s.trials)

	// The suite stops a minute before go test's deadline, so that it cleans up.
	ctx, cancel := context.WithCancel(context.Background())
	if deadline, ok := t.Deadline(); ok {
		ctx, cancel = context.WithDeadline(context.Background(), deadline.Add(-time.Minute))
	}
	t.Cleanup(cancel)
	s.ctx = ctx

	dir, err := os.MkdirTemp("", "toolledger-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	s.dir = dir
	s.procs = &processes{ctx: ctx, dir: filepath.Join(dir, "logs")}
	if err := os.MkdirAll(s.procs.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Logf("logs in %s (kept when the suite fails)", dir)
	// Ctrl-C (or SIGTERM) ends the scenarios early and lets the cleanup
	// stop every process; a second one kills the suite's children at once
	// (the watchdog then kills the control plane).
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	t.Cleanup(func() { signal.Stop(signals) })
	go func() {
		select {
		case <-signals:
		case <-ctx.Done():
			return
		}
		fmt.Fprintln(os.Stderr, "e2e: interrupted; stopping the scenarios and cleaning up (interrupt again to kill everything now)")
		cancel()
		<-signals
		s.procs.killAll()
		os.Exit(2)
	}()
	t.Cleanup(func() {
		s.procs.killAll()
		s.stopPostgres()
		if s.cluster != nil {
			if err := s.cluster.stop(); err != nil {
				t.Logf("stopping the control plane: %v", err)
			}
		}
		if !t.Failed() && os.Getenv("E2E_KEEP_LOGS") == "" {
			_ = os.RemoveAll(dir)
		}
	})

	for _, name := range []string{"manager", "demo-downstream"} {
		if _, err := binary(name); err != nil {
			t.Fatal(err)
		}
	}
	began := time.Now()
	s.cluster, err = startCluster(filepath.Join(dir, "controlplane"))
	if err != nil {
		t.Fatal(err)
	}
	s.sdk, err = sdk.NewClient(s.cluster.cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.logf("control plane up in %s (kube-apiserver %s, etcd %s)", time.Since(began).Round(100*time.Millisecond),
		s.cluster.plane.Env.ControlPlane.APIServer.SecureServing.URL("https", "").Host, s.cluster.plane.Env.ControlPlane.Etcd.URL.Host)
	return s
}

// nextManagerID names managers in start order.
func (s *suite) nextManagerID(prefix string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.managers++
	return fmt.Sprintf("%s-%03d", prefix, s.managers)
}

// startManager starts a manager and waits for its workers.
func (s *suite) startManager(prefix string) (*manager, error) {
	m, err := s.procs.startManager(s.cluster.kubeconfig, s.nextManagerID(prefix))
	if err != nil {
		return nil, err
	}
	return m, m.waitReady(s.ctx)
}

// writeResults writes the table to results.md next to this file.
func (s *suite) writeResults(table string) error {
	var b strings.Builder
	b.WriteString("# End-to-end results\n\n")
	b.WriteString("Written by `make test-e2e` (`test/e2e`, build tag `e2e`): real kube-apiserver, etcd, manager and demo downstream processes.\n")
	fmt.Fprintf(&b, "Seed %d, %d trials per scenario (`E2E_TRIALS`), %s, GOMAXPROCS %d, %s in all.\n\n",
		s.seed, s.trials, runtime.Version(), runtime.GOMAXPROCS(0), time.Since(s.began).Round(time.Second))
	b.WriteString("A trial is a tenant (namespace) with its own Tool and a handful of intents; every key of every trial is checked: ")
	b.WriteString("at most one downstream effect, exactly one for Succeeded (the one the record names), none for Failed, ")
	b.WriteString("and every intent Succeeded, Failed or Escalated with a reason. `duplicates` and `lost` must be 0; ")
	b.WriteString("`other violations` counts missing, phantom, stray or misattributed effects, changed requests taken and driver observations.\n\n")
	b.WriteString(table)
	b.WriteString(scenarioNotes)
	_, file, _, _ := runtime.Caller(0)
	return os.WriteFile(filepath.Join(filepath.Dir(file), "results.md"), []byte(b.String()), 0o644)
}
