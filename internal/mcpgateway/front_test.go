package mcpgateway_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/stripe/stripe-go/v85"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/mcpgateway"
	"github.com/toolledger/toolledger/internal/testenv/specenv"
	"github.com/toolledger/toolledger/pkg/sdk"
)

// seen is what a relay saw: each request's Idempotency-Key, the answer's
// status and its Idempotent-Replayed.
func seen(r *specenv.Relay) (keys []string, statuses []int, replayed []string) {
	for _, s := range r.Sent("") {
		keys = append(keys, s.Header.Get("Idempotency-Key"))
		statuses = append(statuses, s.Status)
		replayed = append(replayed, s.Answer.Get("Idempotent-Replayed"))
	}
	return keys, statuses, replayed
}

var _ = Describe("The gateway's plain HTTP front", func() {
	It("gives Stripe's own Go client one charge through its retries, a replay marked as one, 422 for a changed request and 409 while in flight", func() {
		ctx := context.Background()
		ns := env.NewTenant()
		// The ledger charges stripe-mock through a relay that counts charges.
		stripeSide := specenv.NewRelay(specenv.StripeMock())
		Expect(k8s.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "stripe", Labels: map[string]string{v1alpha1.ToolCredentialLabel: "true"}},
			StringData: map[string]string{"authorization": "Bearer sk_test_4eC39HqLyjWDarjtT1zdp7dc"},
		})).To(Succeed())
		var tool v1alpha1.Tool
		Expect(yaml.UnmarshalStrict([]byte(fmt.Sprintf(`apiVersion: toolledger.dev/v1alpha1
kind: Tool
metadata: {name: charges, namespace: %s}
spec:
  operation: payments.charge
  version: "2024-06-20"
  idempotencyClass: KeyProtected
  clientKeyRequired: true
  keyRetention: 48h
  downstreamKeyRetention: 24h
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
    url: %s/v1/charges
    encoding: Form
    idempotencyKey: {format: Raw, maxLength: 255}
    authHeader: {secretKeyRef: {name: stripe, key: authorization}}
    lookup: {strategy: Replay, replayWindow: 24h}
    response:
      externalIDPointer: /id
      resultPointers: [/id, /object, /amount, /currency, /status]
`, ns, stripeSide.URL)), &tool)).To(Succeed())
		Expect(k8s.Create(ctx, &tool)).To(Succeed())

		served := serveToAnAgent(ns, time.Second, "charges")
		agentToken, agentName := served.agentToken, served.agentName

		// Stripe's client reaches the front through a relay that can lose an answer.
		clientSide := specenv.NewRelay(served.base)
		stripeClient := func(retries int64) *stripe.Client {
			return stripe.NewClient(agentToken, stripe.WithBackends(stripe.NewBackendsWithConfig(&stripe.BackendConfig{
				URL: stripe.String(clientSide.URL), MaxNetworkRetries: stripe.Int64(retries),
			})))
		}
		params := func(amount int64, key string) *stripe.ChargeCreateParams {
			p := &stripe.ChargeCreateParams{Amount: stripe.Int64(amount), Currency: stripe.String("usd"), Description: stripe.String("Order 7001"),
				Metadata: map[string]string{"order": "7001"}}
			Expect(p.SetSource("tok_visa")).To(Succeed())
			if key != "" {
				p.SetIdempotencyKey(key)
			}
			return p
		}

		By("losing the first answer: the client's retry under its own key is answered from the record, one charge")
		clientSide.LoseNextAnswer()
		charge, err := stripeClient(2).V1Charges.Create(ctx, params(2000, ""))
		Expect(err).NotTo(HaveOccurred())
		Expect(charge.ID).To(MatchRegexp(`^ch_`))
		Expect(charge.Amount).To(BeEquivalentTo(2000))
		Expect(charge.LastResponse.Header.Get("Idempotent-Replayed")).To(Equal("true"))
		key := charge.LastResponse.IdempotencyKey
		keys, statuses, replayed := seen(clientSide)
		Expect(keys).To(Equal([]string{key, key}), "the client retried under the key it minted")
		Expect(statuses).To(Equal([]int{200, 200}))
		Expect(replayed).To(Equal([]string{"", "true"}))
		name := sdk.ClientKey(agentName, "charges", key)
		action := env.Get(ns, name)
		Expect(action.Spec.ClientKey).To(Equal(key))
		Expect(action.Status.ExternalRef).To(Equal(charge.ID))
		Expect(action.Status.KeptUntil.Time).To(BeTemporally("==", action.Status.CompletionTime.Add(48*time.Hour)))
		Expect(action.Status.DownstreamKeptUntil.Time).To(BeTemporally("==", action.Status.StartTime.Add(24*time.Hour)))
		Expect(charge.LastResponse.Header.Get("Toolledger-Kept-Until")).To(Equal(action.Status.KeptUntil.UTC().Format(http.TimeFormat)))
		Expect(charge.LastResponse.Header.Get("Toolledger-Downstream-Kept-Until")).To(Equal(action.Status.DownstreamKeptUntil.UTC().Format(http.TimeFormat)))
		Expect(action.Spec.Parameters["amount"].Raw).To(MatchJSON(`2000`), "the form's amount is typed by the Tool's schema")
		Expect(action.Spec.Parameters["metadata"].Raw).To(MatchJSON(`{"order":"7001"}`))
		downstreamKeys, _, _ := seen(stripeSide)
		Expect(downstreamKeys).To(Equal([]string{ns + "/" + name}), "one charge reached Stripe")

		By("refusing a changed request under the key with 422, executing nothing")
		_, err = stripeClient(2).V1Charges.Create(ctx, params(2100, key))
		Expect(err).To(MatchError(ContainSubstring(`"code":"idempotency_conflict"`)))
		_, statuses, _ = seen(clientSide)
		Expect(statuses[len(statuses)-1]).To(Equal(http.StatusUnprocessableEntity))
		downstreamKeys, _, _ = seen(stripeSide)
		Expect(downstreamKeys).To(HaveLen(1))

		By("answering a concurrent duplicate 409 while the first is in flight, then the one charge to a retry")
		stripeSide.HoldNext(3 * time.Second)
		slow := "order-7002-" + strings.Repeat("x", 8)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i := range errs {
			wg.Go(func() {
				time.Sleep(time.Duration(i) * 300 * time.Millisecond)
				_, errs[i] = stripeClient(0).V1Charges.Create(ctx, params(3000, slow))
			})
		}
		wg.Wait()
		for _, err := range errs {
			Expect(err).To(MatchError(ContainSubstring(`"code":"idempotency_in_flight"`)))
		}
		Eventually(func() error {
			_, err := stripeClient(0).V1Charges.Create(ctx, params(3000, slow))
			return err
		}).WithTimeout(20 * time.Second).WithPolling(500 * time.Millisecond).Should(Succeed())
		downstreamKeys, _, _ = seen(stripeSide)
		Expect(downstreamKeys).To(HaveLen(2), "one more charge, for the second key only")

		By("refusing a POST without a key with 400, and taking a quoted key as the bare one")
		post := func(key string, body string) *http.Response {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, served.base+mcpgateway.FrontPath+"charges", strings.NewReader(body))
			Expect(err).NotTo(HaveOccurred())
			req.Header.Set("Authorization", "Bearer "+agentToken)
			req.Header.Set("Content-Type", "application/json")
			if key != "" {
				req.Header.Set("Idempotency-Key", key)
			}
			resp, err := http.DefaultClient.Do(req)
			Expect(err).NotTo(HaveOccurred())
			return resp
		}
		body := func(resp *http.Response) string {
			defer func() { _ = resp.Body.Close() }()
			b, err := io.ReadAll(resp.Body)
			Expect(err).NotTo(HaveOccurred())
			return string(b)
		}
		resp := post("", `{"amount":2000,"currency":"usd","source":"tok_visa"}`)
		Expect(resp.StatusCode).To(Equal(http.StatusBadRequest))
		Expect(body(resp)).To(MatchJSON(`{"type":"invalid_request","code":"idempotency_key_required","message":"an Idempotency-Key header is required on every POST; nothing was recorded"}`))
		resp = post("order-7003", `{"amount":12345678901234567891,"currency":"usd","source":"tok_visa"}`)
		Expect(resp.StatusCode).To(Equal(http.StatusBadRequest), "an integer beyond 2^53 is no request, not a ledger out of reach")
		Expect(body(resp)).To(ContainSubstring(`"code":"invalid_parameters"`))
		resp = post(`"`+slow+`"`, `{"amount":3000,"currency":"usd","source":"tok_visa","description":"Order 7001","metadata":{"order":"7001"}}`)
		Expect(body(resp)).To(MatchJSON(`{"id":"` + env.Get(ns, sdk.ClientKey(agentName, "charges", slow)).Status.ExternalRef + `","object":"charge","amount":3000,"currency":"usd","status":"succeeded"}`))
		Expect(resp.StatusCode).To(Equal(http.StatusOK))
		Expect(resp.Header.Get("Idempotent-Replayed")).To(Equal("true"))
		kept := env.Get(ns, sdk.ClientKey(agentName, "charges", slow)).Status.KeptUntil
		Expect(resp.Header.Get("Toolledger-Kept-Until")).To(Equal(kept.UTC().Format(http.TimeFormat)))
		downstreamKeys, _, _ = seen(stripeSide)
		Expect(downstreamKeys).To(HaveLen(2))
	})
})
