package controllers_test

import (
	"context"
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/testenv/specenv"
)

// controllerUpdates lists the managed-fields entries of updates to the
// action itself (not its status): the controller's finalizer write.
func controllerUpdates(action *v1alpha1.ToolAction) []string {
	var updates []string
	for _, entry := range action.ManagedFields {
		if entry.Operation == metav1.ManagedFieldsOperationUpdate && entry.Subresource == "" {
			updates = append(updates, entry.Manager)
		}
	}
	return updates
}

var _ = Describe("The outcome finalizer admission policy (config/admission)", Ordered, func() {
	// Not the whole kustomization: its guard policy would refuse this
	// suite's manager, which runs as an admin, the tombstones it writes.
	policy := filepath.Join("..", "config", "admission", "outcome_finalizer_policy.yaml")

	BeforeAll(func() {
		out, err := env.Kubectl("apply", "-f", policy)
		Expect(err).NotTo(HaveOccurred(), out)
		DeferCleanup(func() {
			out, err := env.Kubectl("delete", "-f", policy, "--ignore-not-found")
			Expect(err).NotTo(HaveOccurred(), out)
		})
	})

	It("gives a manifest its finalizer at creation, so the controller writes only the claim and the outcome", func() {
		ctx := context.Background()
		ns := env.NewTenant()
		newTool(ns)
		// The API server loads a new policy within moments; a server-side
		// dry run shows when it applies.
		probe := specenv.WriteManifest(chargeManifest(ns, "order-probe", 1))
		Eventually(func() string {
			out, _ := env.DryRunFinalizers(probe)
			return out
		}).Should(ContainSubstring(v1alpha1.Finalizer))

		manifest := specenv.WriteManifest(chargeManifest(ns, "order-4004", 4004))
		out, err := env.Kubectl("apply", "--server-side", "-f", manifest, "-o", "jsonpath={.metadata.finalizers}")
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(ContainSubstring(v1alpha1.Finalizer), "the finalizer is there from the first version")

		done := env.WaitForPhase(ns, "order-4004", v1alpha1.PhaseSucceeded)
		Expect(controllerUpdates(done)).To(BeEmpty(), "no write besides the create, the claim and the outcome")
		Expect(downstream.Effects(keyOf(ns, "order-4004"))).To(Equal(1))

		// The admission's finalizer belongs to no field manager, so applying
		// the same manifest again, as a GitOps sync does, keeps it.
		out, err = env.Kubectl("apply", "--server-side", "-f", manifest)
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(env.Get(ns, "order-4004").Finalizers).To(ContainElement(v1alpha1.Finalizer))

		Expect(k8s.Delete(ctx, done)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(done), &v1alpha1.ToolAction{}))
		}).Should(BeTrue())
	})
})

var _ = Describe("A manifest without the admission policy", func() {
	It("gets its finalizer from the controller, with one more write", func() {
		ns := env.NewTenant()
		newTool(ns)
		manifest := specenv.WriteManifest(chargeManifest(ns, "order-4006", 4006))
		// The policy of the spec above may still be unloading.
		Eventually(func() string {
			out, _ := env.DryRunFinalizers(manifest)
			return out
		}).Should(BeEmpty())
		out, err := env.Kubectl("apply", "--server-side", "-f", manifest)
		Expect(err).NotTo(HaveOccurred(), out)
		done := env.WaitForPhase(ns, "order-4006", v1alpha1.PhaseSucceeded)
		Expect(done.Finalizers).To(ContainElement(v1alpha1.Finalizer))
		Expect(controllerUpdates(done)).To(HaveLen(1))
	})
})
