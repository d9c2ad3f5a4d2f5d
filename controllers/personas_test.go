package controllers_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/demo"
	"github.com/toolledger/toolledger/internal/testenv"
	"github.com/toolledger/toolledger/internal/testenv/specenv"
)

// The persona spec that needs the controller: a resolver settles an
// escalated action. What RBAC alone decides of the personas is test/api's.
var _ = Describe("Persona roles", Ordered, func() {
	ctx := context.Background()

	BeforeAll(func() {
		env.InstallPersonaRoles()
	})

	It("lets a resolver bound in the namespace, with the ClusterTool reader bound cluster-wide, resolve an escalated action of a ClusterTool it cannot publish", func() {
		removeIdentity, err := testenv.InstallIdentityPolicy(ctx, cfg, k8s, "default", "persona-specs")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(removeIdentity)

		ns := env.NewTenant()
		platform := env.CreateClusterTool("platform-sms-"+ns, specenv.OnlyNamespace(ns),
			testenv.WithOperation("messages.sms"), testenv.WithClass(v1alpha1.NonRepeatable), testenv.WithTimeout(5*time.Second))

		resolver := "ops@" + ns
		env.BindIn(ns, "toolledger-resolver", resolver)
		ops := env.Impersonate(resolver)
		Eventually(func() error { return ops.List(ctx, &v1alpha1.ToolActionList{}, client.InNamespace(ns)) }).Should(Succeed())
		Expect(apierrors.IsForbidden(ops.Get(ctx, client.ObjectKeyFromObject(platform), &v1alpha1.ClusterTool{}))).To(BeTrue(),
			"a RoleBinding of the resolver role does not reach ClusterTools")
		env.BindClusterWide("toolledger-clustertool-reader", resolver)
		Eventually(func() error { return ops.Get(ctx, client.ObjectKeyFromObject(platform), &v1alpha1.ClusterTool{}) }).Should(Succeed())
		env.CannotPublish(ops, resolver, platform)

		// The agent is a namespace editor: toolledger-agent reaches edit
		// through the aggregation, and invoking a ClusterTool needs no read of it.
		agentName := "agent@" + ns
		env.BindIn(ns, "edit", agentName)
		agent := env.Impersonate(agentName)
		downstream.InjectFault(demo.Fault{Mode: demo.FaultDropAfterCommit, Count: 1})
		action := newAction(ns, "sms-1001", platform.Name, charge(40))
		action.Spec.ToolRef.Kind = v1alpha1.KindClusterTool
		Eventually(func() error { return agent.Create(ctx, action) }).Should(Succeed(), "edit grants ToolActions")

		escalated := env.WaitForPhase(ns, "sms-1001", v1alpha1.PhaseEscalated)
		Expect(escalated.Annotations).To(HaveKeyWithValue(v1alpha1.RequestedByAnnotation, agentName))
		Expect(escalated.Status.Error.Class).To(Equal(v1alpha1.ErrorClassOutcomeUnknown))
		Expect(escalated.Status.Error.Message).To(Equal("the outcome of attempt 1 is unknown and a NonRepeatable tool is never repeated or settled automatically; resolve it with a ToolResolution"))
		key := keyOf(ns, "sms-1001")
		sent, ok := downstream.Charge(key)
		Expect(ok).To(BeTrue(), "the dropped request did apply")

		resolution := &v1alpha1.ToolResolution{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sms-1001-checked"},
			Spec: v1alpha1.ToolResolutionSpec{
				ActionName:  "sms-1001",
				Attempt:     1,
				Outcome:     v1alpha1.ResolvedSucceeded,
				ExternalRef: sent.ID,
				Reason:      "the provider's log shows the message sent",
			},
		}
		Expect(ops.Create(ctx, resolution)).To(Succeed())

		done := env.WaitForPhase(ns, "sms-1001", v1alpha1.PhaseSucceeded)
		Expect(done.Status.ExternalRef).To(Equal(sent.ID))
		Expect(done.Status.Error).To(BeNil())
		Expect(transitions(done)).To(Equal([]string{
			"Executing/Executing", "Unknown/OutcomeUnknown", "Escalated/OutcomeUnknown", "Succeeded/Resolved",
		}))
		last := done.Status.History[len(done.Status.History)-1]
		Expect(last.Executor).To(Equal("toolresolution/sms-1001-checked"))
		Expect(last.Message).To(Equal("resolved as Succeeded by " + resolver + " (ToolResolution sms-1001-checked): the provider's log shows the message sent"))
		Eventually(func(g Gomega) {
			var applied v1alpha1.ToolResolution
			g.Expect(ops.Get(ctx, client.ObjectKeyFromObject(resolution), &applied)).To(Succeed())
			g.Expect(applied.Annotations).To(HaveKeyWithValue(v1alpha1.ResolvedByAnnotation, resolver))
			condition := meta.FindStatusCondition(applied.Status.Conditions, v1alpha1.ConditionApplied)
			g.Expect(condition).NotTo(BeNil())
			g.Expect(condition.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(applied.Status.AppliedTime).NotTo(BeNil())
		}).Should(Succeed())
		Expect(downstream.Requests(key)).To(Equal(1))
		Expect(downstream.Effects(key)).To(Equal(1))

		done.Status.Phase = v1alpha1.PhaseFailed
		Expect(apierrors.IsForbidden(ops.Status().Update(ctx, done))).To(BeTrue(), "a resolver cannot rewrite the ledger")
	})
})
