package api

import (
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/toolledger/toolledger/internal/testenv/specenv"
)

var _ = Describe("The adapter union", func() {
	It("refuses a Tool that names no adapter, with a message that says so", func() {
		ns := env.NewTenant()
		manifest := specenv.WriteManifest(fmt.Sprintf(`apiVersion: toolledger.dev/v1alpha1
kind: Tool
metadata: {name: nothing, namespace: %s}
spec: {operation: x, version: v1, idempotencyClass: ReadOnly}
`, ns))
		out, err := env.Kubectl("apply", "-f", manifest)
		Expect(err).To(HaveOccurred())
		Expect(out).To(ContainSubstring(`The Tool "nothing" is invalid: spec: Invalid value: exactly one adapter must be set (http or kubernetesApply)`))
	})
})
