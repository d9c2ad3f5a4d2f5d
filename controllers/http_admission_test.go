package controllers_test

import (
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/toolledger/toolledger/internal/testenv/specenv"
)

// What the API server admits of these options is test/api's; this is what
// the Tool controller says of a Tool it admitted.
var _ = Describe("Admission of the HTTP adapter's options", func() {
	It("keeps a Tool whose URL placeholder the schema does not require from being Ready", func() {
		ns := env.NewTenant()
		out, err := env.Kubectl("apply", "-f", specenv.WriteManifest(fmt.Sprintf(`apiVersion: toolledger.dev/v1alpha1
kind: Tool
metadata: {name: balance, namespace: %s}
spec:
  operation: customers.balance
  version: v1
  idempotencyClass: KeyProtected
  parametersSchema:
    type: object
    properties:
      customer: {type: string}
  http:
    url: https://api.example/v1/customers/{customer}/balance_transactions
`, ns)))
		Expect(err).NotTo(HaveOccurred(), out)
		Eventually(func() string {
			out, _ := env.Kubectl("get", "tool", "balance", "-n", ns, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].reason}: {.status.conditions[?(@.type=="Ready")].message}`)
			return out
		}).Should(Equal("InvalidURL: spec.http.url: placeholder {customer} must name a required property of spec.parametersSchema"))
	})
})
