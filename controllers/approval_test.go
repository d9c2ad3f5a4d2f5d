package controllers_test

import (
	"bytes"
	"context"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/demo"
	"github.com/toolledger/toolledger/internal/kubectlplugin"
	"github.com/toolledger/toolledger/internal/testenv"
	"github.com/toolledger/toolledger/internal/testenv/specenv"
)

// The approval specs run with the identity policies installed, as a
// cluster runs them, and act as users that RBAC knows only through the
// shipped persona roles: alice the agent, bob the approver.
var _ = Describe("Approvals bound to a key and a request digest", Ordered, func() {
	ctx := context.Background()
	var agentRole, approverRole string

	BeforeAll(func() {
		remove, err := testenv.InstallIdentityPolicy(ctx, cfg, k8s, "default", "approval-specs")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(remove)
		agentRole = env.LoadClusterRole("role_agent.yaml", "approvals")
		approverRole = env.LoadClusterRole("role_approver.yaml", "approvals")
	})

	var ns string
	bind := func(user, role string) {
		GinkgoHelper()
		Expect(k8s.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "approvals-"},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: user}},
		})).To(Succeed())
	}
	var alice, bob client.Client
	BeforeEach(func() {
		ns = env.NewTenant()
		bind("alice", agentRole)
		bind("bob", approverRole)
		alice, bob = env.Impersonate("alice"), env.Impersonate("bob")
	})

	// toolledger runs the console as user, as `kubectl toolledger --as user` does.
	toolledger := func(user string, args ...string) (string, int) {
		GinkgoHelper()
		var out bytes.Buffer
		code := kubectlplugin.Run(ctx, genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &out},
			append(args, "-n", ns, "--kubeconfig", env.Kubeconfig, "--as", user))
		return out.String(), code
	}
	awaiting := func(name string) *v1alpha1.ToolAction {
		GinkgoHelper()
		return env.WaitForPhase(ns, name, v1alpha1.PhaseAwaitingApproval)
	}
	applied := func(name string) *metav1.Condition {
		GinkgoHelper()
		var condition *metav1.Condition
		Eventually(func(g Gomega) {
			var approval v1alpha1.ToolApproval
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &approval)).To(Succeed())
			condition = meta.FindStatusCondition(approval.Status.Conditions, v1alpha1.ConditionApplied)
			g.Expect(condition).NotTo(BeNil())
		}).Should(Succeed())
		return condition
	}
	approval := func(name, action, requestDigest string, decision v1alpha1.ApprovalDecision) *v1alpha1.ToolApproval {
		return &v1alpha1.ToolApproval{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec:       v1alpha1.ToolApprovalSpec{ActionName: action, RequestDigest: requestDigest, Decision: decision, Reason: "checked"},
		}
	}
	// eventNotes lists the notes of the events about the object of kind
	// and name with reason.
	eventNotes := func(kind, name, reason string) []string {
		var events eventsv1.EventList
		Expect(k8s.List(ctx, &events, client.InNamespace(ns))).To(Succeed())
		var notes []string
		for _, e := range events.Items {
			if e.Regarding.Kind == kind && e.Regarding.Name == name && e.Reason == reason {
				notes = append(notes, e.Note)
			}
		}
		return notes
	}
	noRequests := func(name string) {
		GinkgoHelper()
		Consistently(func() int { return downstream.Requests(keyOf(ns, name)) }, time.Second, 100*time.Millisecond).Should(BeZero())
	}

	It("holds alice's action until bob approves its digest, then dispatches it once, naming both", func() {
		newTool(ns, testenv.WithApprovalRequired())
		Expect(alice.Create(ctx, newAction(ns, "order-approve", "charge", charge(5000)))).To(Succeed())
		waiting := awaiting("order-approve")
		Expect(waiting.Annotations).To(HaveKeyWithValue(v1alpha1.RequestedByAnnotation, "alice"))
		condition := meta.FindStatusCondition(waiting.Status.Conditions, v1alpha1.ConditionApproved)
		Expect(condition).NotTo(BeNil())
		Expect(condition.Status).To(Equal(metav1.ConditionUnknown))
		Expect(condition.Message).To(Equal(`tool "charge" requires an approval of request ` + waiting.Status.RequestDigest +
			` before it is dispatched (a ToolApproval of this key and digest)`))
		noRequests("order-approve")

		out, code := toolledger("bob", "approvals")
		Expect(code).To(Equal(kubectlplugin.ExitOK), out)
		Expect(out).To(MatchRegexp(`(?m)^NAME\s+AGE\s+TOOL\s+REQUESTED-BY\s+DIGEST\s+IN-DIGEST\s+NOT-IN-DIGEST$`))
		Expect(out).To(MatchRegexp(`(?m)^order-approve\s+\S+\s+charge\s+alice\s+` + waiting.Status.RequestDigest + `\s+/amount=5000 /currency="EUR" /customer="cus_42"\s+<none>$`))

		out, code = toolledger("bob", "approve", "order-approve", "--digest", waiting.Status.RequestDigest, "--reason", "customer confirmed", "--wait")
		Expect(code).To(Equal(kubectlplugin.ExitOK), out)
		Expect(out).To(ContainSubstring("  requested by:  alice\n"))
		Expect(out).To(ContainSubstring("Applied=True (Approved)"))

		done := env.WaitForPhase(ns, "order-approve", v1alpha1.PhaseSucceeded)
		key := keyOf(ns, "order-approve")
		Expect(downstream.Requests(key)).To(Equal(1))
		Expect(downstream.Effects(key)).To(Equal(1))
		record := done.Status.Approval
		Expect(record).NotTo(BeNil())
		Expect(record.DecidedBy).To(Equal("bob"))
		Expect(record.Decision).To(Equal(v1alpha1.Approved))
		Expect(record.RequestDigest).To(Equal(waiting.Status.RequestDigest))
		Expect(record.Name).To(HavePrefix("order-approve-approval-"))
		var decided v1alpha1.ToolApproval
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: record.Name}, &decided)).To(Succeed())
		Expect(decided.Spec.ActionUID).To(Equal(waiting.UID), "the console binds the approval to the object bob reviewed")
		Expect(decided.Annotations).To(HaveKeyWithValue(v1alpha1.DecidedByAnnotation, "bob"))
		Expect(done.Annotations).To(HaveKeyWithValue(v1alpha1.RequestedByAnnotation, "alice"))
		Expect(conditionStatus(done, v1alpha1.ConditionApproved)).To(Equal(metav1.ConditionTrue))
		Expect(transitions(done)).To(Equal([]string{
			"AwaitingApproval/AwaitingApproval", "Accepted/Approved", "Executing/Executing", "Succeeded/Succeeded",
		}))
		Expect(done.Status.History[1].Executor).To(Equal("toolapproval/" + record.Name))
		Expect(done.Status.History[1].Message).To(Equal("request " + record.RequestDigest + " approved by bob (ToolApproval " + record.Name + "): customer confirmed"))

		headers := downstream.ProvenanceHeaders(key)
		Expect(headers.Get("Toolledger-Requested-By")).To(Equal("alice"))
		Expect(headers.Get("Toolledger-Approved-By")).To(Equal("bob"))

		out, code = toolledger("bob", "status", "order-approve")
		Expect(code).To(Equal(kubectlplugin.ExitOK), out)
		Expect(out).To(MatchRegexp(`(?m)^Requested by:\s+alice \(verified: stamped by the API server\)$`))
		Expect(out).To(MatchRegexp(`(?m)^Approval:\s+Approved by bob at \S+ \(ToolApproval ` + record.Name + `, request ` + record.RequestDigest + `\)$`))

		Expect(apierrors.IsForbidden(bob.Create(ctx, newAction(ns, "order-by-bob", "charge", charge(1))))).To(BeTrue(),
			"an approver cannot request what they approve")
		Expect(apierrors.IsForbidden(alice.Create(ctx, approval("by-alice", "order-approve", record.RequestDigest, v1alpha1.Approved)))).To(BeTrue(),
			"an agent cannot approve")
	})

	It("does not apply an approval of another digest, nor the requester's own", func() {
		newTool(ns, testenv.WithApprovalRequired())
		Expect(alice.Create(ctx, newAction(ns, "order-5000", "charge", charge(5000)))).To(Succeed())
		Expect(alice.Create(ctx, newAction(ns, "order-9000", "charge", charge(9000)))).To(Succeed())
		asked, other := awaiting("order-5000").Status.RequestDigest, awaiting("order-9000").Status.RequestDigest
		Expect(asked).NotTo(Equal(other))

		Expect(bob.Create(ctx, approval("bob-wrong-digest", "order-5000", other, v1alpha1.Approved))).To(Succeed())
		refused := applied("bob-wrong-digest")
		Expect(refused.Status).To(Equal(metav1.ConditionFalse))
		Expect(refused.Reason).To(Equal("DigestMismatch"))
		want := `the approval is for request ` + other + `, but ToolAction "order-5000" records request ` + asked +
			`: a decision about other parameters is never applied; approve ` + asked + ` to dispatch it`
		Expect(refused.Message).To(Equal(want))
		Eventually(func() []string { return eventNotes("ToolAction", "order-5000", "DigestMismatch") }).Should(ConsistOf(
			"ToolApproval bob-wrong-digest not applied: " + want))
		Eventually(func() []string { return eventNotes("ToolApproval", "bob-wrong-digest", "DigestMismatch") }).Should(ConsistOf(want))

		bind("alice", approverRole)
		out, code := toolledger("alice", "approve", "order-5000", "--digest", asked, "--reason", "looks fine to me", "--wait")
		Expect(code).To(Equal(kubectlplugin.ExitError), out)
		Expect(out).To(ContainSubstring(`Applied=False (SelfApproval): alice requested ToolAction "order-5000" and cannot approve it too: tool "charge" requires someone else's approval (selfApprovalAllowed is not set)`))

		Expect(awaiting("order-5000").Status.Approval).To(BeNil())
		noRequests("order-5000")
		noRequests("order-9000")

		// Refusals block nothing: the right approval still applies.
		out, code = toolledger("bob", "approve", "order-5000", "--digest", asked, "--reason", "confirmed", "--wait")
		Expect(code).To(Equal(kubectlplugin.ExitOK), out)
		env.WaitForPhase(ns, "order-5000", v1alpha1.PhaseSucceeded)
		Expect(downstream.Effects(keyOf(ns, "order-5000"))).To(Equal(1))
		noRequests("order-9000")
	})

	It("lets the requester approve where the tool allows self-approval", func() {
		newTool(ns, testenv.WithApprovalRequired(), testenv.WithSelfApprovalAllowed())
		bind("alice", approverRole)
		Expect(alice.Create(ctx, newAction(ns, "order-self", "charge", charge(12)))).To(Succeed())
		self := awaiting("order-self")
		out, code := toolledger("alice", "approve", "order-self", "--digest", self.Status.RequestDigest, "--reason", "small amount", "--wait")
		Expect(code).To(Equal(kubectlplugin.ExitOK), out)
		done := env.WaitForPhase(ns, "order-self", v1alpha1.PhaseSucceeded)
		Expect(done.Status.Approval.DecidedBy).To(Equal("alice"))
		Expect(downstream.Effects(keyOf(ns, "order-self"))).To(Equal(1))
	})

	It("fails a denied action with class Denied, and keeps waiting past an expired approval", func() {
		newTool(ns, testenv.WithApprovalRequired())
		Expect(alice.Create(ctx, newAction(ns, "order-deny", "charge", charge(70000)))).To(Succeed())
		Expect(alice.Create(ctx, newAction(ns, "order-late", "charge", charge(80)))).To(Succeed())
		late := awaiting("order-late")
		awaiting("order-deny")

		out, code := toolledger("bob", "deny", "order-deny", "--reason", "over the customer's limit", "--wait")
		Expect(code).To(Equal(kubectlplugin.ExitOK), out)
		denied := env.WaitForPhase(ns, "order-deny", v1alpha1.PhaseFailed)
		Expect(denied.Status.Error.Class).To(Equal(v1alpha1.ErrorClassDenied))
		Expect(denied.Status.Error.Reason).To(Equal("ApprovalDenied"))
		Expect(denied.Status.Approval.Decision).To(Equal(v1alpha1.Denied))
		Expect(conditionStatus(denied, v1alpha1.ConditionApproved)).To(Equal(metav1.ConditionFalse))
		Expect(denied.Status.Attempts).To(BeZero())
		noRequests("order-deny")

		expired := approval("bob-too-late", "order-late", late.Status.RequestDigest, v1alpha1.Approved)
		past := metav1.NewTime(time.Now().Add(-time.Minute).Truncate(time.Second))
		expired.Spec.ExpiresAt = &past
		Expect(bob.Create(ctx, expired)).To(Succeed())
		refused := applied("bob-too-late")
		Expect(refused.Status).To(Equal(metav1.ConditionFalse))
		Expect(refused.Reason).To(Equal("Expired"))
		Expect(awaiting("order-late").Status.Approval).To(BeNil())
		noRequests("order-late")
	})

	It("needs no new approval to retry under the key, and a new one for a compensation", func() {
		newTool(ns, testenv.WithApprovalRequired(), testenv.WithTimeout(time.Second), testenv.WithClass(v1alpha1.Compensatable))
		Expect(alice.Create(ctx, newAction(ns, "order-lost", "charge", charge(300)))).To(Succeed())
		lost := awaiting("order-lost")
		downstream.InjectFault(demo.Fault{Mode: demo.FaultDropBeforeCommit, Count: 1})
		out, code := toolledger("bob", "approve", "order-lost", "--digest", lost.Status.RequestDigest, "--reason", "confirmed")
		Expect(code).To(Equal(kubectlplugin.ExitOK), out)

		done := env.WaitForPhase(ns, "order-lost", v1alpha1.PhaseSucceeded)
		Expect(transitions(done)).To(Equal([]string{
			"AwaitingApproval/AwaitingApproval", "Accepted/Approved",
			"Executing/Executing", "Unknown/OutcomeUnknown", "Executing/AbsentByLookup", "Succeeded/Succeeded",
		}))
		key := keyOf(ns, "order-lost")
		Expect(downstream.Requests(key)).To(Equal(2), "the lost request and its retry, under one key")
		Expect(downstream.Effects(key)).To(Equal(1))
		var approvals v1alpha1.ToolApprovalList
		Expect(k8s.List(ctx, &approvals, client.InNamespace(ns))).To(Succeed())
		Expect(approvals.Items).To(HaveLen(1), "one approval for every attempt under the key")

		refund := newAction(ns, "order-lost-refund", "charge", charge(300))
		refund.Spec.Compensates = "order-lost"
		Expect(alice.Create(ctx, refund)).To(Succeed())
		Expect(awaiting("order-lost-refund").Status.Approval).To(BeNil(), "a compensation is a new intent")
		noRequests("order-lost-refund")
	})

	It("applies an approval made before its action, by key and digest, and never one bound to a deleted action", func() {
		newTool(ns, testenv.WithApprovalRequired())
		Expect(alice.Create(ctx, newAction(ns, "order-early", "charge", charge(640)))).To(Succeed())
		first := awaiting("order-early")
		// Withdrawn before anyone decided: nothing was sent, so nothing
		// keeps the key.
		Expect(alice.Delete(ctx, first)).NotTo(Succeed(), "an agent cannot delete records")
		Expect(k8s.Delete(ctx, first)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(first), &v1alpha1.ToolAction{}))
		}).Should(BeTrue())

		bound := approval("bob-for-the-deleted-one", "order-early", first.Status.RequestDigest, v1alpha1.Approved)
		bound.Spec.ActionUID = first.UID
		Expect(bob.Create(ctx, bound)).To(Succeed())
		ahead := approval("bob-ahead", "order-early", first.Status.RequestDigest, v1alpha1.Approved)
		Expect(bob.Create(ctx, ahead)).To(Succeed())
		Expect(applied("bob-ahead").Reason).To(Equal("ActionNotFound"))

		// The same intent again, applied twice with server-side apply as a
		// GitOps sync would: the stamped requester stays.
		manifest := specenv.WriteManifest(chargeManifest(ns, "order-early", 640))
		for range 2 {
			out, err := env.Kubectl("--as", "alice", "apply", "--server-side", "-f", manifest)
			Expect(err).NotTo(HaveOccurred(), out)
		}
		done := env.WaitForPhase(ns, "order-early", v1alpha1.PhaseSucceeded)
		Expect(done.UID).NotTo(Equal(first.UID))
		Expect(done.Annotations).To(HaveKeyWithValue(v1alpha1.RequestedByAnnotation, "alice"))
		Expect(done.Status.Approval.Name).To(Equal("bob-ahead"))
		Expect(downstream.Effects(keyOf(ns, "order-early"))).To(Equal(1))

		Eventually(func() string { return applied("bob-for-the-deleted-one").Reason }).Should(Equal("ActionReplaced"))
		Expect(applied("bob-for-the-deleted-one").Message).To(Equal(`the approval is for ToolAction "order-early" with UID ` + string(first.UID) +
			`, which was deleted; the ToolAction of that name now is another object (UID ` + string(done.UID) + `), created again, and needs a decision of its own`))
	})

	It("refuses the identity annotations set by hand, changed or removed", func() {
		newTool(ns, testenv.WithApprovalRequired())
		forged := newAction(ns, "order-forged", "charge", charge(1))
		forged.Annotations = map[string]string{v1alpha1.RequestedByAnnotation: "bob"}
		err := alice.Create(ctx, forged)
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring(`the annotation toolledger.dev/requested-by is stamped by the API server with the user who creates the ToolAction (you are "alice"); it cannot be set by hand to "bob": remove it from the manifest`))

		manifest := specenv.WriteManifest(strings.Replace(chargeManifest(ns, "order-forged-kubectl", 2), "  namespace: "+ns+"\n",
			"  namespace: "+ns+"\n  annotations:\n    toolledger.dev/requested-by: bob\n", 1))
		out, err := env.Kubectl("--as", "alice", "apply", "-f", manifest)
		Expect(err).To(HaveOccurred())
		Expect(out).To(ContainSubstring(`ValidatingAdmissionPolicy 'toolledger-identity' with binding 'toolledger-identity' denied request`))
		Expect(out).To(ContainSubstring(`it cannot be set by hand to "bob"`))

		Expect(alice.Create(ctx, newAction(ns, "order-real", "charge", charge(3)))).To(Succeed())
		waiting := awaiting("order-real")
		for _, change := range []func(*v1alpha1.ToolAction){
			func(a *v1alpha1.ToolAction) { a.Annotations[v1alpha1.RequestedByAnnotation] = "bob" },
			func(a *v1alpha1.ToolAction) { delete(a.Annotations, v1alpha1.RequestedByAnnotation) },
		} {
			changed := env.Get(ns, "order-real")
			change(changed)
			err := k8s.Update(ctx, changed)
			Expect(apierrors.IsForbidden(err)).To(BeTrue(), "even an admin: %v", err)
			Expect(err.Error()).To(ContainSubstring(`the annotation toolledger.dev/requested-by records who created this ToolAction ("alice") and cannot be set, changed or removed`))
		}

		decided := approval("bob-forged", "order-real", waiting.Status.RequestDigest, v1alpha1.Approved)
		decided.Annotations = map[string]string{v1alpha1.DecidedByAnnotation: "carol"}
		err = bob.Create(ctx, decided)
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring(`the annotation toolledger.dev/decided-by is stamped by the API server with the user who creates the ToolApproval (you are "bob")`))
		noRequests("order-real")
	})
})
