package api

import (
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/testenv"
	"github.com/toolledger/toolledger/internal/testenv/specenv"
)

var _ = Describe("The outcome finalizer admission policy (config/admission)", Ordered, func() {
	// Not the whole kustomization: the other policies would change what the
	// other specs of this suite create.
	policy := filepath.Join("..", "..", "config", "admission", "outcome_finalizer_policy.yaml")

	BeforeAll(func() {
		out, err := env.Kubectl("apply", "-f", policy)
		Expect(err).NotTo(HaveOccurred(), out)
		DeferCleanup(func() {
			out, err := env.Kubectl("delete", "-f", policy, "--ignore-not-found")
			Expect(err).NotTo(HaveOccurred(), out)
		})
		// The API server loads a new policy within moments; a server-side
		// dry run shows when it applies, and the specs need it applied.
		probe := specenv.WriteManifest(testenv.ChargeManifest(env.NewTenant(), "order-probe", 1, "cus_42"))
		Eventually(func() string {
			out, _ := env.DryRunFinalizers(probe)
			return out
		}).Should(ContainSubstring(v1alpha1.Finalizer))
	})

	It("leaves a finalizer list that already has it as it is", func() {
		ns := env.NewTenant()
		manifest := strings.Replace(testenv.ChargeManifest(ns, "order-4005", 4005, "cus_42"), "  namespace: "+ns+"\n",
			"  namespace: "+ns+"\n  finalizers: [example.com/keep, "+v1alpha1.Finalizer+"]\n", 1)
		out, err := env.DryRunFinalizers(specenv.WriteManifest(manifest))
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(Equal(`["example.com/keep","` + v1alpha1.Finalizer + `"]`))
	})
})
