package sdk_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/demo"
	"github.com/toolledger/toolledger/internal/testenv"
	"github.com/toolledger/toolledger/pkg/sdk"
)

var _ = Describe("Invoke", func() {
	var (
		ctx     context.Context
		ns      string
		invoker *sdk.Client
	)

	BeforeEach(func() {
		ctx, ns = newSpec()
		var err error
		invoker, err = sdk.NewClient(cfg)
		Expect(err).NotTo(HaveOccurred())
	})

	charge := func(key string, amount any) sdk.Request {
		return sdk.Request{
			Namespace:  ns,
			Key:        key,
			Tool:       "charge",
			Parameters: map[string]any{"amount": amount, "currency": "EUR"},
		}
	}

	It("records one intent and causes one effect when 64 callers invoke it at once", func() {
		const callers = 64
		req := charge(sdk.WorkflowKey("run-1", "step-1", "payments.charge", "v1"), 1000)
		outcomes := make([]*sdk.Outcome, callers)
		errs := make([]error, callers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range callers {
			wg.Go(func() {
				<-start
				outcomes[i], errs[i] = invoker.Invoke(ctx, req)
			})
		}
		close(start)
		wg.Wait()

		key := ns + "/" + req.Key
		charged, ok := downstream.Charge(key)
		Expect(ok).To(BeTrue())
		deduplicated := 0
		for i := range callers {
			Expect(errs[i]).NotTo(HaveOccurred(), "caller %d", i)
			Expect(outcomes[i].Phase).To(Equal(v1alpha1.PhaseSucceeded), "caller %d", i)
			Expect(outcomes[i].ExternalRef).To(Equal(charged.ID), "caller %d", i)
			Expect(outcomes[i].CreatedAt).To(Equal(outcomes[0].CreatedAt), "caller %d", i)
			Expect(outcomes[i].Attempts).To(Equal(int32(1)), "caller %d", i)
			if outcomes[i].Deduplicated {
				deduplicated++
			}
		}
		Expect(deduplicated).To(Equal(callers-1), "exactly one caller created the record")
		Expect(outcomes[0].CreatedAt.IsZero()).To(BeFalse())

		var list v1alpha1.ToolActionList
		Expect(k8s.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
		Expect(list.Items).To(HaveLen(1))
		Expect(downstream.Requests(key)).To(Equal(1))
		Expect(downstream.Effects(key)).To(Equal(1))
		AddReportEntry("64 concurrent invocations", fmt.Sprintf("1 ToolAction, %d deduplicated, downstream requests %d, effects %d",
			deduplicated, downstream.Requests(key), downstream.Effects(key)))
	})

	It("refuses the same key with a different amount as a DuplicateConflictError and executes nothing", func() {
		req := charge("order-1001-charge", 1000)
		first, err := invoker.Invoke(ctx, req)
		Expect(err).NotTo(HaveOccurred())
		Expect(first.Phase).To(Equal(v1alpha1.PhaseSucceeded))
		key := ns + "/" + req.Key
		before := env.Get(ns, req.Key)

		outcome, err := invoker.Invoke(ctx, charge(req.Key, 5000))
		Expect(outcome).To(BeNil())
		var conflict *sdk.DuplicateConflictError
		Expect(errors.As(err, &conflict)).To(BeTrue(), "error %v", err)
		Expect(conflict.Namespace).To(Equal(ns))
		Expect(conflict.Key).To(Equal(req.Key))
		Expect(errors.Is(err, sdk.ErrDuplicateConflict)).To(BeTrue())
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "the API server's 422 stays reachable")
		Expect(err.Error()).To(ContainSubstring("spec is immutable: this idempotency key (metadata.name) already records a different request"))

		after := env.Get(ns, req.Key)
		Expect(after.ResourceVersion).To(Equal(before.ResourceVersion), "nothing written")
		Expect(string(after.Spec.Parameters["amount"].Raw)).To(Equal("1000"))
		Expect(downstream.Requests(key)).To(Equal(1))
		Expect(downstream.Effects(key)).To(Equal(1))
	})

	It("accepts the same values however they are typed or spelled, without a write", func() {
		req := charge("order-1002-charge", 1000)
		first, err := invoker.Invoke(ctx, req)
		Expect(err).NotTo(HaveOccurred())
		Expect(first.Deduplicated).To(BeFalse())
		before := env.Get(ns, req.Key)

		for _, amount := range []any{1000, 1000.0, int64(1000), uint16(1000), json.Number("1e3"), json.RawMessage(`1000.000`)} {
			outcome, err := invoker.Invoke(ctx, charge(req.Key, amount))
			Expect(err).NotTo(HaveOccurred(), "amount %#v", amount)
			Expect(outcome.Deduplicated).To(BeTrue(), "amount %#v", amount)
			Expect(outcome.ExternalRef).To(Equal(first.ExternalRef))
		}
		Expect(env.Get(ns, req.Key).ResourceVersion).To(Equal(before.ResourceVersion))
		Expect(downstream.Effects(ns + "/" + req.Key)).To(Equal(1))
	})

	It("answers a duplicate of a settled action with one request and no write", func() {
		counted, counter := countingClient()
		req := charge("order-1003-charge", 1000)
		first, err := counted.Invoke(ctx, req)
		Expect(err).NotTo(HaveOccurred())
		Expect(first.Phase).To(Equal(v1alpha1.PhaseSucceeded))
		created := counter.Requests()
		Expect(created).To(Equal([]string{
			"PATCH /apis/toolledger.dev/v1alpha1/namespaces/" + ns + "/toolactions/order-1003-charge",
			"GET /apis/toolledger.dev/v1alpha1/namespaces/" + ns + "/toolactions?watch",
		}))
		before := env.Get(ns, req.Key)

		duplicate, err := counted.Invoke(ctx, req)
		Expect(err).NotTo(HaveOccurred())
		repeated := counter.Requests()
		after := env.Get(ns, req.Key)
		Expect(repeated).To(Equal(created[:1]), "the apply alone")
		Expect(after.ResourceVersion).To(Equal(before.ResourceVersion), "no etcd write")
		Expect(duplicate.Deduplicated).To(BeTrue())
		Expect(duplicate.Phase).To(Equal(v1alpha1.PhaseSucceeded))
		Expect(duplicate.ExternalRef).To(Equal(first.ExternalRef))
		Expect(duplicate.CreatedAt).To(Equal(first.CreatedAt))
		Expect(duplicate.RequestDigest).To(HavePrefix("sha256:"))
		Expect(duplicate.Result).To(MatchJSON(`{"amount":1000,"currency":"EUR","status":"succeeded"}`))
		Expect(downstream.Requests(ns + "/" + req.Key)).To(Equal(1))

		AddReportEntry("API requests of a first invocation", fmt.Sprintf("%d: %v", len(created), created))
		AddReportEntry("API requests of a duplicate invocation of a Succeeded action", fmt.Sprintf("%d: %v", len(repeated), repeated))
		AddReportEntry("etcd writes of that duplicate", fmt.Sprintf("0 (resourceVersion %s before and %s after)", before.ResourceVersion, after.ResourceVersion))
	})

	It("shares one watch among the invocations of a client: while one waits, another costs its apply alone", func() {
		counted, counter := countingClient()
		downstream.InjectFault(demo.Fault{Mode: demo.FaultDelay, Delay: 3 * time.Second})
		slow := make(chan error, 1)
		go func() {
			defer GinkgoRecover()
			outcome, err := counted.Invoke(ctx, charge("order-1010-charge", 1000))
			if err == nil && outcome.Phase != v1alpha1.PhaseSucceeded {
				err = fmt.Errorf("settled as %s", outcome.Phase)
			}
			slow <- err
		}()
		Eventually(func(g Gomega) {
			var first v1alpha1.ToolAction
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "order-1010-charge"}, &first)).To(Succeed())
			g.Expect(first.Status.Phase).To(Equal(v1alpha1.PhaseExecuting))
		}).Should(Succeed())
		opened := counter.Requests()
		Expect(opened).To(Equal([]string{
			"PATCH /apis/toolledger.dev/v1alpha1/namespaces/" + ns + "/toolactions/order-1010-charge",
			"GET /apis/toolledger.dev/v1alpha1/namespaces/" + ns + "/toolactions?watch",
		}))

		for _, key := range []string{"order-1011-charge", "order-1012-charge", "order-1013-charge"} {
			outcome, err := counted.Invoke(ctx, charge(key, 1000))
			Expect(err).NotTo(HaveOccurred())
			Expect(outcome.Phase).To(Equal(v1alpha1.PhaseSucceeded))
			Expect(downstream.Effects(ns + "/" + key)).To(Equal(1))
			Expect(counter.Requests()).To(Equal([]string{
				"PATCH /apis/toolledger.dev/v1alpha1/namespaces/" + ns + "/toolactions/" + key,
			}), "the apply alone, while the first invocation waits in the namespace's watch")
		}
		Eventually(slow, 10*time.Second).Should(Receive(BeNil()))
		Expect(downstream.Effects(ns + "/order-1010-charge")).To(Equal(1))
		Expect(counter.Requests()).To(BeEmpty())

		// The watch outlives the last invocation a moment, for the next one.
		outcome, err := counted.Invoke(ctx, charge("order-1014-charge", 1000))
		Expect(err).NotTo(HaveOccurred())
		Expect(outcome.Phase).To(Equal(v1alpha1.PhaseSucceeded))
		Expect(counter.Requests()).To(Equal([]string{
			"PATCH /apis/toolledger.dev/v1alpha1/namespaces/" + ns + "/toolactions/order-1014-charge",
		}), "the apply alone, right after the last invocation returned")
		Expect(counter.MaxInFlight()).To(Equal(2), "one watch, open while the other invocations applied")
	})

	It("costs three writes from invocation to success: create, claim, outcome", func() {
		before := toolActionWrites()
		out, err := invoker.Invoke(ctx, charge("order-1004-charge", 1000))
		Expect(err).NotTo(HaveOccurred())
		Expect(out.Phase).To(Equal(v1alpha1.PhaseSucceeded))
		Expect(env.Get(ns, "order-1004-charge").Finalizers).To(Equal([]string{v1alpha1.Finalizer}), "protected from the start")
		writes := toolActionWrites() - before
		AddReportEntry("write requests on toolactions for one invocation (the API server's apiserver_request_total)", writes)
		Expect(writes).To(Equal(3))
	})

	It("costs one write, still deduplicated, when another field manager applies the same request; refuses its different values", func() {
		req := charge("order-1004-charge", 1000)
		first, err := invoker.Invoke(ctx, req)
		Expect(err).NotTo(HaveOccurred())
		before := env.Get(ns, req.Key)

		other, err := sdk.NewClient(cfg, sdk.WithFieldManager("other-agent"))
		Expect(err).NotTo(HaveOccurred())
		outcome, err := other.Invoke(ctx, req)
		Expect(err).NotTo(HaveOccurred())
		Expect(outcome.Deduplicated).To(BeTrue())
		Expect(outcome.ExternalRef).To(Equal(first.ExternalRef))
		after := env.Get(ns, req.Key)
		Expect(after.ResourceVersion).NotTo(Equal(before.ResourceVersion), "the co-ownership is recorded")
		managers := []string{}
		for _, entry := range after.ManagedFields {
			if entry.Operation == metav1.ManagedFieldsOperationApply {
				managers = append(managers, entry.Manager)
			}
		}
		Expect(managers).To(ConsistOf(sdk.DefaultFieldManager, "other-agent"))

		// Ownership is checked before the immutability rule: another
		// manager's different value is refused with 409, still a conflict.
		_, err = other.Invoke(ctx, charge(req.Key, 5000))
		Expect(err).To(MatchError(sdk.ErrDuplicateConflict))
		Expect(apierrors.IsConflict(err)).To(BeTrue(), "error %v", err)

		// The documented limit: a manager that omits a field another one
		// recorded leaves it in place, so the apply changes nothing.
		partial, err := sdk.NewClient(cfg, sdk.WithFieldManager("partial-agent"))
		Expect(err).NotTo(HaveOccurred())
		outcome, err = partial.Invoke(ctx, sdk.Request{Namespace: ns, Key: req.Key, Tool: "charge", Parameters: map[string]any{"amount": 1000}})
		Expect(err).NotTo(HaveOccurred())
		Expect(outcome.Deduplicated).To(BeTrue())
		Expect(string(env.Get(ns, req.Key).Spec.Parameters["currency"].Raw)).To(Equal(`"EUR"`))
		Expect(downstream.Requests(ns + "/" + req.Key)).To(Equal(1))
		Expect(downstream.Effects(ns + "/" + req.Key)).To(Equal(1))
	})

	It("returns Escalated as a state, not an error, and a deletion while waiting as ErrDeleted", func() {
		createTool(ns, "charge-once", v1alpha1.NonRepeatable)
		downstream.InjectFault(demo.Fault{Mode: demo.FaultDropAfterCommit})
		req := sdk.Request{Namespace: ns, Key: "order-1005-charge", Tool: "charge-once", Parameters: map[string]any{"amount": 1000, "currency": "EUR"}}

		outcome, err := invoker.Invoke(ctx, req)
		Expect(err).NotTo(HaveOccurred())
		Expect(outcome.Phase).To(Equal(v1alpha1.PhaseEscalated))
		Expect(outcome.ErrorClass).To(Equal(v1alpha1.ErrorClassOutcomeUnknown))
		Expect(outcome.Message).To(ContainSubstring("NonRepeatable"))
		Expect(outcome.Deduplicated).To(BeFalse())
		key := ns + "/" + req.Key
		Expect(downstream.Requests(key)).To(Equal(1))
		Expect(downstream.Effects(key)).To(Equal(1), "the charge happened; only the answer was lost")

		counted, counter := countingClient()
		again, err := counted.Invoke(ctx, req)
		Expect(err).NotTo(HaveOccurred())
		Expect(again.Phase).To(Equal(v1alpha1.PhaseEscalated))
		Expect(again.Deduplicated).To(BeTrue())
		Expect(counter.Requests()).To(HaveLen(1), "an escalated action is not waited for")
		Expect(downstream.Requests(key)).To(Equal(1))

		// A compensation of an escalated charge waits for it; deleting the
		// waiting compensation ends the wait with ErrDeleted.
		type result struct {
			outcome *sdk.Outcome
			err     error
		}
		results := make(chan result, 1)
		go func() {
			refund := sdk.Request{Namespace: ns, Key: "order-1005-refund", Tool: "charge", Compensates: req.Key,
				Parameters: map[string]any{"amount": 1000, "currency": "EUR"}}
			o, err := invoker.Invoke(ctx, refund)
			results <- result{o, err}
		}()
		var refund v1alpha1.ToolAction
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "order-1005-refund"}, &refund)).To(Succeed())
			g.Expect(refund.Status.Phase).To(Equal(v1alpha1.PhaseAccepted))
			reconciling := meta.FindStatusCondition(refund.Status.Conditions, v1alpha1.ConditionReconciling)
			g.Expect(reconciling).NotTo(BeNil())
			g.Expect(reconciling.Reason).To(Equal("CompensationTargetPending"))
		}).Should(Succeed())
		Expect(k8s.Delete(ctx, &refund)).To(Succeed())
		var deleted result
		Eventually(results).Should(Receive(&deleted))
		Expect(deleted.err).To(MatchError(sdk.ErrDeleted))
		Expect(deleted.outcome.Phase).To(Equal(v1alpha1.PhaseAccepted))
		Expect(downstream.Requests(ns + "/order-1005-refund")).To(Equal(0))
	})

	It("returns the last outcome with the context's error when the caller stops waiting", func() {
		downstream.InjectFault(demo.Fault{Mode: demo.FaultDelay, Delay: 2 * time.Second})
		req := charge("order-1006-charge", 1000)
		short, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()

		outcome, err := invoker.Invoke(short, req)
		Expect(err).To(MatchError(context.DeadlineExceeded))
		Expect(outcome).NotTo(BeNil())
		Expect(outcome.Key).To(Equal(req.Key))
		Expect(outcome.Phase).To(Equal(v1alpha1.PhaseExecuting), "the claim was seen; the downstream still holds the request")
		Expect(outcome.Deduplicated).To(BeFalse())
		Expect(outcome.CreatedAt.IsZero()).To(BeFalse())

		// The intent goes on; the same request later reports how it ended.
		Eventually(func(g Gomega) {
			g.Expect(env.Get(ns, req.Key).Status.Phase).To(Equal(v1alpha1.PhaseSucceeded))
		}).Should(Succeed())
		later, err := invoker.Invoke(ctx, req)
		Expect(err).NotTo(HaveOccurred())
		Expect(later.Phase).To(Equal(v1alpha1.PhaseSucceeded))
		Expect(later.Deduplicated).To(BeTrue())
		Expect(later.CreatedAt).To(Equal(outcome.CreatedAt))
		Expect(downstream.Effects(ns + "/" + req.Key)).To(Equal(1))
	})

	It("passes provenance downstream unchanged, and a delegate invokes the caller's intent, not a new one", func() {
		req := charge(sdk.WorkflowKey("run-7", "step-2", "payments.charge", "v1"), 2500)
		req.Provenance = &v1alpha1.Provenance{
			RunID:        "run-7",
			StepID:       "step-2",
			ParentTaskID: "task-9",
			TraceID:      "4bf92f3577b34da6a3ce929d0e0e4736",
			Principals:   []string{"user:alice", "agent:planner", "agent:payments"},
		}
		outcome, err := invoker.Invoke(ctx, req)
		Expect(err).NotTo(HaveOccurred())
		Expect(outcome.Phase).To(Equal(v1alpha1.PhaseSucceeded))
		key := ns + "/" + req.Key
		Expect(downstream.ProvenanceHeaders(key)).To(Equal(http.Header{
			"Toolledger-Run-Id":         {"run-7"},
			"Toolledger-Step-Id":        {"step-2"},
			"Toolledger-Parent-Task-Id": {"task-9"},
			"Toolledger-Trace-Id":       {"4bf92f3577b34da6a3ce929d0e0e4736"},
			"Toolledger-Principals":     {"user:alice, agent:planner, agent:payments"},
		}))
		Expect(env.Get(ns, req.Key).Spec.Provenance).To(Equal(req.Provenance))

		// The request travels to a sub-agent as JSON; the delegate invokes it as it is.
		wire, err := json.Marshal(req)
		Expect(err).NotTo(HaveOccurred())
		var received sdk.Request
		Expect(json.Unmarshal(wire, &received)).To(Succeed())
		delegated, err := invoker.Invoke(ctx, sdk.Delegate(received))
		Expect(err).NotTo(HaveOccurred())
		Expect(delegated.Deduplicated).To(BeTrue())
		Expect(delegated.ExternalRef).To(Equal(outcome.ExternalRef))

		// A delegate that adds itself to the chain asks for a different request.
		changed := sdk.Delegate(received)
		changed.Provenance.Principals = append(changed.Provenance.Principals, "agent:sub")
		_, err = invoker.Invoke(ctx, changed)
		Expect(err).To(MatchError(sdk.ErrDuplicateConflict))
		Expect(received.Provenance.Principals).To(HaveLen(3), "Delegate copied the provenance")
		Expect(downstream.Requests(key)).To(Equal(1))
		Expect(downstream.Effects(key)).To(Equal(1))
	})
})

var _ = Describe("InvokeBatch", func() {
	var (
		ctx context.Context
		ns  string
	)

	BeforeEach(func() {
		ctx, ns = newSpec()
	})

	It("invokes every item once under its own key, and a re-run repeats nothing", func() {
		ids := []string{"line-1", "line-2", "Gift Card", "SKU 7/blue", "sku-7-blue"}
		batch := sdk.BatchRequest{
			Namespace:   ns,
			BatchKey:    sdk.WorkflowKey("run-3", "step-1", "payments.charge", "v1"),
			Tool:        "charge",
			Concurrency: 2,
		}
		for i, id := range ids {
			batch.Items = append(batch.Items, sdk.BatchItem{ID: id, Parameters: map[string]any{"amount": 100 * (i + 1), "currency": "EUR"}})
		}
		counted, counter := countingClient()
		effectsBefore := downstream.TotalEffects()

		first, err := counted.InvokeBatch(ctx, batch)
		Expect(err).NotTo(HaveOccurred())
		Expect(first).To(HaveLen(len(ids)))
		keys := map[string]bool{}
		for i, item := range first {
			Expect(item.Err).NotTo(HaveOccurred(), "item %s", item.ID)
			Expect(item.ID).To(Equal(ids[i]))
			Expect(item.Key).To(HavePrefix(batch.BatchKey + "-"))
			Expect(item.Outcome.Key).To(Equal(item.Key))
			Expect(item.Outcome.Phase).To(Equal(v1alpha1.PhaseSucceeded), "item %s", item.ID)
			Expect(item.Outcome.Deduplicated).To(BeFalse())
			charged, ok := downstream.Charge(ns + "/" + item.Key)
			Expect(ok).To(BeTrue())
			Expect(charged.Amount).To(Equal(int64(100 * (i + 1))))
			Expect(downstream.Effects(ns + "/" + item.Key)).To(Equal(1))
			keys[item.Key] = true
		}
		Expect(keys).To(HaveLen(len(ids)), "distinct keys")
		Expect(downstream.TotalEffects() - effectsBefore).To(Equal(len(ids)))
		Expect(counter.MaxAppliesInFlight()).To(BeNumerically("<=", batch.Concurrency), "bounded concurrency")
		counter.Requests()

		requestsBefore := downstream.TotalRequests()
		again, err := counted.InvokeBatch(ctx, batch)
		Expect(err).NotTo(HaveOccurred())
		for i, item := range again {
			Expect(item.Err).NotTo(HaveOccurred())
			Expect(item.Key).To(Equal(first[i].Key))
			Expect(item.Outcome.Deduplicated).To(BeTrue())
			Expect(item.Outcome.ExternalRef).To(Equal(first[i].Outcome.ExternalRef))
		}
		Expect(counter.Requests()).To(HaveLen(len(ids)), "one apply per settled item")
		Expect(downstream.TotalEffects()-effectsBefore).To(Equal(len(ids)), "no new effects")
		Expect(downstream.TotalRequests()).To(Equal(requestsBefore))
	})

	It("reports the failure of one item in its outcome and invokes the others", func() {
		batch := sdk.BatchRequest{Namespace: ns, BatchKey: "order-77", Tool: "charge", Items: []sdk.BatchItem{
			{ID: "a", Parameters: map[string]any{"amount": 100, "currency": "EUR"}},
			{ID: "b", Parameters: map[string]any{"amount": 200, "currency": "EUR"}},
		}}
		invoker, err := sdk.NewClient(cfg)
		Expect(err).NotTo(HaveOccurred())
		_, err = invoker.Invoke(ctx, sdk.Request{Namespace: ns, Key: "order-77-b", Tool: "charge", Parameters: map[string]any{"amount": 999, "currency": "EUR"}})
		Expect(err).NotTo(HaveOccurred())

		outcomes, err := invoker.InvokeBatch(ctx, batch)
		Expect(err).NotTo(HaveOccurred())
		Expect(outcomes[0].Err).NotTo(HaveOccurred())
		Expect(outcomes[0].Outcome.Phase).To(Equal(v1alpha1.PhaseSucceeded))
		Expect(outcomes[1].Key).To(Equal("order-77-b"))
		Expect(outcomes[1].Outcome).To(BeNil())
		Expect(outcomes[1].Err).To(MatchError(sdk.ErrDuplicateConflict))
		charged, _ := downstream.Charge(ns + "/order-77-b")
		Expect(charged.Amount).To(Equal(int64(999)), "the recorded intent stands")
		Expect(downstream.Effects(ns + "/order-77-b")).To(Equal(1))
		Expect(downstream.Effects(ns + "/order-77-a")).To(Equal(1))
	})

	It("refuses a batch with repeated item IDs, or IDs that derive one key, before sending anything", func() {
		invoker, counter := countingClient()
		upper, err := sdk.BatchItemKey("order-8", "X")
		Expect(err).NotTo(HaveOccurred())
		// An ID spelled like the key suffix derived for another ID collides with it.
		lookalike := strings.TrimPrefix(upper, "order-8-")
		for _, tc := range []struct {
			ids  []string
			want string
		}{
			{[]string{"a", "b", "a"}, `item ID "a" appears more than once`},
			{[]string{"X", lookalike}, fmt.Sprintf("item IDs %q and %q both derive the key %q", "X", lookalike, upper)},
			{nil, "no items"},
			{[]string{"a", ""}, "item 1: batch item ID is empty"},
		} {
			items := make([]sdk.BatchItem, 0, len(tc.ids))
			for _, id := range tc.ids {
				items = append(items, sdk.BatchItem{ID: id, Parameters: map[string]any{"amount": 1, "currency": "EUR"}})
			}
			outcomes, err := invoker.InvokeBatch(ctx, sdk.BatchRequest{Namespace: ns, BatchKey: "order-8", Tool: "charge", Items: items})
			Expect(err).To(MatchError(ContainSubstring(tc.want)), "ids %q", tc.ids)
			Expect(outcomes).To(BeNil())
		}
		Expect(counter.Requests()).To(BeEmpty())
	})
})

// newSpec starts a spec in a tenant of its own that holds the KeyProtected
// tool "charge", bounded to 30 seconds by the returned context.
func newSpec() (context.Context, string) {
	GinkgoHelper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	DeferCleanup(cancel)
	ns := env.NewTenant()
	createTool(ns, "charge", v1alpha1.KeyProtected)
	return ctx, ns
}

// createTool creates a payments tool on the suite's downstream with a lookup
// by key and three result fields.
func createTool(namespace, name string, class v1alpha1.IdempotencyClass) {
	GinkgoHelper()
	env.CreateTool(namespace, name, testenv.WithClass(class),
		// Longer than any delay the specs inject, so that a held request
		// stays Executing rather than becoming Unknown.
		testenv.WithTimeout(5*time.Second),
		testenv.WithKeyLookup(), testenv.WithResultPointers("/amount", "/currency", "/status"),
		testenv.WithBackoff(200*time.Millisecond, 2*time.Second))
}

// toolActionWrites sums the API server's own count of write requests on
// toolactions and their status, read from its /metrics.
func toolActionWrites() int {
	GinkgoHelper()
	clientset, err := kubernetes.NewForConfig(cfg)
	Expect(err).NotTo(HaveOccurred())
	raw, err := clientset.RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	Expect(err).NotTo(HaveOccurred())
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	Expect(err).NotTo(HaveOccurred())
	total := 0.0
	for _, m := range families["apiserver_request_total"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		switch labels["verb"] {
		case "GET", "LIST", "WATCH":
			continue
		}
		if labels["resource"] == "toolactions" {
			total += m.GetCounter().GetValue()
		}
	}
	return int(total)
}
