package integration

import (
	"context"
	"fmt"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/testenv"
)

var _ = Describe("Three managers applying approvals", func() {
	It("apply one of two concurrent decisions per action, refuse the other, and dispatch an approved action once", func() {
		ctx := context.Background()
		remove, err := testenv.InstallIdentityPolicy(ctx, env.Config, k8s, "default", "integration")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(remove)
		for i := range 3 {
			startManager(fmt.Sprintf("approver-%d", i), nil)
		}
		waitForMembers(3, 3*time.Second)

		ns := env.NewTenant()
		// The suite's one user asks and approves.
		// A timeout long enough that no request times out on two busy
		// cores: each approved action then costs exactly one request.
		env.CreateTool(ns, "charge", testenv.WithClass(v1alpha1.Compensatable), testenv.WithTimeout(10*time.Second),
			testenv.WithKeyLookup(), testenv.WithApprovalRequired(), testenv.WithSelfApprovalAllowed())
		const actions = 30
		for i := range actions {
			Expect(k8s.Create(ctx, action(ns, fmt.Sprintf("order-%02d", i), 100+i))).To(Succeed())
		}
		digests := map[string]string{}
		Eventually(func(g Gomega) {
			var list v1alpha1.ToolActionList
			g.Expect(k8s.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
			for _, a := range list.Items {
				g.Expect(a.Status.Phase).To(Equal(v1alpha1.PhaseAwaitingApproval), "action %s", a.Name)
				digests[a.Name] = a.Status.RequestDigest
			}
			g.Expect(digests).To(HaveLen(actions))
		}).Should(Succeed())

		// Two approvers decide every action at once, as two people clicking
		// in a console would; for a third of the actions the second denies.
		var wg sync.WaitGroup
		i := 0
		for name, digest := range digests {
			second := v1alpha1.Approved
			if i%3 == 0 {
				second = v1alpha1.Denied
			}
			i++
			for who, decision := range map[string]v1alpha1.ApprovalDecision{"first": v1alpha1.Approved, "second": second} {
				wg.Add(1)
				go func() {
					defer GinkgoRecover()
					defer wg.Done()
					Expect(k8s.Create(ctx, &v1alpha1.ToolApproval{
						ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-" + who},
						Spec:       v1alpha1.ToolApprovalSpec{ActionName: name, RequestDigest: digest, Decision: decision, Reason: who},
					})).To(Succeed())
				}()
			}
		}
		wg.Wait()

		Eventually(func(g Gomega) {
			var list v1alpha1.ToolActionList
			g.Expect(k8s.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
			for _, a := range list.Items {
				g.Expect(a.Status.Phase).To(BeElementOf(v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed), "action %s", a.Name)
			}
		}, 2*time.Minute).Should(Succeed())

		var list v1alpha1.ToolActionList
		Expect(k8s.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
		applied := map[string]v1alpha1.ToolApproval{}
		Eventually(func(g Gomega) {
			var approvals v1alpha1.ToolApprovalList
			g.Expect(k8s.List(ctx, &approvals, client.InNamespace(ns))).To(Succeed())
			g.Expect(approvals.Items).To(HaveLen(2 * actions))
			applied = map[string]v1alpha1.ToolApproval{}
			for _, a := range approvals.Items {
				c := meta.FindStatusCondition(a.Status.Conditions, v1alpha1.ConditionApplied)
				g.Expect(c).NotTo(BeNil(), "approval %s", a.Name)
				switch c.Status {
				case metav1.ConditionTrue:
					g.Expect(applied).NotTo(HaveKey(a.Spec.ActionName), "two approvals applied to %s", a.Spec.ActionName)
					applied[a.Spec.ActionName] = a
				default:
					g.Expect(c.Reason).To(Equal("AlreadyDecided"), "approval %s", a.Name)
				}
			}
		}).Should(Succeed())
		outcomes := map[v1alpha1.ApprovalDecision]int{}
		for _, a := range list.Items {
			key := ns + "/" + a.Name
			decided := applied[a.Name]
			Expect(a.Status.Approval.Name).To(Equal(decided.Name), "the approval applied is the one recorded")
			decisions := 0
			for _, t := range a.Status.History {
				if t.Reason == "Approved" || t.Reason == "ApprovalDenied" {
					decisions++
				}
			}
			Expect(decisions).To(Equal(1), "history of %s: %v", a.Name, transitions(&a))
			want := map[v1alpha1.ApprovalDecision]struct {
				phase   v1alpha1.Phase
				effects int
			}{v1alpha1.Approved: {v1alpha1.PhaseSucceeded, 1}, v1alpha1.Denied: {v1alpha1.PhaseFailed, 0}}[decided.Spec.Decision]
			Expect(a.Status.Phase).To(Equal(want.phase), "%s was %s", a.Name, decided.Spec.Decision)
			Expect(downstream.Requests(key)).To(Equal(want.effects), "requests for %s", key)
			Expect(downstream.Effects(key)).To(Equal(want.effects), "effects for %s", key)
			outcomes[decided.Spec.Decision]++
		}
		Expect(applied).To(HaveLen(actions))
		AddReportEntry("decisions applied of two concurrent ones per action", fmt.Sprint(outcomes))
	})
})
