package controllers_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/demo"
	"github.com/toolledger/toolledger/internal/testenv"
)

var _ = Describe("Unknown outcomes", func() {
	ctx := context.Background()
	var ns string
	BeforeEach(func() { ns = env.NewTenant() })

	short := testenv.WithTimeout(time.Second)
	compensatable := testenv.WithClass(v1alpha1.Compensatable)

	It("retries under the same key when the lookup shows the request did not apply", func() {
		newTool(ns, short, compensatable)
		downstream.InjectFault(demo.Fault{Mode: demo.FaultDropBeforeCommit, Count: 1})
		Expect(k8s.Create(ctx, newAction(ns, "order-absent", "charge", charge(100)))).To(Succeed())

		done := env.WaitForPhase(ns, "order-absent", v1alpha1.PhaseSucceeded)
		Expect(transitions(done)).To(Equal([]string{
			"Executing/Executing", "Unknown/OutcomeUnknown", "Executing/AbsentByLookup", "Succeeded/Succeeded",
		}))
		Expect(done.Status.Attempts).To(Equal(int32(2)))
		key := keyOf(ns, "order-absent")
		Expect(downstream.Requests(key)).To(Equal(2), "both attempts carry the same key")
		Expect(downstream.Effects(key)).To(Equal(1))
	})

	It("escalates when no lookup answers by the deadline, and a ToolResolution closes it", func() {
		newTool(ns, short, compensatable, testenv.WithUnknownOutcomeDeadline(2*time.Second))
		downstream.InjectFault(demo.Fault{Mode: demo.FaultDropAfterCommit, Count: 1})
		downstream.InjectFault(demo.Fault{Mode: demo.FaultLookupUnavailable, Count: 1000})
		Expect(k8s.Create(ctx, newAction(ns, "order-dark", "charge", charge(200)))).To(Succeed())

		escalated := env.WaitForPhase(ns, "order-dark", v1alpha1.PhaseEscalated)
		key := keyOf(ns, "order-dark")
		Expect(escalated.Status.Error.Class).To(Equal(v1alpha1.ErrorClassOutcomeUnknown))
		Expect(escalated.Status.Error.Message).To(ContainSubstring("no lookup proved the outcome of attempt 1 within the tool's deadline of 2s"))
		Expect(escalated.Status.Lookups).To(BeNumerically(">=", 1))
		stalled := meta.FindStatusCondition(escalated.Status.Conditions, v1alpha1.ConditionStalled)
		Expect(stalled).NotTo(BeNil())
		Expect(stalled.Status).To(Equal(metav1.ConditionTrue))
		Expect(stalled.Reason).To(Equal("OutcomeUnknown"))
		Expect(conditionStatus(escalated, v1alpha1.ConditionReconciling)).To(Equal(metav1.ConditionStatus("absent")))
		Expect(downstream.Requests(key)).To(Equal(1))
		Expect(downstream.Effects(key)).To(Equal(1))

		out, err := env.Kubectl("get", "ta", "order-dark", "-n", ns)
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(MatchRegexp(`(?m)^order-dark\s+charge\s+Escalated\s+1\s`))
		// The escalation queue is a field selector away.
		out, err = env.Kubectl("get", "ta", "-n", ns, "--field-selector", "status.phase=Escalated", "-o", "name")
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(strings.TrimSpace(out)).To(Equal("toolaction.toolledger.dev/order-dark"))
		out, err = env.Kubectl("get", "events", "-n", ns, "--field-selector", "reason=Escalated", "-o", "name")
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).NotTo(BeEmpty())

		// Nothing moves an escalated action but a human.
		Consistently(func() v1alpha1.Phase { return env.Get(ns, "order-dark").Status.Phase }, time.Second, 100*time.Millisecond).
			Should(Equal(v1alpha1.PhaseEscalated))

		downstream.ClearFaults()
		charged, ok := downstream.Charge(key)
		Expect(ok).To(BeTrue())
		resolution := &v1alpha1.ToolResolution{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "order-dark-checked"},
			Spec: v1alpha1.ToolResolutionSpec{
				ActionName:  "order-dark",
				Attempt:     1,
				Outcome:     v1alpha1.ResolvedSucceeded,
				ExternalRef: charged.ID,
				Reason:      "found the charge in the provider's dashboard",
			},
		}
		Expect(k8s.Create(ctx, resolution)).To(Succeed())

		done := env.WaitForPhase(ns, "order-dark", v1alpha1.PhaseSucceeded)
		Expect(done.Status.ExternalRef).To(Equal(charged.ID))
		Expect(transitions(done)).To(Equal([]string{
			"Executing/Executing", "Unknown/OutcomeUnknown", "Escalated/OutcomeUnknown", "Succeeded/Resolved",
		}))
		last := done.Status.History[len(done.Status.History)-1]
		Expect(last.Executor).To(Equal("toolresolution/order-dark-checked"))
		Expect(last.Message).To(Equal("resolved as Succeeded by ToolResolution order-dark-checked: found the charge in the provider's dashboard"))
		Eventually(func(g Gomega) {
			var r v1alpha1.ToolResolution
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(resolution), &r)).To(Succeed())
			applied := meta.FindStatusCondition(r.Status.Conditions, v1alpha1.ConditionApplied)
			g.Expect(applied).NotTo(BeNil())
			g.Expect(applied.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(r.Status.AppliedTime).NotTo(BeNil())
		}).Should(Succeed())
		Expect(downstream.Requests(key)).To(Equal(1))
		Expect(downstream.Effects(key)).To(Equal(1))

		// A resolution is part of the record: it cannot be edited.
		var r v1alpha1.ToolResolution
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(resolution), &r)).To(Succeed())
		r.Spec.Outcome = v1alpha1.ResolvedFailed
		err = k8s.Update(ctx, &r)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "update: %v", err)
		Expect(err.Error()).To(ContainSubstring("spec is immutable: a resolution is part of the record"))
	})

	It("refuses a resolution for an action whose outcome is known", func() {
		newTool(ns)
		Expect(k8s.Create(ctx, newAction(ns, "order-known", "charge", charge(5)))).To(Succeed())
		env.WaitForPhase(ns, "order-known", v1alpha1.PhaseSucceeded)
		resolution := &v1alpha1.ToolResolution{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "too-late"},
			Spec:       v1alpha1.ToolResolutionSpec{ActionName: "order-known", Attempt: 1, Outcome: v1alpha1.ResolvedFailed, Reason: "mistake"},
		}
		Expect(k8s.Create(ctx, resolution)).To(Succeed())
		Eventually(func(g Gomega) {
			var r v1alpha1.ToolResolution
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(resolution), &r)).To(Succeed())
			applied := meta.FindStatusCondition(r.Status.Conditions, v1alpha1.ConditionApplied)
			g.Expect(applied).NotTo(BeNil())
			g.Expect(applied.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(applied.Message).To(Equal(`ToolAction "order-known" is Succeeded; only Unknown or Escalated actions take a resolution`))
		}).Should(Succeed())
		Expect(env.Get(ns, "order-known").Status.Phase).To(Equal(v1alpha1.PhaseSucceeded))
	})

	It("escalates a NonRepeatable tool's unknown outcome at once and never sends again", func() {
		// The tool's 5s timeout delays only lookups, never an escalation.
		newTool(ns, testenv.WithClass(v1alpha1.NonRepeatable))
		downstream.InjectFault(demo.Fault{Mode: demo.FaultDropAfterCommit, Count: 1})
		Expect(k8s.Create(ctx, newAction(ns, "order-once", "charge", charge(300)))).To(Succeed())

		Eventually(func() v1alpha1.Phase { return env.Get(ns, "order-once").Status.Phase }, 4*time.Second).Should(Equal(v1alpha1.PhaseEscalated))
		escalated := env.Get(ns, "order-once")
		Expect(escalated.Status.Error.Message).To(Equal("the outcome of attempt 1 is unknown and a NonRepeatable tool is never repeated or settled automatically; resolve it with a ToolResolution"))
		Expect(escalated.Status.Lookups).To(Equal(int32(0)))
		key := keyOf(ns, "order-once")
		Consistently(func() int { return downstream.Requests(key) }, 2*time.Second, 100*time.Millisecond).Should(Equal(1))
		Expect(env.Get(ns, "order-once").Status.Phase).To(Equal(v1alpha1.PhaseEscalated))
	})

	It("re-sends under the same key a KeyProtected tool's unknown outcome when it has no lookup", func() {
		newTool(ns, short, testenv.WithoutLookup())
		downstream.InjectFault(demo.Fault{Mode: demo.FaultDropAfterCommit, Count: 1})
		Expect(k8s.Create(ctx, newAction(ns, "order-keyed", "charge", charge(400)))).To(Succeed())

		done := env.WaitForPhase(ns, "order-keyed", v1alpha1.PhaseSucceeded)
		key := keyOf(ns, "order-keyed")
		charged, _ := downstream.Charge(key)
		Expect(done.Status.ExternalRef).To(Equal(charged.ID), "the downstream replays the original charge")
		Expect(transitions(done)).To(Equal([]string{
			"Executing/Executing", "Unknown/OutcomeUnknown", "Executing/RedispatchUnderSameKey", "Succeeded/Succeeded",
		}))
		Expect(downstream.Requests(key)).To(Equal(2))
		Expect(downstream.Effects(key)).To(Equal(1))
	})

	It("escalates, never re-sends, an unknown outcome once the downstream no longer keeps the key", func() {
		// The lookup-less re-send is due an attempt timeout (1s) after the
		// outcome became unknown: past the downstream's 1s window.
		newTool(ns, short, testenv.WithoutLookup(), testenv.WithDownstreamKeyRetention(time.Second))
		downstream.InjectFault(demo.Fault{Mode: demo.FaultDropAfterCommit, Count: 1})
		Expect(k8s.Create(ctx, newAction(ns, "order-forgotten", "charge", charge(410)))).To(Succeed())

		escalated := env.WaitForPhase(ns, "order-forgotten", v1alpha1.PhaseEscalated)
		Expect(escalated.Status.Error.Reason).To(Equal("DownstreamKeyExpired"))
		Expect(escalated.Status.Error.Message).To(ContainSubstring("a re-send could apply twice"))
		Expect(escalated.Status.DownstreamKeptUntil).NotTo(BeNil())
		Expect(escalated.Status.DownstreamKeptUntil.Time).To(BeTemporally("==", escalated.Status.StartTime.Add(time.Second)))
		key := keyOf(ns, "order-forgotten")
		Consistently(func() int { return downstream.Requests(key) }, time.Second, 100*time.Millisecond).Should(Equal(1))
		Expect(transitions(escalated)).To(Equal([]string{"Executing/Executing", "Unknown/OutcomeUnknown", "Escalated/DownstreamKeyExpired"}))
	})

	It("escalates, never fails, when retries run out after an attempt whose outcome was unknown", func() {
		// The downstream holds the first request past the tool's timeout and
		// answers every re-send under the same key "409 in progress".
		newTool(ns, testenv.WithoutLookup(), testenv.WithTimeout(300*time.Millisecond), testenv.WithMaxAttempts(2))
		downstream.InjectFault(demo.Fault{Mode: demo.FaultDelay, Delay: 3 * time.Second, Count: 1})
		Expect(k8s.Create(ctx, newAction(ns, "order-held", "charge", charge(460)))).To(Succeed())

		escalated := env.WaitForPhase(ns, "order-held", v1alpha1.PhaseEscalated)
		Expect(escalated.Status.Attempts).To(Equal(int32(2)))
		Expect(escalated.Status.Error.Class).To(Equal(v1alpha1.ErrorClassOutcomeUnknown))
		Expect(escalated.Status.Error.Message).To(MatchRegexp(`^attempt 2 failed \(.*409.*\), but an earlier attempt's outcome was unknown and may have applied; resolve it with a ToolResolution$`))
		key := keyOf(ns, "order-held")
		Eventually(func() int { return downstream.Effects(key) }).Should(Equal(1), "the held request applies after all")
	})

	It("looks a held request up until it commits, never failing it, when the lookup answers 404 until commit", func() {
		// The sample payments Tool's shape: a lookup whose 404 the Tool
		// declares absence, from a downstream that creates its record at
		// commit. The first request is held past every attempt.
		newTool(ns, testenv.WithCommittedLookup(), testenv.WithTimeout(300*time.Millisecond), testenv.WithMaxAttempts(2))
		downstream.InjectFault(demo.Fault{Mode: demo.FaultDelay, Delay: 3 * time.Second, Count: 1})
		Expect(k8s.Create(ctx, newAction(ns, "order-held-found", "charge", charge(470)))).To(Succeed())

		done := env.WaitForPhase(ns, "order-held-found", v1alpha1.PhaseSucceeded)
		key := keyOf(ns, "order-held-found")
		charge, ok := downstream.Charge(key)
		Expect(ok).To(BeTrue())
		Expect(done.Status.ExternalRef).To(Equal(charge.ID))
		Expect(done.Status.Attempts).To(Equal(int32(2)))
		Expect(transitions(done)).To(Equal([]string{"Executing/Executing", "Unknown/OutcomeUnknown", "Executing/AbsentByLookup",
			"Unknown/OutcomeUnknown", "Succeeded/FoundByLookup"}))
		Expect(downstream.Effects(key)).To(Equal(1))
	})

	It("escalates a Compensatable tool's unknown outcome at once when it has no lookup", func() {
		newTool(ns, short, compensatable, testenv.WithoutLookup())
		downstream.InjectFault(demo.Fault{Mode: demo.FaultDropAfterCommit, Count: 1})
		Expect(k8s.Create(ctx, newAction(ns, "order-nolookup", "charge", charge(450)))).To(Succeed())
		escalated := env.WaitForPhase(ns, "order-nolookup", v1alpha1.PhaseEscalated)
		Expect(escalated.Status.Error.Message).To(Equal("the outcome of attempt 1 is unknown and a Compensatable tool without a lookup call is never repeated automatically; resolve it with a ToolResolution"))
		Expect(downstream.Requests(keyOf(ns, "order-nolookup"))).To(Equal(1))
	})
})

var _ = Describe("Deletion", func() {
	It("keeps an Executing action until its outcome is recorded", func() {
		ctx := context.Background()
		ns := env.NewTenant()
		newTool(ns)
		downstream.InjectFault(demo.Fault{Mode: demo.FaultDelay, Delay: 2 * time.Second, Count: 1})
		Expect(k8s.Create(ctx, newAction(ns, "order-busy", "charge", charge(600)))).To(Succeed())
		executing := env.WaitForPhase(ns, "order-busy", v1alpha1.PhaseExecuting)
		Expect(executing.Finalizers).To(ContainElement(v1alpha1.Finalizer))

		Expect(k8s.Delete(ctx, executing)).To(Succeed())
		pending := env.Get(ns, "order-busy")
		Expect(pending.DeletionTimestamp).NotTo(BeNil())
		Expect(pending.Status.Phase).To(Equal(v1alpha1.PhaseExecuting))

		Eventually(func() bool {
			err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "order-busy"}, &v1alpha1.ToolAction{})
			return apierrors.IsNotFound(err)
		}).Should(BeTrue())
		key := keyOf(ns, "order-busy")
		Expect(downstream.Requests(key)).To(Equal(1))
		Expect(downstream.Effects(key)).To(Equal(1), "the attempt under way finished")
	})

	It("lets a finished action go at once", func() {
		ctx := context.Background()
		ns := env.NewTenant()
		newTool(ns)
		Expect(k8s.Create(ctx, newAction(ns, "order-done", "charge", charge(601)))).To(Succeed())
		done := env.WaitForPhase(ns, "order-done", v1alpha1.PhaseSucceeded)
		// The manager no longer caches it: its DeletionWatch sees the deletion
		// and releases the finalizer. The bound is well under the suite's
		// lease (10s), after which a requeue left from the claim could also
		// come across it.
		Expect(done.Finalizers).To(ContainElement(v1alpha1.Finalizer))
		Consistently(func() v1alpha1.Phase { return env.Get(ns, "order-done").Status.Phase }, time.Second, 100*time.Millisecond).
			Should(Equal(v1alpha1.PhaseSucceeded))
		Expect(k8s.Delete(ctx, done)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(done), &v1alpha1.ToolAction{}))
		}).WithTimeout(5 * time.Second).Should(BeTrue())
	})
})

var _ = Describe("Compensation", func() {
	var (
		ctx     context.Context
		ns      string
		refunds *httptest.Server
		count   atomic.Int32
	)

	BeforeEach(func() {
		ctx = context.Background()
		ns = env.NewTenant()
		count.Store(0)
		refunds = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			n := count.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			_, _ = fmt.Fprintf(w, `{"id":"re_%d","status":"refunded"}`, n)
		}))
		DeferCleanup(refunds.Close)
		newTool(ns)
		Expect(k8s.Create(ctx, testenv.NewTool(ns, "refund", refunds.URL, testenv.WithOperation("payments.refund")))).To(Succeed())
	})

	It("links a succeeded compensation to the original, which stays succeeded", func() {
		Expect(k8s.Create(ctx, newAction(ns, "order-7", "charge", charge(700)))).To(Succeed())
		original := env.WaitForPhase(ns, "order-7", v1alpha1.PhaseSucceeded)

		refund := newAction(ns, "order-7-refund", "refund", params(map[string]any{"charge": original.Status.ExternalRef, "amount": 700}))
		refund.Spec.Compensates = "order-7"
		Expect(k8s.Create(ctx, refund)).To(Succeed())
		done := env.WaitForPhase(ns, "order-7-refund", v1alpha1.PhaseSucceeded)
		Expect(done.Status.ExternalRef).To(Equal("re_1"))

		Eventually(func(g Gomega) {
			o := env.Get(ns, "order-7")
			g.Expect(o.Status.CompensatedBy).To(Equal([]string{"order-7-refund"}))
			g.Expect(conditionStatus(o, v1alpha1.ConditionCompensated)).To(Equal(metav1.ConditionTrue))
			g.Expect(o.Status.Phase).To(Equal(v1alpha1.PhaseSucceeded))
			g.Expect(o.Status.ExternalRef).To(Equal(original.Status.ExternalRef))
			g.Expect(transitions(o)).To(Equal([]string{"Executing/Executing", "Succeeded/Succeeded", "Succeeded/Compensated"}))
		}).Should(Succeed())
		Expect(count.Load()).To(Equal(int32(1)))
		Expect(downstream.Effects(keyOf(ns, "order-7"))).To(Equal(1))
	})

	It("refuses to compensate an action that does not exist, without a dispatch", func() {
		refund := newAction(ns, "ghost-refund", "refund", params(map[string]any{"amount": 1}))
		refund.Spec.Compensates = "ghost"
		Expect(k8s.Create(ctx, refund)).To(Succeed())
		failed := env.WaitForPhase(ns, "ghost-refund", v1alpha1.PhaseFailed)
		Expect(failed.Status.Error.Reason).To(Equal("CompensationTargetInvalid"))
		Expect(failed.Status.Error.Message).To(Equal(`spec.compensates: ToolAction "ghost" not found in namespace "` + ns + `", and no tombstone of it either`))
		Expect(count.Load()).To(BeZero())
	})

	It("compensates an original whose record is gone, by its tombstone", func() {
		Expect(k8s.Create(ctx, newAction(ns, "order-8", "charge", charge(800)))).To(Succeed())
		original := env.WaitForPhase(ns, "order-8", v1alpha1.PhaseSucceeded)
		Expect(k8s.Delete(ctx, original)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(original), &v1alpha1.ToolAction{}))
		}).Should(BeTrue())

		refund := newAction(ns, "order-8-refund", "refund", params(map[string]any{"charge": original.Status.ExternalRef, "amount": 800}))
		refund.Spec.Compensates = "order-8"
		Expect(k8s.Create(ctx, refund)).To(Succeed())
		Expect(env.WaitForPhase(ns, "order-8-refund", v1alpha1.PhaseSucceeded).Status.ExternalRef).To(Equal("re_1"))
		Expect(count.Load()).To(Equal(int32(1)))
	})
})

var _ = Describe("Who may resolve", func() {
	It("is the shipped resolver role: it creates resolutions and cannot touch the ledger", func() {
		ctx := context.Background()
		ns := env.NewTenant()
		manifest, err := os.ReadFile(filepath.Join("..", "config", "rbac", "toolresolution_resolver_role.yaml"))
		Expect(err).NotTo(HaveOccurred())
		var role rbacv1.ClusterRole
		Expect(yaml.UnmarshalStrict(manifest, &role)).To(Succeed())
		role.Name = "resolver-" + ns
		Expect(k8s.Create(ctx, &role)).To(Succeed())
		DeferCleanup(func() { _ = k8s.Delete(context.Background(), &role) })
		Expect(k8s.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ops-resolvers"},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
			Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: "ops@example.com"}},
		})).To(Succeed())
		newTool(ns)
		Expect(k8s.Create(ctx, newAction(ns, "order-rbac", "charge", charge(9)))).To(Succeed())
		env.WaitForPhase(ns, "order-rbac", v1alpha1.PhaseSucceeded)

		as := func(user string) client.Client {
			impersonated := rest.CopyConfig(cfg)
			impersonated.Impersonate = rest.ImpersonationConfig{UserName: user}
			c, err := client.New(impersonated, client.Options{Scheme: k8s.Scheme()})
			Expect(err).NotTo(HaveOccurred())
			return c
		}
		resolution := func(name string) *v1alpha1.ToolResolution {
			return &v1alpha1.ToolResolution{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
				Spec:       v1alpha1.ToolResolutionSpec{ActionName: "order-rbac", Attempt: 1, Outcome: v1alpha1.ResolvedFailed, Reason: "checked"},
			}
		}

		ops := as("ops@example.com")
		Expect(ops.Create(ctx, resolution("by-ops"))).To(Succeed())
		var action v1alpha1.ToolAction
		Eventually(func() error { return ops.Get(ctx, client.ObjectKey{Namespace: ns, Name: "order-rbac"}, &action) }).Should(Succeed())
		action.Status.Phase = v1alpha1.PhaseFailed
		Expect(apierrors.IsForbidden(ops.Status().Update(ctx, &action))).To(BeTrue(), "a resolver cannot rewrite the ledger")
		Expect(apierrors.IsForbidden(ops.Delete(ctx, &action))).To(BeTrue(), "a resolver cannot delete records")

		Expect(apierrors.IsForbidden(as("agent@example.com").Create(ctx, resolution("by-agent")))).To(BeTrue(),
			"resolving is not part of invoking tools")
	})
})
