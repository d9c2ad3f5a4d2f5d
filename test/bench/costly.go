package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/cmd/manager/app"
	"github.com/toolledger/toolledger/internal/testenv"
	"github.com/toolledger/toolledger/pkg/sdk"
)

// costlyResult is section 9: a healthy tenant's actions timed alone, then
// while another tenant creates actions whose parameters are the worst case
// of a quadratic uniqueItems check, on a Tool whose schema asks for it:
// once with config/admission's parameters policy, as shipped, and once
// without it.
type costlyResult struct {
	// Healthy is the healthy actions timed in each run, one after another;
	// Hostile the hostile actions created at once before each run beside
	// them, which starts once the API server has answered them all, each of
	// Items distinct numbers (PayloadBytes encoded).
	Healthy, Hostile, Items, PayloadBytes int
	// ToolReady is the hostile Tool's Ready condition: reason and message.
	ToolReady string
	Quiet     openLoopSummary
	// Refused is the run beside hostile actions that the parameters policy
	// refuses at admission; Stored the run without the policy, where the
	// API server stores them and the controller refuses them; InFlight the
	// run with the policy that begins as the hostile creates are sent.
	Refused, Stored, InFlight hostileRun
	// QuietAsUsers, AsUsers and Fair repeat the quiet and in-flight runs
	// with both tenants as the API server's users (fairness.go): with API
	// Priority and Fairness as the API server ships it, then with the
	// candidate tenant FlowSchema.
	QuietAsUsers  openLoopSummary
	AsUsers, Fair hostileRun
	// BareQuiet and BareInFlight repeat the quiet and in-flight runs with
	// a bare client as the healthy tenant: the API server's own ratio,
	// against which the in-flight run through toolledger is judged.
	BareQuiet    openLoopSummary
	BareInFlight hostileRun
}

// hostileRun is the healthy tenant's run beside one batch of hostile
// actions, and how that batch ended.
type hostileRun struct {
	Beside openLoopSummary
	// Reasons counts how the hostile actions ended (by phase and error
	// reason, or the API server's refusal); Answered is from sending each
	// create to the API server's answer, Settled to Failed or Succeeded.
	Reasons           map[string]int
	Answered, Settled openLoopSummary
	// Refusing is from when the API server had answered every hostile
	// create until the last stored one settled; Overlapping is how many of
	// the healthy actions began within that time.
	Refusing    time.Duration
	Overlapping int
	// BesideCreate is how long the API server took to answer the healthy
	// actions' creates; Slowest is the slowest of those actions,
	// create→Succeeded, and SlowestCreate its create.
	BesideCreate           openLoopSummary
	Slowest, SlowestCreate time.Duration
}

// refusedAtAdmission is the Reasons key of a hostile create the API server
// refused.
const refusedAtAdmission = "refused at admission"

// onlyCostlySchema is the -only value that runs costlySchema alone.
const onlyCostlySchema = "costly-schema"

// costlySchema times a healthy tenant's create→Succeeded, quietly and
// while a hostile tenant's actions of a uniqueItems payload are refused at
// admission (from when the API server has answered them, then from when
// they are sent), then while they are stored and refused by the
// controller, on the running control plane with the shipped manager.
func (b *bench) costlySchema(ctx context.Context) error {
	s := b.settings
	res := &costlyResult{Healthy: s.CostlyHealthy, Hostile: s.CostlyHostile, Items: s.CostlyItems}
	b.results.Costly = res
	if err := b.useManager(ctx, b.baseline().manager()); err != nil {
		return err
	}
	healthyNS, hostileNS := "costly-healthy", "costly-hostile"
	if err := b.c.namespace(ctx, b.fastTool(healthyNS)); err != nil {
		return err
	}
	hostileTool := b.fastTool(hostileNS)
	hostileTool.Spec.ParametersSchema = &apiextensionsv1.JSON{Raw: []byte(
		`{"type": "object", "properties": {"ids": {"type": "array", "items": {"type": "number"}, "uniqueItems": true}}}`)}
	if err := b.c.namespace(ctx, hostileTool); err != nil {
		return err
	}
	var err error
	if res.ToolReady, err = b.toolReady(ctx, hostileNS); err != nil {
		return err
	}
	numbers := make([]string, s.CostlyItems)
	for i := range numbers {
		numbers[i] = strconv.Itoa(i)
	}
	payload := map[string]apiextensionsv1.JSON{"ids": {Raw: []byte("[" + strings.Join(numbers, ",") + "]")}}
	res.PayloadBytes = len(`{"ids":}`) + len(payload["ids"].Raw)

	// The healthy tenant's client times each of its creates, to tell the
	// API server's wait from the controller's.
	var lastCreate atomic.Int64
	healthy, err := sdk.NewClient(createTimingConfig(b.c.cfg, &lastCreate))
	if err != nil {
		return err
	}
	// timed invokes n healthy actions one after another, into run when
	// given, and returns when each began after the first.
	timed := func(healthy tenantClients, name string, n int, run *hostileRun) (openLoopSummary, []time.Duration, error) {
		var latencies, began, creates []time.Duration
		start := time.Now()
		errs, first := 0, error(nil)
		for i := range n {
			at := time.Now()
			lastCreate.Store(0)
			key := fmt.Sprintf("%s-%04d", name, i)
			var err error
			if healthy.bare != nil {
				err = healthy.bare.object(ctx, healthyNS, key, i+1, false)
			} else {
				_, err = invokeSucceeded(ctx, healthy.healthy, request(healthyNS, key, i+1))
			}
			if err != nil {
				errs++
				first = cmpErr(first, err)
				continue
			}
			took, create := time.Since(at), time.Duration(lastCreate.Load())
			latencies, began, creates = append(latencies, took), append(began, at.Sub(start)), append(creates, create)
			if run != nil && took > run.Slowest {
				run.Slowest, run.SlowestCreate = took, create
			}
		}
		if ctx.Err() != nil {
			return openLoopSummary{}, nil, ctx.Err()
		}
		if errs > 0 {
			b.fail("costly schema: %d of the healthy tenant's %d actions (%s) did not succeed, first: %v", errs, n, name, first)
		}
		if run != nil {
			run.BesideCreate = summarize(creates)
		}
		sum := summarize(latencies)
		sum.Errors = errs
		return sum, began, nil
	}
	// beside times the healthy tenant while a batch of hostile actions is
	// created, from when the API server has answered every create, or
	// from when they are sent (inFlight): the API server's cost of
	// decoding a large request is every tenant's, with or without
	// toolledger, and is reported apart.
	beside := func(tenants tenantClients, name, want string, run *hostileRun, inFlight bool) error {
		hostile, err := b.startHostile(ctx, tenants.hostile, hostileNS, name, payload, s.CostlyHostile)
		if err != nil {
			return err
		}
		if !inFlight {
			hostile.waitAnswered()
		}
		timedFrom := time.Now()
		var began []time.Duration
		run.Beside, began, err = timed(tenants, name, s.CostlyHealthy, run)
		settled, stopErr := hostile.stop(ctx)
		if err := errors.Join(err, stopErr); err != nil {
			return err
		}
		run.Reasons = map[string]int{}
		var answered, took []time.Duration
		for _, o := range settled {
			run.Reasons[o.reason]++
			answered = append(answered, o.created)
			if o.took > 0 {
				took = append(took, o.took)
			}
		}
		run.Answered, run.Settled = summarize(answered), summarize(took)
		if last := hostile.lastSettled(); !last.IsZero() {
			run.Refusing = max(0, last.Sub(timedFrom))
		}
		for _, at := range began {
			if at < run.Refusing {
				run.Overlapping++
			}
		}
		if run.Reasons[want] != len(settled) {
			b.fail("costly schema: of %d hostile actions, %d ended other than %s: %v", len(settled), len(settled)-run.Reasons[want], want, run.Reasons)
		}
		b.logf("costly schema, %s: the healthy tenant's create→Succeeded p50 %s ms, p99 %s ms beside %d hostile actions (%d numbers, %d bytes each; ended %v; create answered p50 %s ms, p99 %s ms; settled p50 %s ms, p99 %s ms after the create was sent; the last settled %s ms after all were answered, while %d healthy actions began); the slowest healthy action took %s ms, its create %s ms (creates beside: p50 %s ms, p99 %s ms)",
			name, ms(run.Beside.P50), ms(run.Beside.P99), s.CostlyHostile, res.Items, res.PayloadBytes, run.Reasons,
			ms(run.Answered.P50), ms(run.Answered.P99), ms(run.Settled.P50), ms(run.Settled.P99), ms(run.Refusing), run.Overlapping,
			ms(run.Slowest), ms(run.SlowestCreate), ms(run.BesideCreate.P50), ms(run.BesideCreate.P99))
		return b.waitQuiet(ctx)
	}

	// The first actions of a namespace warm the SDK's watch and the caches.
	admin := tenantClients{healthy: healthy, hostile: b.c.k8s}
	if _, _, err := timed(admin, "warm", min(5, s.CostlyHealthy), nil); err != nil {
		return err
	}
	if err := b.waitQuiet(ctx); err != nil {
		return err
	}
	if res.Quiet, _, err = timed(admin, "quiet", s.CostlyHealthy, nil); err != nil {
		return err
	}
	b.logf("costly schema: the healthy tenant's create→Succeeded p50 %s ms, p99 %s ms quietly; the hostile Tool: %s", ms(res.Quiet.P50), ms(res.Quiet.P99), res.ToolReady)
	if err := b.waitQuiet(ctx); err != nil {
		return err
	}
	if err := b.useParametersPolicy(ctx, hostileNS, payload, true); err != nil {
		return err
	}
	if err := beside(admin, "refused", refusedAtAdmission, &res.Refused, false); err != nil {
		return err
	}
	if err := beside(admin, "in-flight", refusedAtAdmission, &res.InFlight, true); err != nil {
		return err
	}
	bare := tenantClients{bare: b.ceiling, hostile: b.c.k8s}
	if res.BareQuiet, _, err = timed(bare, "bare-quiet", s.CostlyHealthy, nil); err != nil {
		return err
	}
	b.logf("costly schema, a bare client: create→Succeeded p50 %s ms, p99 %s ms quietly", ms(res.BareQuiet.P50), ms(res.BareQuiet.P99))
	if err := beside(bare, "bare", refusedAtAdmission, &res.BareInFlight, true); err != nil {
		return err
	}
	users, err := b.asTenants(ctx, healthyNS, hostileNS, func(cfg *rest.Config) *rest.Config { return createTimingConfig(cfg, &lastCreate) })
	if err != nil {
		return err
	}
	if res.QuietAsUsers, _, err = timed(*users, "quiet-users", s.CostlyHealthy, nil); err != nil {
		return err
	}
	b.logf("costly schema, as users: the healthy tenant's create→Succeeded p50 %s ms, p99 %s ms quietly", ms(res.QuietAsUsers.P50), ms(res.QuietAsUsers.P99))
	if err := beside(*users, "users", refusedAtAdmission, &res.AsUsers, true); err != nil {
		return err
	}
	if err := b.useTenantFlowSchema(ctx, healthyNS, true); err != nil {
		return err
	}
	if err := beside(*users, "fair", refusedAtAdmission, &res.Fair, true); err != nil {
		return err
	}
	if err := b.useTenantFlowSchema(ctx, healthyNS, false); err != nil {
		return err
	}
	if err := b.useParametersPolicy(ctx, hostileNS, payload, false); err != nil {
		return err
	}
	return beside(admin, "stored", "Failed/InvalidToolContract", &res.Stored, false)
}

// summarize is the percentiles of durations.
func summarize(d []time.Duration) openLoopSummary {
	return openLoopSummary{Samples: len(d), P50: percentile(d, 50), P95: percentile(d, 95), P99: percentile(d, 99)}
}

// cmpErr keeps the first error.
func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// toolReady waits until the controller has checked the namespace's tool
// and returns its Ready condition's reason and message.
func (b *bench) toolReady(ctx context.Context, namespace string) (string, error) {
	for deadline := time.Now().Add(time.Minute); ; {
		var tool v1alpha1.Tool
		if err := b.c.k8s.Get(ctx, client.ObjectKey{Namespace: namespace, Name: toolName}, &tool); err != nil {
			return "", err
		}
		if c := meta.FindStatusCondition(tool.Status.Conditions, v1alpha1.ConditionToolReady); c != nil && c.ObservedGeneration == tool.Generation {
			return fmt.Sprintf("Ready=%s %s: %s", c.Status, c.Reason, c.Message), nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("tool %s/%s was not checked within a minute", namespace, toolName)
		}
		if err := testenv.Sleep(ctx, 100*time.Millisecond); err != nil {
			return "", err
		}
	}
}

// hostileTenant holds another tenant's actions in play: all created at
// once, kept while the healthy tenant is timed, deleted when stopped.
type hostileTenant struct {
	c         client.Client
	namespace string
	w         watch.Interface
	creates   sync.WaitGroup
	names     []string

	mu        sync.Mutex
	last      time.Time
	began     map[string]time.Time
	created   map[string]time.Duration
	settled   map[string]hostileOutcome
	createErr error
}

// hostileOutcome is how one hostile action ended: its phase and reason,
// and how long after its create was sent the API server answered it
// (created) and the action settled (took).
type hostileOutcome struct {
	reason        string
	created, took time.Duration
}

// startHostile starts creating n actions named after batch with parameters
// in namespace, at once, and returns without waiting for them.
func (b *bench) startHostile(ctx context.Context, creator client.Client, namespace, batch string, parameters map[string]apiextensionsv1.JSON, n int) (*hostileTenant, error) {
	watcher, err := client.NewWithWatch(b.c.cfg, client.Options{Scheme: app.Scheme()})
	if err != nil {
		return nil, err
	}
	w, err := watcher.Watch(ctx, &v1alpha1.ToolActionList{}, client.InNamespace(namespace))
	if err != nil {
		return nil, fmt.Errorf("cannot watch the hostile tenant's actions: %w", err)
	}
	h := &hostileTenant{c: creator, namespace: namespace, w: w,
		began: map[string]time.Time{}, created: map[string]time.Duration{}, settled: map[string]hostileOutcome{}}
	go h.follow()
	for i := range n {
		name := fmt.Sprintf("%s-%02d", batch, i)
		h.names = append(h.names, name)
		h.creates.Add(1)
		go func() {
			defer h.creates.Done()
			action := &v1alpha1.ToolAction{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
				Spec: v1alpha1.ToolActionSpec{ToolRef: v1alpha1.ToolReference{Name: toolName}, Parameters: parameters}}
			began := time.Now()
			h.mu.Lock()
			h.began[name] = began
			h.mu.Unlock()
			err := h.c.Create(ctx, action)
			h.mu.Lock()
			defer h.mu.Unlock()
			h.created[name] = time.Since(began)
			switch {
			case apierrors.IsInvalid(err) || apierrors.IsForbidden(err):
				h.settled[name] = hostileOutcome{reason: refusedAtAdmission}
			case err != nil:
				h.createErr = cmpErr(h.createErr, fmt.Errorf("cannot create hostile action %s: %w", name, err))
			}
		}()
	}
	return h, nil
}

// lastSettled is when the last stored action seen to settle settled, zero
// when none did.
func (h *hostileTenant) lastSettled() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.last
}

// waitAnswered waits until the API server has answered every create.
func (h *hostileTenant) waitAnswered() { h.creates.Wait() }

// follow records when and how each action settles.
func (h *hostileTenant) follow() {
	for event := range h.w.ResultChan() {
		a, ok := event.Object.(*v1alpha1.ToolAction)
		if !ok || (a.Status.Phase != v1alpha1.PhaseFailed && a.Status.Phase != v1alpha1.PhaseSucceeded) {
			continue
		}
		reason := string(a.Status.Phase)
		if a.Status.Error != nil {
			reason += "/" + a.Status.Error.Reason
		}
		h.mu.Lock()
		if began, ok := h.began[a.Name]; ok {
			if _, seen := h.settled[a.Name]; !seen {
				h.settled[a.Name] = hostileOutcome{reason: reason, took: time.Since(began)}
				h.last = time.Now()
			}
		}
		h.mu.Unlock()
	}
}

// stop waits (up to five minutes) until every action settled, deletes
// them, and returns how they ended.
func (h *hostileTenant) stop(ctx context.Context) ([]hostileOutcome, error) {
	h.waitAnswered()
	defer h.w.Stop()
	for deadline := time.Now().Add(5 * time.Minute); ; {
		h.mu.Lock()
		settled, createErr := len(h.settled), h.createErr
		h.mu.Unlock()
		if createErr != nil {
			return nil, createErr
		}
		if settled == len(h.names) {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%d of the %d hostile actions settled within 5 minutes", settled, len(h.names))
		}
		if err := testenv.Sleep(ctx, 100*time.Millisecond); err != nil {
			return nil, err
		}
	}
	out := make([]hostileOutcome, 0, len(h.names))
	for _, name := range h.names {
		h.mu.Lock()
		outcome := h.settled[name]
		outcome.created = h.created[name]
		out = append(out, outcome)
		h.mu.Unlock()
		if outcome.reason == refusedAtAdmission {
			continue
		}
		action := &v1alpha1.ToolAction{ObjectMeta: metav1.ObjectMeta{Namespace: h.namespace, Name: name}}
		if err := h.c.Delete(ctx, action); err != nil && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("cannot delete hostile action %s: %w", name, err)
		}
	}
	return out, nil
}

// costlyView is section 9: the healthy tenant's latency beside each batch
// of hostile actions against alone.
type costlyView struct {
	Result                    *costlyResult
	Refused, Stored, InFlight hostileView
	// AsUsers and Fair are ÷ alone as users.
	AsUsers, Fair hostileView
	// Mark judges the run as shipped, beside the refused batch.
	Mark string
	// BareInFlight is the bare client's run beside the in-flight batch;
	// APIServerShare is the in-flight run's p99 ratio ÷ the bare client's,
	// which InFlightMark judges against inFlightTarget.
	BareInFlight   hostileView
	APIServerShare float64
	InFlightMark   string
}

// inFlightTarget bounds how much more than the API server's own clients a
// healthy tenant's p99 grows through toolledger while another tenant's
// large requests are decoded: the decoding is every client's wait (the API
// server decodes a request before admission, and API Priority and Fairness
// bounds seats, not CPU), so the target is set against the bare client's
// growth in the same run, not against the tenant alone.
const inFlightTarget = 1.2

// hostileView is one run beside hostile actions: P50Ratio and P99Ratio
// are beside ÷ alone.
type hostileView struct {
	Run                *hostileRun
	P50Ratio, P99Ratio float64
	Reasons            []keyCount
}

func costlyFigures(c *costlyResult, smoke bool) *costlyView {
	if c == nil {
		return nil
	}
	// view is run against the quiet run of the same identity.
	view := func(run *hostileRun, alone openLoopSummary) hostileView {
		return hostileView{Run: run, Reasons: sortedCounts(run.Reasons),
			P50Ratio: durRatio(run.Beside.P50, alone.P50), P99Ratio: durRatio(run.Beside.P99, alone.P99)}
	}
	v := &costlyView{Result: c, Refused: view(&c.Refused, c.Quiet), Stored: view(&c.Stored, c.Quiet), InFlight: view(&c.InFlight, c.Quiet),
		AsUsers: view(&c.AsUsers, c.QuietAsUsers), Fair: view(&c.Fair, c.QuietAsUsers), BareInFlight: view(&c.BareInFlight, c.BareQuiet)}
	v.APIServerShare = safeDiv(v.InFlight.P99Ratio, v.BareInFlight.P99Ratio)
	if !smoke {
		v.Mark = mark(v.Refused.P99Ratio <= 1.5 && c.Quiet.P99 > 0, false)
		v.InFlightMark = mark(v.APIServerShare > 0 && v.APIServerShare <= inFlightTarget, false)
	}
	return v
}
