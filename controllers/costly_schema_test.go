package controllers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/testenv"
)

// A schema whose check costs more than linear time would let one tenant
// hold every worker of the manager: kube-openapi checks uniqueItems by
// comparing every pair of items.
var _ = Describe("Costly schemas", func() {
	It("refuses uniqueItems and costly parameters finally while another tenant's action is served", func() {
		ctx := context.Background()
		hostile, healthy := env.NewTenant(), env.NewTenant()

		uniqueItems := `{"type": "object", "properties": {"ids": {"type": "array", "items": {"type": "number"}, "uniqueItems": true}}}`
		env.CreateTool(hostile, "unique", testenv.WithParametersSchema(uniqueItems))
		branches := make([]string, 8)
		for i := range branches {
			branches[i] = fmt.Sprintf(`{"minimum": %d}`, i)
		}
		env.CreateTool(hostile, "branches", testenv.WithParametersSchema(
			`{"type": "object", "properties": {"ids": {"type": "array", "items": {"anyOf": [`+strings.Join(branches, ", ")+`]}}}}`))
		createTool(healthy, "charge")

		By("creating 8 actions of 150,000 distinct numbers each (under 1 MiB), a quadratic check's worst case")
		numbers := make([]string, 150_000)
		for i := range numbers {
			numbers[i] = strconv.Itoa(i)
		}
		payload := map[string]apiextensionsv1.JSON{"ids": {Raw: []byte("[" + strings.Join(numbers, ",") + "]")}}
		encoded, err := json.Marshal(payload)
		Expect(err).NotTo(HaveOccurred())
		Expect(len(encoded)).To(BeNumerically("<", v1alpha1.MaxParametersBytes))
		for i := range 8 {
			Expect(k8s.Create(ctx, newAction(hostile, fmt.Sprintf("unique-%d", i), "unique", payload))).To(Succeed())
		}
		Expect(k8s.Create(ctx, newAction(hostile, "branches", "branches", payload))).To(Succeed())

		By("serving the healthy tenant's action exactly once meanwhile")
		Expect(k8s.Create(ctx, newAction(healthy, "pay-1", "charge", charge(100)))).To(Succeed())
		env.WaitForPhase(healthy, "pay-1", v1alpha1.PhaseSucceeded)
		Expect(downstream.Effects(keyOf(healthy, "pay-1"))).To(Equal(1))

		By("refusing the uniqueItems Tool and its actions, finally and clearly, sending nothing")
		Eventually(func(g Gomega) {
			ready := toolCondition(g, hostile, "unique")
			g.Expect(ready.Reason).To(Equal("UnsupportedSchema"))
			g.Expect(ready.Message).To(Equal(`spec.parametersSchema: parametersSchema.properties[ids]: "uniqueItems" is not supported: ` +
				`checking it takes time quadratic in the array's length, as a CRD schema refuses it too`))
		}).Should(Succeed())
		for i := range 8 {
			key := fmt.Sprintf("unique-%d", i)
			failed := env.WaitForPhase(hostile, key, v1alpha1.PhaseFailed)
			Expect(failed.Status.Error.Class).To(Equal(v1alpha1.ErrorClassInvalidInput))
			Expect(failed.Status.Error.Reason).To(Equal("InvalidToolContract"))
			Expect(failed.Status.Error.Message).To(Equal(`tool "unique": parametersSchema.properties[ids]: "uniqueItems" is not supported: ` +
				`checking it takes time quadratic in the array's length, as a CRD schema refuses it too`))
			Expect(failed.Status.Attempts).To(BeZero())
			Expect(downstream.Requests(keyOf(hostile, key))).To(BeZero())
		}

		By("refusing parameters whose check would cost over the bound, before checking any")
		costly := env.WaitForPhase(hostile, "branches", v1alpha1.PhaseFailed)
		Expect(costly.Status.Error.Class).To(Equal(v1alpha1.ErrorClassInvalidInput))
		Expect(costly.Status.Error.Reason).To(Equal("InvalidParameters"))
		Expect(costly.Status.Error.Message).To(Equal("spec.parameters hold 150002 values and the tool's parametersSchema costs up to 576 to check each: " +
			"86401152 is over the limit of 33554432; send fewer values"))
		Expect(downstream.Requests(keyOf(hostile, "branches"))).To(BeZero())
	})
})
