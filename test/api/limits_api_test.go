package api

import (
	"context"
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/testenv/specenv"
)

var _ = Describe("The dispatch limits API", func() {
	toolManifest := func(ns, name, extra string) string {
		return specenv.WriteManifest(fmt.Sprintf(`apiVersion: toolledger.dev/v1alpha1
kind: Tool
metadata: {name: %s, namespace: %s}
spec:
  operation: payments.charge
  version: v1
  idempotencyClass: KeyProtected
%s`, name, ns, extra))
	}

	It("defaults a Tool's limits to 16 calls in flight and 25 a second", func() {
		ns := env.NewTenant()
		out, err := env.Kubectl("apply", "-f", toolManifest(ns, "charge", `  http: {url: "http://127.0.0.1:1/charges"}
`))
		Expect(err).NotTo(HaveOccurred(), out)
		var tool v1alpha1.Tool
		Expect(k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "charge"}, &tool)).To(Succeed())
		Expect(tool.Spec.Limits).To(Equal(v1alpha1.DispatchLimits{MaxInFlight: v1alpha1.DefaultMaxInFlight, RequestsPerSecond: v1alpha1.DefaultRequestsPerSecond}))
		Expect(tool.Spec.HTTP.Timeout.Duration.String()).To(Equal("10s"))
	})

	It("refuses an http.timeout beyond five minutes, and says how to model a longer operation", func() {
		ns := env.NewTenant()
		out, err := env.Kubectl("apply", "-f", toolManifest(ns, "report", `  http: {url: "http://127.0.0.1:1/reports", timeout: 24h}
`))
		Expect(err).To(HaveOccurred())
		Expect(out).To(ContainSubstring(`spec.http.timeout: Invalid value: "24h": timeout must be more than 0s and at most 5m: model a longer operation as a tool that starts it and one that reads its state`))
	})

	It("refuses limits out of range", func() {
		ns := env.NewTenant()
		out, err := env.Kubectl("apply", "-f", toolManifest(ns, "charge", `  http: {url: "http://127.0.0.1:1/charges"}
  limits: {maxInFlight: 0, requestsPerSecond: 20000}
`))
		Expect(err).To(HaveOccurred())
		Expect(out).To(ContainSubstring(`spec.limits.maxInFlight: Invalid value: 0: spec.limits.maxInFlight in body should be greater than or equal to 1`))
		Expect(out).To(ContainSubstring(`spec.limits.requestsPerSecond: Invalid value: 20000: spec.limits.requestsPerSecond in body should be less than or equal to 10000`))
	})
})
