package controllers_test

import (
	"context"
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/testenv/specenv"
)

var _ = Describe("A Stripe-shaped API, through stripe-mock", func() {
	It("charges and refunds with form-encoded bodies, the raw key and the secret only in Authorization; a lost answer is settled by Stripe's replay", func() {
		ns := env.NewTenant()
		stripe := specenv.NewRelay(specenv.StripeMock(), "/v1/charges")
		const secretKey = "sk_test_4eC39HqLyjWDarjtT1zdp7dc"
		Expect(k8s.Create(context.Background(), &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "stripe", Labels: map[string]string{v1alpha1.ToolCredentialLabel: "true"}},
			StringData: map[string]string{"authorization": "Bearer " + secretKey},
		})).To(Succeed())

		tools := fmt.Sprintf(`apiVersion: toolledger.dev/v1alpha1
kind: Tool
metadata: {name: stripe-charge, namespace: %[1]s}
spec:
  operation: payments.charge
  version: "2024-06-20"
  idempotencyClass: KeyProtected
  parametersSchema:
    type: object
    required: [amount, currency, source]
    properties:
      amount: {type: integer, minimum: 50}
      currency: {type: string}
      source: {type: string}
      description: {type: string}
      metadata: {type: object, additionalProperties: {type: string}}
  http:
    url: %[2]s/v1/charges
    encoding: Form
    idempotencyKey: {format: Raw, maxLength: 255}
    authHeader: {secretKeyRef: {name: stripe, key: authorization}}
    lookup: {strategy: Replay, replayWindow: 24h}
    response:
      externalIDPointer: /id
      resultPointers: [/status, /amount]
      errorCodePointer: /error/code
---
apiVersion: toolledger.dev/v1alpha1
kind: Tool
metadata: {name: stripe-refund, namespace: %[1]s}
spec:
  operation: payments.refund
  version: "2024-06-20"
  idempotencyClass: KeyProtected
  parametersSchema:
    type: object
    required: [charge]
    properties:
      charge: {type: string, pattern: "^ch_"}
      metadata: {type: object, additionalProperties: {type: string}}
  http:
    url: %[2]s/v1/refunds
    encoding: Form
    idempotencyKey: {format: Raw}
    authHeader: {secretKeyRef: {name: stripe, key: authorization}}
    lookup: {strategy: Replay, replayWindow: 24h}
    response: {externalIDPointer: /id, resultPointers: [/status]}
`, ns, stripe.URL)
		out, err := env.Kubectl("apply", "-f", specenv.WriteManifest(tools))
		Expect(err).NotTo(HaveOccurred(), out)
		for _, name := range []string{"stripe-charge", "stripe-refund"} {
			Eventually(func(g Gomega) {
				var tool v1alpha1.Tool
				g.Expect(k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &tool)).To(Succeed())
				g.Expect(tool.Status.Conditions).To(ContainElement(HaveField("Type", "Ready")))
				for _, c := range tool.Status.Conditions {
					if c.Type == "Ready" {
						g.Expect(c.Status).To(Equal(metav1.ConditionTrue), c.Message)
					}
				}
			}).Should(Succeed())
		}

		out, err = env.Kubectl("apply", "-f", specenv.WriteManifest(fmt.Sprintf(`apiVersion: toolledger.dev/v1alpha1
kind: ToolAction
metadata: {name: order-1001-charge, namespace: %s}
spec:
  toolRef: {name: stripe-charge}
  parameters:
    amount: 2000
    currency: usd
    source: tok_visa
    description: Order 1001
    metadata: {order: "1001", channel: agent}
`, ns)))
		Expect(err).NotTo(HaveOccurred(), out)
		charge := env.WaitForPhase(ns, "order-1001-charge", v1alpha1.PhaseSucceeded)
		Expect(charge.Status.ExternalRef).To(MatchRegexp(`^ch_[A-Za-z0-9]+$`))
		Expect(string(charge.Status.Result.Raw)).To(MatchJSON(`{"status":"succeeded","amount":2000}`))
		Expect(transitions(charge)).To(Equal([]string{"Executing/Executing", "Unknown/OutcomeUnknown", "Succeeded/FoundByLookup"}))

		// The answer to the first request was lost; Stripe's replay under the
		// same key is the lookup: two identical requests, both valid.
		charges := stripe.Sent("/v1/charges")
		Expect(charges).To(HaveLen(2))
		for _, sent := range charges {
			Expect(sent.Status).To(Equal(200), sent.Body)
			Expect(sent.Header.Get("Content-Type")).To(Equal("application/x-www-form-urlencoded"))
			Expect(sent.Body).To(Equal("amount=2000&currency=usd&description=Order+1001&metadata[channel]=agent&metadata[order]=1001&source=tok_visa"))
			Expect(sent.Header.Values("Idempotency-Key")).To(Equal([]string{ns + "/order-1001-charge"}))
			Expect(sent.Header.Values("Authorization")).To(Equal([]string{"Bearer " + secretKey}))
			expectSecretOnlyInAuthorization(sent, secretKey)
		}

		out, err = env.Kubectl("apply", "-f", specenv.WriteManifest(fmt.Sprintf(`apiVersion: toolledger.dev/v1alpha1
kind: ToolAction
metadata: {name: order-1001-refund, namespace: %s}
spec:
  toolRef: {name: stripe-refund}
  compensates: order-1001-charge
  parameters:
    charge: %s
    metadata: {reason: order cancelled}
`, ns, charge.Status.ExternalRef)))
		Expect(err).NotTo(HaveOccurred(), out)
		refund := env.WaitForPhase(ns, "order-1001-refund", v1alpha1.PhaseSucceeded)
		Expect(refund.Status.ExternalRef).To(MatchRegexp(`^re_[A-Za-z0-9]+$`))
		refunds := stripe.Sent("/v1/refunds")
		Expect(refunds).To(HaveLen(1))
		Expect(refunds[0].Status).To(Equal(200), refunds[0].Body)
		Expect(refunds[0].Body).To(Equal("charge=" + charge.Status.ExternalRef + "&metadata[reason]=order+cancelled"))
		Expect(refunds[0].Header.Values("Idempotency-Key")).To(Equal([]string{ns + "/order-1001-refund"}))
		expectSecretOnlyInAuthorization(refunds[0], secretKey)

		Eventually(func(g Gomega) {
			var original v1alpha1.ToolAction
			g.Expect(k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "order-1001-charge"}, &original)).To(Succeed())
			g.Expect(original.Status.CompensatedBy).To(Equal([]string{"order-1001-refund"}))
		}).Should(Succeed())
	})

	It("keeps Stripe's error code and not its message when stripe-mock refuses a request", func() {
		ns := env.NewTenant()
		stripe := specenv.NewRelay(specenv.StripeMock())
		Expect(k8s.Create(context.Background(), &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "stripe", Labels: map[string]string{v1alpha1.ToolCredentialLabel: "true"}},
			StringData: map[string]string{"authorization": "Bearer sk_test_123"},
		})).To(Succeed())
		// Sent as JSON, which Stripe does not read: stripe-mock refuses it.
		out, err := env.Kubectl("apply", "-f", specenv.WriteManifest(fmt.Sprintf(`apiVersion: toolledger.dev/v1alpha1
kind: Tool
metadata: {name: stripe-json, namespace: %[1]s}
spec:
  operation: payments.charge
  version: v1
  idempotencyClass: KeyProtected
  http:
    url: %[2]s/v1/charges
    authHeader: {secretKeyRef: {name: stripe, key: authorization}}
    response: {errorCodePointer: /error/type}
---
apiVersion: toolledger.dev/v1alpha1
kind: ToolAction
metadata: {name: json-charge, namespace: %[1]s}
spec:
  toolRef: {name: stripe-json}
  parameters: {amount: 2000, currency: usd, source: tok_visa}
`, ns, stripe.URL)))
		Expect(err).NotTo(HaveOccurred(), out)
		failed := env.WaitForPhase(ns, "json-charge", v1alpha1.PhaseFailed)
		Expect(failed.Status.Error.Class).To(Equal(v1alpha1.ErrorClassInvalidInput))
		Expect(failed.Status.Error.Reason).To(Equal("HTTP400"))
		Expect(failed.Status.Error.Message).To(MatchRegexp(`^HTTP400: downstream answered 400 \(error code "invalid_request_error"\); body of \d+ bytes, sha256:[0-9a-f]{16}, not stored$`))
		Expect(stripe.Sent("/v1/charges")).To(HaveLen(1))
	})
})

// expectSecretOnlyInAuthorization: the API key is in no other header, in
// no URL and in no body.
func expectSecretOnlyInAuthorization(sent specenv.Relayed, secret string) {
	GinkgoHelper()
	for name, values := range sent.Header {
		if name == "Authorization" {
			continue
		}
		for _, v := range values {
			Expect(v).NotTo(ContainSubstring(secret), "header %s", name)
		}
	}
	Expect(sent.Path).NotTo(ContainSubstring(secret))
	Expect(sent.Body).NotTo(ContainSubstring(secret))
}
