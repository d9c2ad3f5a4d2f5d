package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/cmd/manager/app"
	"github.com/toolledger/toolledger/internal/demo"
	"github.com/toolledger/toolledger/internal/shard"
	"github.com/toolledger/toolledger/internal/testenv"
	"github.com/toolledger/toolledger/internal/testenv/specenv"
	"github.com/toolledger/toolledger/pkg/adapter"
)

var _ = Describe("Several executors", func() {
	ctx := context.Background()
	var ns string
	BeforeEach(func() {
		ns = env.NewTenant()
		createTool(ns)
	})

	// runThreeManagers creates 300 actions for three managers started with
	// opts, checks each was dispatched exactly once, and returns the
	// compare-and-set conflicts by step and the dispatches by executor.
	runThreeManagers := func(opts app.Options) (conflicts map[string]float64, executors map[string]int) {
		conflictsBefore := claimConflicts()
		for i := range 3 {
			opts.ExecutorID = fmt.Sprintf("executor-%d", i)
			startManagerWith(opts, nil)
		}
		if !opts.NoSharding {
			waitForMembers(3, opts.MemberLeaseDuration)
		}

		const actions, creators = 300, 30
		var wg sync.WaitGroup
		errs := make(chan error, actions)
		for c := range creators {
			wg.Add(1)
			go func() {
				defer GinkgoRecover()
				defer wg.Done()
				for i := c; i < actions; i += creators {
					errs <- k8s.Create(ctx, action(ns, fmt.Sprintf("order-%03d", i), i+1))
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			Expect(err).NotTo(HaveOccurred())
		}

		Eventually(func(g Gomega) {
			var list v1alpha1.ToolActionList
			g.Expect(k8s.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
			g.Expect(list.Items).To(HaveLen(actions))
			for _, a := range list.Items {
				g.Expect(a.Status.Phase).To(Equal(v1alpha1.PhaseSucceeded), "action %s", a.Name)
			}
		}, 3*time.Minute, time.Second).Should(Succeed())

		executors = map[string]int{}
		var list v1alpha1.ToolActionList
		Expect(k8s.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
		for _, a := range list.Items {
			key := ns + "/" + a.Name
			Expect(downstream.Requests(key)).To(Equal(1), "requests for %s", key)
			Expect(downstream.Effects(key)).To(Equal(1), "effects for %s", key)
			// Under load an executor may find its claim's lease too short to
			// send in, and schedule the attempt unsent (LeaseSpentBeforeSend):
			// every attempt but one went unsent.
			Expect(a.Status.Attempts-unsentAttempts(&a)).To(Equal(int32(1)), "attempts of %s: %v", key, a.Status.History)
			executors[a.Status.Claim.Executor]++
		}
		conflicts = claimConflicts()
		for step := range conflicts {
			conflicts[step] -= conflictsBefore[step]
		}
		AddReportEntry("compare-and-set conflicts (each a write that lost, dispatching nothing)", fmt.Sprint(conflicts))
		AddReportEntry("actions dispatched per executor", fmt.Sprint(executors))
		GinkgoWriter.Printf("conflicts by step: %v; dispatches by executor: %v\n", conflicts, executors)
		return conflicts, executors
	}

	It("dispatch every one of 300 actions exactly once with 3 unsharded managers racing for each", func() {
		conflicts, _ := runThreeManagers(app.Options{LeaseGrace: time.Second, NoSharding: true})
		Expect(conflicts["finalizer"]+conflicts["claim"]).To(BeNumerically(">", 0), "three managers raced for the same actions")
	})

	It("split 300 actions among 3 sharded managers, each dispatched once by its owner, without racing", func() {
		// 15s Leases, renewed every 5s: a renewal late on a loaded machine
		// must not make the members flap.
		conflicts, executors := runThreeManagers(app.Options{LeaseGrace: time.Second, MemberLeaseDuration: 15 * time.Second})
		Expect(executors).To(HaveLen(3), "every manager dispatched its share")
		for executor, n := range executors {
			// 100 each on average; rendezvous hashing of 300 keys stays within 60–140.
			Expect(n).To(BeNumerically(">=", 60), "share of %s", executor)
		}
		Expect(conflicts["finalizer"]+conflicts["claim"]).To(BeZero(), "managers that agree on the members never race")
	})

	It("hand a dead manager's share to the live one when its member Lease lapses", func() {
		startManager("executor-b", nil)
		waitForMembers(1, 3*time.Second)
		// A member that renewed its Lease once and died: about half the keys are its.
		renewed := metav1.NewMicroTime(time.Now())
		ghost := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: app.DefaultNamespace(), Name: "toolledger-member-ghost", Labels: map[string]string{shard.MemberLabel: "true"}},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("ghost"), LeaseDurationSeconds: ptr.To(int32(8)), RenewTime: &renewed},
		}
		Expect(k8s.Create(ctx, ghost)).To(Succeed())
		DeferCleanup(func() { _ = k8s.Delete(context.Background(), ghost) })
		waitForMembers(2, 3*time.Second)
		lapsed := renewed.Add(8 * time.Second)
		for i := range 40 {
			Expect(k8s.Create(ctx, action(ns, fmt.Sprintf("shared-%02d", i), i+1))).To(Succeed())
		}
		owned := map[string]int{}
		for i := range 40 {
			name := fmt.Sprintf("shared-%02d", i)
			done := env.WaitForPhase(ns, name, v1alpha1.PhaseSucceeded)
			Expect(done.Status.Claim.Executor).To(Equal("executor-b"))
			// History times are kept to the second.
			first := done.Status.History[0].Time.Time
			owner := shard.Owner([]string{"executor-b", "ghost"}, client.ObjectKey{Namespace: ns, Name: name})
			owned[owner]++
			if owner == "ghost" {
				Expect(first).NotTo(BeTemporally("<", lapsed.Add(-time.Second)), "%s, the ghost's, was handled before its Lease lapsed", name)
			} else {
				Expect(first).To(BeTemporally("<", lapsed.Add(-2*time.Second)), "%s, executor-b's own, waited for the ghost's Lease", name)
			}
		}
		Expect(owned).To(HaveLen(2), "keys of both members among the 40: %v", owned)
	})

	It("lets the next manager settle an attempt whose executor stopped after the claim, before the request left", func() {
		hold := newHold(ns+"/order-claimed", false)
		stopA := startManager("executor-a", hold.wrap)
		Expect(k8s.Create(ctx, action(ns, "order-claimed", 4100))).To(Succeed())
		Eventually(hold.reached).Should(BeClosed())
		claimed := env.Get(ns, "order-claimed")
		Expect(claimed.Status.Phase).To(Equal(v1alpha1.PhaseExecuting))
		Expect(claimed.Status.Claim.Executor).To(Equal("executor-a"))
		stopA()

		startManager("executor-b", nil)
		done := env.WaitForPhase(ns, "order-claimed", v1alpha1.PhaseSucceeded)
		hold.release()
		key := ns + "/order-claimed"
		Expect(downstream.Requests(key)).To(Equal(1), "one dispatch in total")
		Expect(downstream.Effects(key)).To(Equal(1))
		Expect(transitions(done)).To(Equal([]string{
			"Executing/Executing@executor-a", "Unknown/OutcomeUnknown@executor-b",
			"Executing/AbsentByLookup@executor-b", "Succeeded/Succeeded@executor-b",
		}))
		Expect(done.Status.History[1].Message).To(ContainSubstring("executor executor-a's claim on attempt 1 lapsed"))
	})

	It("lets the next manager find, by lookup, a request its stopped executor left held downstream", func() {
		downstream.InjectFault(demo.Fault{Mode: demo.FaultDelay, Delay: 3 * time.Second, Count: 1})
		hold := newHold(ns+"/order-held", true)
		stopA := startManager("executor-a", hold.wrap)
		Expect(k8s.Create(ctx, action(ns, "order-held", 4200))).To(Succeed())
		Eventually(hold.reached).Should(BeClosed())
		stopA()

		startManager("executor-b", nil)
		done := env.WaitForPhase(ns, "order-held", v1alpha1.PhaseSucceeded)
		hold.release()
		key := ns + "/order-held"
		charged, ok := downstream.Charge(key)
		Expect(ok).To(BeTrue())
		Expect(done.Status.ExternalRef).To(Equal(charged.ID))
		Expect(transitions(done)).To(Equal([]string{
			"Executing/Executing@executor-a", "Unknown/OutcomeUnknown@executor-b", "Succeeded/FoundByLookup@executor-b",
		}))
		Expect(downstream.Requests(key)).To(Equal(1))
		Expect(downstream.Effects(key)).To(Equal(1))
	})
})

var _ = Describe("The ledger's store", func() {
	It("loses and doubles nothing when etcd restarts mid-flight", func() {
		ctx := context.Background()
		ns := env.NewTenant()
		createTool(ns)
		// Hold the first requests downstream so that the restart finds them in flight.
		downstream.InjectFault(demo.Fault{Mode: demo.FaultDelay, Delay: 1500 * time.Millisecond, Count: 10})
		startManager("executor-a", nil)
		startManager("executor-b", nil)

		const actions = 40
		for i := range actions {
			Expect(k8s.Create(ctx, action(ns, fmt.Sprintf("order-%02d", i), i+1))).To(Succeed())
		}
		Eventually(func() int { return downstream.TotalRequests() }).Should(BeNumerically(">", 0))

		etcd := env.Env.ControlPlane.Etcd
		Expect(etcd.Stop()).To(Succeed())
		time.Sleep(3 * time.Second)
		Expect(etcd.Start()).To(Succeed())

		Eventually(func(g Gomega) {
			var list v1alpha1.ToolActionList
			g.Expect(k8s.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
			g.Expect(list.Items).To(HaveLen(actions), "nothing lost")
			for _, a := range list.Items {
				g.Expect(a.Status.Phase).To(Equal(v1alpha1.PhaseSucceeded), "action %s: %+v", a.Name, a.Status.History)
			}
		}, 3*time.Minute, time.Second).Should(Succeed())

		var list v1alpha1.ToolActionList
		Expect(k8s.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
		paths := map[string]int{}
		for _, a := range list.Items {
			key := ns + "/" + a.Name
			charged, ok := downstream.Charge(key)
			Expect(ok).To(BeTrue())
			Expect(downstream.Effects(key)).To(Equal(1), "effects for %s", key)
			Expect(a.Status.ExternalRef).To(Equal(charged.ID), "the record names the one effect of %s", key)
			Expect(downstream.Requests(key)).To(BeNumerically("<=", int(a.Status.Attempts)), "no request outside a claimed attempt for %s", key)
			paths[strings.Join(specenv.Reasons(&a), " > ")]++
		}
		AddReportEntry("paths taken through the restart", fmt.Sprint(paths))
	})
})

// hold stops one dispatch, as if its executor died: before the request
// leaves, or (send) after it left but before the answer is recorded.
type hold struct {
	key      string
	send     bool
	reached  chan struct{}
	released chan struct{}
	once     sync.Once
}

func newHold(key string, send bool) *hold {
	return &hold{key: key, send: send, reached: make(chan struct{}), released: make(chan struct{})}
}

func (h *hold) release() { close(h.released) }

func (h *hold) wrap(inner adapter.Adapter) adapter.Adapter {
	return adapter.Wrap(inner, func(_ *v1alpha1.Tool, executor adapter.Executor) adapter.Executor {
		return adapter.ExecutorFns{
			ExecuteFn: func(ctx context.Context, req adapter.Request) (adapter.Outcome, error) {
				if req.IdempotencyKey != h.key {
					return executor.Execute(ctx, req)
				}
				if h.send {
					// The answer is lost with the executor.
					go func() { _, _ = executor.Execute(context.Background(), req) }()
				}
				h.once.Do(func() { close(h.reached) })
				<-h.released
				return adapter.Outcome{}, &adapter.RetryableError{Reason: "ExecutorGone", Err: errors.New("the executor stopped")}
			},
			LookupFn: executor.Lookup,
		}
	})
}

// createTool creates the Compensatable payments tool "charge" on the
// suite's downstream, with a lookup by key and a one-second timeout.
func createTool(namespace string) {
	GinkgoHelper()
	env.CreateTool(namespace, "charge", testenv.WithClass(v1alpha1.Compensatable), testenv.WithTimeout(time.Second),
		testenv.WithKeyLookup(), testenv.WithBackoff(200*time.Millisecond, 2*time.Second))
}

func action(namespace, name string, amount int) *v1alpha1.ToolAction {
	return &v1alpha1.ToolAction{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: v1alpha1.ToolActionSpec{
			ToolRef: v1alpha1.ToolReference{Name: "charge"},
			Parameters: map[string]apiextensionsv1.JSON{
				"amount":   {Raw: []byte(fmt.Sprint(amount))},
				"currency": {Raw: []byte(`"EUR"`)},
			},
		},
	}
}

// transitions summarises the history as "to/reason@executor" entries.
func transitions(a *v1alpha1.ToolAction) []string {
	out := make([]string, 0, len(a.Status.History))
	for _, t := range a.Status.History {
		out = append(out, fmt.Sprintf("%s/%s@%s", t.To, t.Reason, t.Executor))
	}
	return out
}

// waitForMembers waits until n member Leases were renewed within their
// duration, then for every manager to list them (a renewal period, a third
// of duration, and some room).
func waitForMembers(n int, duration time.Duration) {
	GinkgoHelper()
	Eventually(func() (int, error) { return testenv.LiveMembers(context.Background(), k8s, duration) }).Should(Equal(n))
	time.Sleep(duration/3 + 500*time.Millisecond)
}

// claimConflicts reads toolledger_claim_conflicts_total by step from the
// process's metrics registry, which all in-process managers share.
func claimConflicts() map[string]float64 {
	families, err := metrics.Registry.Gather()
	Expect(err).NotTo(HaveOccurred())
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "toolledger_claim_conflicts_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "step" {
					out[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// unsentAttempts counts the attempts an executor claimed and did not send,
// its lease too short to send in.
func unsentAttempts(a *v1alpha1.ToolAction) int32 {
	var n int32
	for _, t := range a.Status.History {
		if t.To == v1alpha1.PhaseRetryScheduled && strings.Contains(t.Message, "(LeaseSpentBeforeSend)") {
			n++
		}
	}
	return n
}
