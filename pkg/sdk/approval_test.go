package sdk_test

import (
	"context"
	"errors"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/testenv"
	"github.com/toolledger/toolledger/pkg/sdk"
)

var _ = Describe("Invoke on a tool that requires approval", Ordered, func() {
	BeforeAll(func() {
		remove, err := testenv.InstallIdentityPolicy(context.Background(), cfg, k8s, "default", "sdk-approval-spec")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(remove)
	})

	It("returns at once awaiting approval, and waits through the decision when asked", func() {
		ctx, ns := newSpec()
		// The suite's one user requests and approves.
		env.CreateTool(ns, "payout", testenv.WithApprovalRequired(), testenv.WithSelfApprovalAllowed())
		invoker, err := sdk.NewClient(cfg)
		Expect(err).NotTo(HaveOccurred())
		req := sdk.Request{Namespace: ns, Key: "payout-77", Tool: "payout", Parameters: map[string]any{"amount": 77, "currency": "EUR"}}

		outcome, err := invoker.Invoke(ctx, req)
		Expect(err).NotTo(HaveOccurred(), "awaiting approval is a state to report, not an error")
		Expect(outcome.AwaitingApproval()).To(BeTrue())
		Expect(outcome.Phase).To(Equal(v1alpha1.PhaseAwaitingApproval))
		Expect(outcome.RequestDigest).To(HavePrefix("sha256:"))
		Expect(outcome.RequestedBy).NotTo(BeEmpty())
		Expect(outcome.Approval).To(BeNil())

		short, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		waited, err := invoker.Invoke(short, req, sdk.WaitForApproval())
		Expect(errors.Is(err, context.DeadlineExceeded)).To(BeTrue(), "WaitForApproval waits through AwaitingApproval: %v", err)
		Expect(waited.Phase).To(Equal(v1alpha1.PhaseAwaitingApproval))

		type result struct {
			outcome *sdk.Outcome
			err     error
		}
		done := make(chan result, 1)
		go func() {
			defer GinkgoRecover()
			o, err := invoker.Invoke(ctx, req, sdk.WaitForApproval())
			done <- result{o, err}
		}()
		Expect(k8s.Create(ctx, &v1alpha1.ToolApproval{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "payout-77-ok"},
			Spec: v1alpha1.ToolApprovalSpec{ActionName: req.Key, RequestDigest: outcome.RequestDigest,
				Decision: v1alpha1.Approved, Reason: "within budget"},
		})).To(Succeed())
		var got result
		Eventually(done).Should(Receive(&got))
		Expect(got.err).NotTo(HaveOccurred())
		Expect(got.outcome.Phase).To(Equal(v1alpha1.PhaseSucceeded))
		Expect(got.outcome.Deduplicated).To(BeTrue(), "the first Invoke recorded the intent")
		Expect(got.outcome.Approval).NotTo(BeNil())
		Expect(got.outcome.Approval.Name).To(Equal("payout-77-ok"))
		Expect(got.outcome.Approval.DecidedBy).To(Equal(outcome.RequestedBy))
		Expect(downstream.Effects(ns + "/" + req.Key)).To(Equal(1))
	})
})
