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
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/testenv"
	"github.com/toolledger/toolledger/internal/testenv/specenv"
	"github.com/toolledger/toolledger/pkg/adapter"
)

// memoryAdapter is an adapter of the test's own: its effects are entries in
// a map, keyed by idempotency key. Tools whose name ends in
// "-without-lookup" get no lookup capability. A key in lose has its first
// attempt applied and its answer lost; a key in fail has its attempts
// answered ambiguously without being applied.
type memoryAdapter struct {
	mu       sync.Mutex
	lose     map[string]bool
	fail     map[string]bool
	effects  map[string]string
	executes map[string]int
	lookups  map[string]int
}

func newMemoryAdapter() *memoryAdapter {
	return &memoryAdapter{lose: map[string]bool{}, fail: map[string]bool{}, effects: map[string]string{},
		executes: map[string]int{}, lookups: map[string]int{}}
}

// Name is the adapter union's only member today; the test's manager has
// this adapter in its registry instead of the HTTP one. The controller code
// is the same either way: it knows adapters only by the registry.
func (m *memoryAdapter) Name() string { return v1alpha1.AdapterHTTP }

func (m *memoryAdapter) Capabilities(tool *v1alpha1.Tool) adapter.Capabilities {
	return adapter.Capabilities{Lookup: !strings.HasSuffix(tool.Name, "-without-lookup"), AttemptTimeout: 200 * time.Millisecond}
}

func (m *memoryAdapter) Validate(context.Context, *v1alpha1.Tool) error { return nil }

func (m *memoryAdapter) Connect(_ context.Context, tool *v1alpha1.Tool) (adapter.Connection, error) {
	return adapter.Connection{Executor: adapter.ExecutorFns{ExecuteFn: m.execute, LookupFn: m.lookup}, Capabilities: m.Capabilities(tool)}, nil
}

func (m *memoryAdapter) execute(_ context.Context, req adapter.Request) (adapter.Outcome, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	key := req.IdempotencyKey
	m.executes[key]++
	if m.fail[key] {
		return adapter.Outcome{}, &adapter.AmbiguousError{Reason: "MemoryLost", Err: errors.New("the answer was lost")}
	}
	if _, applied := m.effects[key]; !applied {
		m.effects[key] = fmt.Sprintf("mem-%d", len(m.effects)+1)
	}
	if m.lose[key] && m.executes[key] == 1 {
		return adapter.Outcome{}, &adapter.AmbiguousError{Reason: "MemoryLost", Err: errors.New("the answer was lost")}
	}
	return adapter.Outcome{ExternalRef: m.effects[key]}, nil
}

func (m *memoryAdapter) lookup(_ context.Context, req adapter.Request) (adapter.Outcome, error) {
	key := req.IdempotencyKey
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lookups[key]++
	if ref, applied := m.effects[key]; applied {
		return adapter.Outcome{ExternalRef: ref}, nil
	}
	return adapter.Outcome{}, adapter.ErrNotFound
}

// loseAnswer makes the first attempt of key apply and its answer be lost.
func (m *memoryAdapter) loseAnswer(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lose[key] = true
}

// failAttempts makes every attempt of key unanswered and unapplied.
func (m *memoryAdapter) failAttempts(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.fail[key] = true
}

func (m *memoryAdapter) counts(key string) (executes, lookups int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.executes[key], m.lookups[key]
}

var _ = Describe("An adapter registered by a test", func() {
	var (
		ctx    context.Context
		ns     string
		memory *memoryAdapter
	)

	BeforeEach(func() {
		ctx = context.Background()
		ns = env.NewTenant()
		memory = newMemoryAdapter()
		startManager("memory-executor", func(adapter.Adapter) adapter.Adapter { return memory })
	})

	// memoryTool is a tool the memory adapter serves; its URL is never called.
	memoryTool := func(name string, class v1alpha1.IdempotencyClass, opts ...testenv.ToolOption) {
		GinkgoHelper()
		opts = append([]testenv.ToolOption{testenv.WithClass(class), testenv.WithMaxAttempts(3),
			testenv.WithBackoff(100*time.Millisecond, time.Second)}, opts...)
		Expect(k8s.Create(ctx, testenv.NewTool(ns, name, "http://127.0.0.1:1/never-called", opts...))).To(Succeed())
	}
	invoke := func(tool, name string) string {
		GinkgoHelper()
		Expect(k8s.Create(ctx, &v1alpha1.ToolAction{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec:       v1alpha1.ToolActionSpec{ToolRef: v1alpha1.ToolReference{Name: tool}},
		})).To(Succeed())
		return v1alpha1.IdempotencyKey(ns, name)
	}
	settled := func(name string) *v1alpha1.ToolAction {
		GinkgoHelper()
		var a v1alpha1.ToolAction
		Eventually(func() bool {
			Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &a)).To(Succeed())
			return a.Status.Phase.IsSettled()
		}).Should(BeTrue())
		return &a
	}

	It("drives an action to Succeeded", func() {
		memoryTool("write", v1alpha1.KeyProtected)
		key := invoke("write", "w-1")
		a := settled("w-1")
		Expect(a.Status.Phase).To(Equal(v1alpha1.PhaseSucceeded))
		Expect(a.Status.ExternalRef).To(Equal("mem-1"))
		executes, lookups := memory.counts(key)
		Expect(executes).To(Equal(1))
		Expect(lookups).To(Equal(0))
	})

	It("settles a lost answer by its lookup: Unknown, then Succeeded with the first attempt's reference", func() {
		memoryTool("write", v1alpha1.Compensatable)
		memory.loseAnswer(v1alpha1.IdempotencyKey(ns, "w-2"))
		key := invoke("write", "w-2")
		a := settled("w-2")
		Expect(a.Status.Phase).To(Equal(v1alpha1.PhaseSucceeded))
		Expect(a.Status.ExternalRef).To(Equal("mem-1"))
		Expect(specenv.Reasons(a)).To(Equal([]string{"Executing", "OutcomeUnknown", "FoundByLookup"}))
		executes, lookups := memory.counts(key)
		Expect(executes).To(Equal(1), "the lookup settles it, nothing is re-sent")
		// A reconcile that reads the cache before it shows Succeeded may look
		// up once more: a read, and its write then loses to the newer version.
		Expect(lookups).To(BeNumerically(">=", 1))
	})

	DescribeTable("without a lookup, settles a lost answer by the tool's class",
		func(class v1alpha1.IdempotencyClass, phase v1alpha1.Phase, wantExecutes int) {
			memoryTool("write-without-lookup", class)
			name := "w-" + strings.ToLower(string(class))
			memory.loseAnswer(v1alpha1.IdempotencyKey(ns, name))
			key := invoke("write-without-lookup", name)
			a := settled(name)
			Expect(a.Status.Phase).To(Equal(phase))
			executes, lookups := memory.counts(key)
			Expect(executes).To(Equal(wantExecutes))
			Expect(lookups).To(Equal(0), "an adapter without the capability is never asked to look up")
		},
		Entry("KeyProtected: re-sent under the same key", v1alpha1.KeyProtected, v1alpha1.PhaseSucceeded, 2),
		Entry("Compensatable: escalated", v1alpha1.Compensatable, v1alpha1.PhaseEscalated, 1),
		Entry("NonRepeatable: escalated", v1alpha1.NonRepeatable, v1alpha1.PhaseEscalated, 1),
	)

	It("never fails an action whose last attempt went unseen when a lookup finds it absent: it looks again until the deadline, then escalates, reported like every outcome", func() {
		memoryTool("write", v1alpha1.KeyProtected, testenv.WithMaxAttempts(1), testenv.WithUnknownOutcomeDeadline(2*time.Second))
		memory.failAttempts(v1alpha1.IdempotencyKey(ns, "w-3"))
		escalated := func() float64 {
			return counted("toolledger_escalations_total", map[string]string{"reason": "OutcomeUnknown"})
		}
		before := escalated()
		key := invoke("write", "w-3")
		a := settled("w-3")
		Expect(a.Status.Phase).To(Equal(v1alpha1.PhaseEscalated))
		Expect(a.Status.Error.Class).To(Equal(v1alpha1.ErrorClassOutcomeUnknown))
		Expect(a.Status.Error.Message).To(And(HavePrefix("no lookup proved the outcome of attempt 1 within the tool's deadline of 2s"), ContainSubstring(adapter.ErrNotFound.Error())))
		executes, lookups := memory.counts(key)
		Expect(executes).To(Equal(1))
		Expect(lookups).To(BeNumerically(">=", 2), "absent, with every attempt spent, is looked up again")

		Eventually(func() []string {
			var list eventsv1.EventList
			Expect(k8s.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
			var found []string
			for _, e := range list.Items {
				if e.Regarding.Name == "w-3" {
					found = append(found, e.Type+"/"+e.Reason)
				}
			}
			return found
		}).Should(ContainElement("Warning/Escalated"))
		Expect(escalated() - before).To(Equal(1.0))
	})

	It("schedules what follows an action a ToolResolution finished: its retention, long before the sweep", func() {
		memoryTool("write-without-lookup", v1alpha1.NonRepeatable, testenv.WithKeyRetention(2*time.Second))
		memory.loseAnswer(v1alpha1.IdempotencyKey(ns, "w-4"))
		invoke("write-without-lookup", "w-4")
		Expect(settled("w-4").Status.Phase).To(Equal(v1alpha1.PhaseEscalated))

		resolution := &v1alpha1.ToolResolution{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "w-4-checked"},
			Spec: v1alpha1.ToolResolutionSpec{ActionName: "w-4", Attempt: 1, Outcome: v1alpha1.ResolvedSucceeded,
				ExternalRef: "mem-1", Reason: "found in the store"},
		}
		Expect(k8s.Create(ctx, resolution)).To(Succeed())
		// The sweep runs once a minute; the record must go with its 2s retention.
		Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "w-4"}, &v1alpha1.ToolAction{}))
		}, 15*time.Second).Should(BeTrue())
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(resolution), resolution)).To(Succeed())
		Expect(resolution.Status.Conditions).To(ContainElement(And(
			HaveField("Type", v1alpha1.ConditionApplied), HaveField("Status", metav1.ConditionTrue))))
	})
})

// counted sums the counter name over its series with the labels.
func counted(name string, labels map[string]string) float64 {
	families, err := metrics.Registry.Gather()
	Expect(err).NotTo(HaveOccurred())
	total := 0.0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			matches := 0
			for _, l := range m.GetLabel() {
				if want, ok := labels[l.GetName()]; ok && want == l.GetValue() {
					matches++
				}
			}
			if matches == len(labels) {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}
