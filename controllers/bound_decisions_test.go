package controllers_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/demo"
	"github.com/toolledger/toolledger/internal/testenv"
)

// A human's decision holds for what that human saw: a resolution for the
// attempt it judged, an approval for the request and the target the tool
// named (findings 1 and 3 of docs/security.md: a resolver decides on a page
// showing an earlier attempt; the Tool is edited while an action awaits or
// holds an approval).
var _ = Describe("Decisions bound to what their author saw", func() {
	ctx := context.Background()
	var ns string
	BeforeEach(func() { ns = env.NewTenant() })

	appliedCondition := func(name string) *metav1.Condition {
		GinkgoHelper()
		var condition *metav1.Condition
		Eventually(func(g Gomega) {
			var r v1alpha1.ToolResolution
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &r)).To(Succeed())
			condition = meta.FindStatusCondition(r.Status.Conditions, v1alpha1.ConditionApplied)
			g.Expect(condition).NotTo(BeNil())
		}).Should(Succeed())
		return condition
	}
	resolve := func(name, action string, judged *v1alpha1.ToolAction, outcome v1alpha1.ResolutionOutcome, externalRef string) {
		GinkgoHelper()
		Expect(k8s.Create(ctx, &v1alpha1.ToolResolution{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: v1alpha1.ToolResolutionSpec{ActionName: action, ActionUID: judged.UID, Attempt: judged.Status.Attempts,
				Outcome: outcome, ExternalRef: externalRef, Reason: "checked the provider"},
		})).To(Succeed())
	}

	It("refuses a resolution of an attempt the action has left, which would re-send an attempt that may have applied", func() {
		newTool(ns, testenv.WithClass(v1alpha1.NonRepeatable), testenv.WithoutLookup())
		key := keyOf(ns, "transfer-9")
		// Attempt 1 never reaches the ledger of the downstream; attempt 2
		// applies and its answer is lost.
		downstream.InjectFault(demo.Fault{Mode: demo.FaultDropBeforeCommit})
		downstream.InjectFault(demo.Fault{Mode: demo.FaultDropAfterCommit})
		DeferCleanup(downstream.ClearFaults)
		Expect(k8s.Create(ctx, newAction(ns, "transfer-9", "charge", charge(900)))).To(Succeed())
		first := env.WaitForPhase(ns, "transfer-9", v1alpha1.PhaseEscalated)
		Expect(first.Status.Attempts).To(Equal(int32(1)))

		// Resolver B finds no transfer and lets it be retried; resolver A
		// still holds a page of attempt 1.
		stalePage := first.DeepCopy()
		resolve("b-retry-safe", "transfer-9", first, v1alpha1.ResolvedRetrySafe, "")
		Eventually(func() int32 { return env.Get(ns, "transfer-9").Status.Attempts }).Should(Equal(int32(2)))
		second := env.WaitForPhase(ns, "transfer-9", v1alpha1.PhaseEscalated)
		Expect(downstream.Effects(key)).To(Equal(1), "attempt 2 applied")

		resolve("a-retry-safe", "transfer-9", stalePage, v1alpha1.ResolvedRetrySafe, "")
		refused := appliedCondition("a-retry-safe")
		Expect(refused.Status).To(Equal(metav1.ConditionFalse))
		Expect(refused.Reason).To(Equal("StaleAttempt"))
		Expect(refused.Message).To(Equal(`the resolution judged attempt 1 of ToolAction "transfer-9", which is at attempt 2 (Escalated) now: ` +
			`a finding about an earlier attempt is never applied to a later one, which may have applied; judge attempt 2 and create another resolution`))
		Consistently(func() int32 { return env.Get(ns, "transfer-9").Status.Attempts }, time.Second, 100*time.Millisecond).Should(Equal(int32(2)))
		Expect(downstream.Requests(key)).To(Equal(2))
		Expect(downstream.Effects(key)).To(Equal(1))

		// The resolution of attempt 2, with what the provider shows, closes it.
		charged, ok := downstream.Charge(key)
		Expect(ok).To(BeTrue())
		resolve("a-found", "transfer-9", second, v1alpha1.ResolvedSucceeded, charged.ID)
		done := env.WaitForPhase(ns, "transfer-9", v1alpha1.PhaseSucceeded)
		Expect(done.Status.ExternalRef).To(Equal(charged.ID))
		Expect(downstream.Effects(key)).To(Equal(1))
	})

	It("refuses a resolution of another object under the same name", func() {
		newTool(ns, testenv.WithClass(v1alpha1.NonRepeatable), testenv.WithoutLookup())
		downstream.InjectFault(demo.Fault{Mode: demo.FaultDropBeforeCommit})
		DeferCleanup(downstream.ClearFaults)
		Expect(k8s.Create(ctx, newAction(ns, "transfer-10", "charge", charge(10)))).To(Succeed())
		escalated := env.WaitForPhase(ns, "transfer-10", v1alpha1.PhaseEscalated)
		other := escalated.DeepCopy()
		other.UID = "00000000-0000-0000-0000-000000000001"
		resolve("wrong-object", "transfer-10", other, v1alpha1.ResolvedRetrySafe, "")
		refused := appliedCondition("wrong-object")
		Expect(refused.Reason).To(Equal("ActionReplaced"))
		Expect(refused.Message).To(ContainSubstring("with UID 00000000-0000-0000-0000-000000000001, which was deleted"))
		Expect(env.Get(ns, "transfer-10").Status.Phase).To(Equal(v1alpha1.PhaseEscalated))
	})
})

var _ = Describe("Approvals bound to the target the tool named", Ordered, func() {
	ctx := context.Background()
	var approverRole string
	BeforeAll(func() {
		remove, err := testenv.InstallIdentityPolicy(ctx, cfg, k8s, "default", "target-specs")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(remove)
		approverRole = env.LoadClusterRole("role_approver.yaml", "targets")
	})

	var ns string
	var bob client.Client
	BeforeEach(func() {
		ns = env.NewTenant()
		Expect(k8s.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "targets-"},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: approverRole},
			Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: "bob"}},
		})).To(Succeed())
		bob = env.Impersonate("bob")
	})
	approve := func(name, action string) {
		GinkgoHelper()
		waiting := env.WaitForPhase(ns, action, v1alpha1.PhaseAwaitingApproval)
		Expect(bob.Create(ctx, &v1alpha1.ToolApproval{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: v1alpha1.ToolApprovalSpec{ActionName: action, RequestDigest: waiting.Status.RequestDigest,
				Decision: v1alpha1.Approved, Reason: "checked"},
		})).To(Succeed())
	}
	editTool := func(change func(*v1alpha1.Tool)) {
		GinkgoHelper()
		Eventually(func() error {
			var tool v1alpha1.Tool
			if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "charge"}, &tool); err != nil {
				return err
			}
			change(&tool)
			return k8s.Update(ctx, &tool)
		}).Should(Succeed())
	}
	touch := func(name string) {
		GinkgoHelper()
		Eventually(func() error {
			action := env.Get(ns, name)
			if action.Annotations == nil {
				action.Annotations = map[string]string{}
			}
			action.Annotations["example.com/touched"] = time.Now().Format(time.RFC3339Nano)
			return k8s.Update(ctx, action)
		}).Should(Succeed())
	}

	It("keeps an action held for approval when a namespace admin stops requiring approvals", func() {
		newTool(ns, testenv.WithApprovalRequired())
		Expect(k8s.Create(ctx, newAction(ns, "order-sticky", "charge", charge(700)))).To(Succeed())
		waiting := env.WaitForPhase(ns, "order-sticky", v1alpha1.PhaseAwaitingApproval)
		Expect(waiting.Status.Target).NotTo(BeNil())
		Expect(waiting.Status.Target.ApprovalRequired).To(BeTrue())
		Expect(waiting.Status.Target.Digest).To(MatchRegexp(`^sha256:[0-9a-f]{64}$`))

		editTool(func(t *v1alpha1.Tool) { t.Spec.ApprovalRequired = false })
		touch("order-sticky")
		Consistently(func() v1alpha1.Phase { return env.Get(ns, "order-sticky").Status.Phase }, 2*time.Second, 100*time.Millisecond).
			Should(Equal(v1alpha1.PhaseAwaitingApproval))
		Expect(downstream.Requests(keyOf(ns, "order-sticky"))).To(BeZero())

		approve("bob-approves", "order-sticky")
		done := env.WaitForPhase(ns, "order-sticky", v1alpha1.PhaseSucceeded)
		Expect(done.Status.Approval.DecidedBy).To(Equal("bob"))
		Expect(done.Status.Approval.TargetDigest).To(Equal(waiting.Status.Target.Digest))
		Expect(downstream.Requests(keyOf(ns, "order-sticky"))).To(Equal(1))
	})

	It("does not send an approved action to a target its Tool names after the approval", func() {
		elsewhere, server := testenv.StartDownstream()
		DeferCleanup(server.Close)
		// Attempt 1 meets a 503 and waits 3s for its retry: time enough to
		// re-point the Tool.
		newTool(ns, testenv.WithApprovalRequired(), testenv.WithBackoff(3*time.Second, 3*time.Second))
		downstream.InjectFault(demo.Fault{Mode: demo.FaultUnavailable})
		DeferCleanup(downstream.ClearFaults)
		key := keyOf(ns, "order-moved")
		Expect(k8s.Create(ctx, newAction(ns, "order-moved", "charge", charge(800)))).To(Succeed())
		approve("bob-approves-here", "order-moved")
		env.WaitForPhase(ns, "order-moved", v1alpha1.PhaseRetryScheduled)
		Expect(downstream.Requests(key)).To(Equal(1))

		editTool(func(t *v1alpha1.Tool) { t.Spec.HTTP.URL = server.URL + "/charges" })
		held := env.WaitForPhase(ns, "order-moved", v1alpha1.PhaseAwaitingApproval)
		Expect(held.Status.Approval).To(BeNil(), "the approval no longer holds")
		approved := meta.FindStatusCondition(held.Status.Conditions, v1alpha1.ConditionApproved)
		Expect(approved.Status).To(Equal(metav1.ConditionUnknown))
		Expect(approved.Reason).To(Equal("TargetChanged"))
		Expect(approved.Message).To(ContainSubstring(`tool "charge" changed its target`))
		Expect(approved.Message).To(ContainSubstring("a new ToolApproval is needed"))
		Consistently(func() int { return elsewhere.Requests(key) }, 2*time.Second, 100*time.Millisecond).Should(BeZero())

		approve("bob-approves-there", "order-moved")
		done := env.WaitForPhase(ns, "order-moved", v1alpha1.PhaseSucceeded)
		Expect(done.Status.Approval.Name).To(Equal("bob-approves-there"))
		Expect(elsewhere.Requests(key)).To(Equal(1))
		Expect(downstream.Requests(key)).To(Equal(1))
	})
})
