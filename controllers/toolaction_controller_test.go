package controllers_test

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/demo"
	"github.com/toolledger/toolledger/internal/testenv"
	"github.com/toolledger/toolledger/internal/testenv/specenv"
	"github.com/toolledger/toolledger/pkg/digest"
)

const immutableMessage = "spec is immutable: this idempotency key (metadata.name) already records a different request; use a new name for a new intent"

var _ = Describe("ToolAction", func() {
	ctx := context.Background()
	var ns string
	BeforeEach(func() { ns = env.NewTenant() })

	Context("on the happy path", func() {
		It("executes once and records the external id, result, digest and key", func() {
			newTool(ns)
			action := newAction(ns, "order-1001", "charge", charge(1000))
			action.Spec.Provenance = &v1alpha1.Provenance{
				RunID: "run-7", StepID: "step-3", ParentTaskID: "task-1", TraceID: "4bf92f3577b34da6a3ce929d0e0e4736",
				Principals: []string{"user:alice", "agent:billing"},
			}
			Expect(k8s.Create(ctx, action)).To(Succeed())

			done := env.WaitForPhase(ns, "order-1001", v1alpha1.PhaseSucceeded)
			key := keyOf(ns, "order-1001")
			Expect(downstream.Requests(key)).To(Equal(1))
			Expect(downstream.Effects(key)).To(Equal(1))

			charged, ok := downstream.Charge(key)
			Expect(ok).To(BeTrue())
			Expect(done.Status.ExternalRef).To(Equal(charged.ID))
			Expect(done.Status.Result).NotTo(BeNil())
			Expect(done.Status.Result.Raw).To(MatchJSON(`{"status":"succeeded","amount":1000,"currency":"EUR"}`))
			Expect(done.Status.IdempotencyKey).To(Equal(key))
			Expect(done.Status.Attempts).To(Equal(int32(1)))
			Expect(done.Status.Error).To(BeNil())
			Expect(done.Status.StartTime).NotTo(BeNil())
			Expect(done.Status.CompletionTime).NotTo(BeNil())
			Expect(done.Status.Claim.Executor).To(Equal(executorID))
			Expect(done.Status.ObservedGeneration).To(Equal(done.Generation))

			wantDigest, err := digest.Compute(digest.Request{Tenant: ns, Tool: "charge", Operation: "payments.charge", Version: "v1",
				Parameters: json.RawMessage(`{"customer":"cus_42","currency":"EUR","amount":1000}`)})
			Expect(err).NotTo(HaveOccurred())
			Expect(done.Status.RequestDigest).To(Equal(wantDigest))

			for condition, want := range map[string]metav1.ConditionStatus{
				v1alpha1.ConditionAccepted:    metav1.ConditionTrue,
				v1alpha1.ConditionSucceeded:   metav1.ConditionTrue,
				v1alpha1.ConditionReady:       metav1.ConditionTrue,
				v1alpha1.ConditionReconciling: "absent",
				v1alpha1.ConditionStalled:     "absent",
			} {
				Expect(conditionStatus(done, condition)).To(Equal(want), "condition %s", condition)
			}

			provenance := downstream.ProvenanceHeaders(key)
			Expect(provenance.Get("Toolledger-Run-Id")).To(Equal("run-7"))
			Expect(provenance.Get("Toolledger-Step-Id")).To(Equal("step-3"))
			Expect(provenance.Get("Toolledger-Parent-Task-Id")).To(Equal("task-1"))
			Expect(provenance.Get("Toolledger-Trace-Id")).To(Equal("4bf92f3577b34da6a3ce929d0e0e4736"))
			Expect(provenance.Get("Toolledger-Principals")).To(Equal("user:alice, agent:billing"))
		})

		It("accepts a client digest that matches", func() {
			newTool(ns)
			action := newAction(ns, "order-digest-ok", "charge", charge(250))
			d, err := digest.Compute(digest.Request{Tenant: ns, Tool: "charge", Operation: "payments.charge", Version: "v1",
				Parameters: json.RawMessage(`{"amount":250,"currency":"EUR","customer":"cus_42"}`)})
			Expect(err).NotTo(HaveOccurred())
			action.Spec.RequestDigest = d
			Expect(k8s.Create(ctx, action)).To(Succeed())
			done := env.WaitForPhase(ns, "order-digest-ok", v1alpha1.PhaseSucceeded)
			Expect(done.Status.RequestDigest).To(Equal(d))
			Expect(downstream.Effects(keyOf(ns, "order-digest-ok"))).To(Equal(1))
		})
	})

	Context("when the same intent is repeated", func() {
		It("causes no second request on re-apply or re-create", func() {
			newTool(ns)
			manifest := specenv.WriteManifest(chargeManifest(ns, "order-2002", 2000))
			out, err := env.Kubectl("apply", "-f", manifest)
			Expect(err).NotTo(HaveOccurred(), out)
			env.WaitForPhase(ns, "order-2002", v1alpha1.PhaseSucceeded)

			out, err = env.Kubectl("apply", "-f", manifest)
			Expect(err).NotTo(HaveOccurred(), out)
			Expect(out).To(ContainSubstring("toolaction.toolledger.dev/order-2002 unchanged"))

			err = k8s.Create(ctx, newAction(ns, "order-2002", "charge", charge(2000)))
			Expect(apierrors.IsAlreadyExists(err)).To(BeTrue(), "create again: %v", err)

			key := keyOf(ns, "order-2002")
			Consistently(func() int { return downstream.Requests(key) }, 2*time.Second, 100*time.Millisecond).Should(Equal(1))
			Expect(downstream.Effects(key)).To(Equal(1))
		})

		It("rejects a changed parameter under the same key with the immutability message", func() {
			newTool(ns)
			Expect(k8s.Create(ctx, newAction(ns, "order-3003", "charge", charge(3000)))).To(Succeed())
			env.WaitForPhase(ns, "order-3003", v1alpha1.PhaseSucceeded)
			key := keyOf(ns, "order-3003")

			out, err := env.Kubectl("apply", "-f", specenv.WriteManifest(chargeManifest(ns, "order-3003", 9999)))
			Expect(err).To(HaveOccurred())
			Expect(out).To(ContainSubstring(immutableMessage))

			// A renamed member keeps the member count; it must be caught too.
			var current v1alpha1.ToolAction
			Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "order-3003"}, &current)).To(Succeed())
			current.Spec.Parameters = params(map[string]any{"amount": 3000, "currency": "EUR", "client": "cus_42"})
			err = k8s.Update(ctx, &current)
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "update: %v", err)
			Expect(err.Error()).To(ContainSubstring(immutableMessage))

			Consistently(func() int { return downstream.Requests(key) }, time.Second, 100*time.Millisecond).Should(Equal(1))
			Expect(downstream.Effects(key)).To(Equal(1))
		})

		It("makes one object and one effect out of 32 concurrent creators", func() {
			newTool(ns)
			const callers = 32
			var (
				wg                sync.WaitGroup
				mu                sync.Mutex
				created, existing int
				others            []error
			)
			start := make(chan struct{})
			for range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					err := k8s.Create(ctx, newAction(ns, "order-race", "charge", charge(4200)))
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err == nil:
						created++
					case apierrors.IsAlreadyExists(err):
						existing++
					default:
						others = append(others, err)
					}
				}()
			}
			close(start)
			wg.Wait()
			Expect(others).To(BeEmpty())
			Expect(created).To(Equal(1))
			Expect(existing).To(Equal(callers - 1))

			env.WaitForPhase(ns, "order-race", v1alpha1.PhaseSucceeded)
			var list v1alpha1.ToolActionList
			Expect(k8s.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
			Expect(list.Items).To(HaveLen(1))
			key := keyOf(ns, "order-race")
			Consistently(func() int { return downstream.Requests(key) }, time.Second, 100*time.Millisecond).Should(Equal(1))
			Expect(downstream.Effects(key)).To(Equal(1))
		})
	})

	Context("when the downstream fails", func() {
		It("retries 503 under the same key until it succeeds", func() {
			newTool(ns)
			downstream.InjectFault(demo.Fault{Mode: demo.FaultUnavailable, Count: 2})
			Expect(k8s.Create(ctx, newAction(ns, "order-503", "charge", charge(503)))).To(Succeed())

			done := env.WaitForPhase(ns, "order-503", v1alpha1.PhaseSucceeded)
			key := keyOf(ns, "order-503")
			Expect(done.Status.Attempts).To(Equal(int32(3)))
			Expect(downstream.Requests(key)).To(Equal(3), "all attempts carry the same key")
			Expect(downstream.Effects(key)).To(Equal(1))
			Expect(downstream.TotalRequests()).To(BeNumerically(">=", 3))
			Expect(done.Status.Error).To(BeNil())
			Expect(done.Status.NextAttemptTime).To(BeNil())
		})

		It("fails with RetriesExhausted once every attempt got 503", func() {
			newTool(ns, testenv.WithMaxAttempts(2))
			downstream.InjectFault(demo.Fault{Mode: demo.FaultUnavailable, Count: 2})
			Expect(k8s.Create(ctx, newAction(ns, "order-exhausted", "charge", charge(1)))).To(Succeed())

			done := env.WaitForPhase(ns, "order-exhausted", v1alpha1.PhaseFailed)
			Expect(done.Status.Attempts).To(Equal(int32(2)))
			Expect(done.Status.Error.Class).To(Equal(v1alpha1.ErrorClassRetriesExhausted))
			Expect(done.Status.Error.Reason).To(Equal("HTTP503"))
			Expect(done.Status.Error.Message).To(HavePrefix("2 of 2 attempts failed; last: HTTP503: downstream answered 503"))
			Expect(conditionStatus(done, v1alpha1.ConditionStalled)).To(Equal(metav1.ConditionTrue))
			Expect(downstream.Requests(keyOf(ns, "order-exhausted"))).To(Equal(2))
			Expect(downstream.Effects(keyOf(ns, "order-exhausted"))).To(Equal(0))
		})

		It("resolves a response lost after the commit by lookup: same external ref, one effect", func() {
			newTool(ns, testenv.WithTimeout(time.Second))
			downstream.InjectFault(demo.Fault{Mode: demo.FaultDropAfterCommit, Count: 1})
			Expect(k8s.Create(ctx, newAction(ns, "order-lost", "charge", charge(777)))).To(Succeed())

			done := env.WaitForPhase(ns, "order-lost", v1alpha1.PhaseSucceeded)
			key := keyOf(ns, "order-lost")
			charged, ok := downstream.Charge(key)
			Expect(ok).To(BeTrue())
			Expect(done.Status.ExternalRef).To(Equal(charged.ID))
			Expect(done.Status.Result.Raw).To(MatchJSON(`{"status":"succeeded","amount":777,"currency":"EUR"}`))
			Expect(transitions(done)).To(Equal([]string{
				"Executing/Executing", "Unknown/OutcomeUnknown", "Succeeded/FoundByLookup",
			}))
			Expect(done.Status.History[1].Message).To(HavePrefix("ConnectionLost: connection lost after the request was sent"))
			Expect(done.Status.Attempts).To(Equal(int32(1)))
			Expect(downstream.Requests(key)).To(Equal(1))
			Expect(downstream.Effects(key)).To(Equal(1))
		})

		It("looks up, without a re-send, an answer that comes after the timeout", func() {
			newTool(ns, testenv.WithTimeout(300*time.Millisecond))
			downstream.InjectFault(demo.Fault{Mode: demo.FaultDelay, Delay: 1500 * time.Millisecond, Count: 1})
			Expect(k8s.Create(ctx, newAction(ns, "order-slow", "charge", charge(888)))).To(Succeed())

			done := env.WaitForPhase(ns, "order-slow", v1alpha1.PhaseSucceeded)
			key := keyOf(ns, "order-slow")
			Expect(transitions(done)).To(Equal([]string{
				"Executing/Executing", "Unknown/OutcomeUnknown", "Succeeded/FoundByLookup",
			}))
			Expect(done.Status.History[1].Message).To(HavePrefix("Timeout: no response before the timeout"))
			// While the downstream still held the request, the lookup said
			// "in progress", not "absent": nothing was sent twice.
			Expect(done.Status.Lookups).To(BeNumerically(">=", 1))
			Expect(downstream.Requests(key)).To(Equal(1))
			Expect(downstream.Effects(key)).To(Equal(1))
		})

		It("fails finally with InvalidInput when the downstream rejects the request", func() {
			newTool(ns)
			Expect(k8s.Create(ctx, newAction(ns, "order-negative", "charge", charge(-5)))).To(Succeed())
			done := env.WaitForPhase(ns, "order-negative", v1alpha1.PhaseFailed)
			Expect(done.Status.Error.Class).To(Equal(v1alpha1.ErrorClassInvalidInput))
			Expect(done.Status.Error.Reason).To(Equal("HTTP400"))
			// The downstream's explanation is not copied into the ledger: only
			// its status, size and hash (the Tool does not set storeErrorBody).
			Expect(done.Status.Error.Message).To(MatchRegexp(`^HTTP400: downstream answered 400; body of \d+ bytes, sha256:[0-9a-f]{16}, not stored$`))
			Expect(done.Status.Attempts).To(Equal(int32(1)))
			Expect(downstream.Effects(keyOf(ns, "order-negative"))).To(Equal(0))
		})
	})

	Context("with credentials", func() {
		It("waits, without a dispatch, for the tool's Secret to be labelled for Tools and then sends its header", func() {
			newTool(ns, testenv.WithAuthSecret("payments-api", "token"))
			// The Secret exists, but has not opted in to Tools: it is not read.
			secret := &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "payments-api"},
				StringData: map[string]string{"token": "Bearer sk_test_42"},
			}
			Expect(k8s.Create(ctx, secret)).To(Succeed())
			Expect(k8s.Create(ctx, newAction(ns, "order-auth", "charge", charge(42)))).To(Succeed())

			waiting := env.WaitForPhase(ns, "order-auth", v1alpha1.PhaseAccepted)
			reconciling := meta.FindStatusCondition(waiting.Status.Conditions, v1alpha1.ConditionReconciling)
			Expect(reconciling).NotTo(BeNil())
			Expect(reconciling.Reason).To(Equal("ToolNotReady"))
			Expect(reconciling.Message).To(Equal(`tool "charge" cannot be used yet: Secret ` + ns +
				`/payments-api is not usable by Tools: only a Secret labelled toolledger.dev/tool-credential=true is`))
			Expect(waiting.Finalizers).To(BeEmpty(), "nothing is in flight yet")
			key := keyOf(ns, "order-auth")
			Consistently(func() int { return downstream.Requests(key) }, "2s").Should(Equal(0))

			secret.Labels = map[string]string{v1alpha1.ToolCredentialLabel: "true"}
			Expect(k8s.Update(ctx, secret)).To(Succeed())
			env.WaitForPhase(ns, "order-auth", v1alpha1.PhaseSucceeded)
			Expect(downstream.Requests(key)).To(Equal(1))
			Expect(downstream.LastAuthorization()).To(Equal("Bearer sk_test_42"))
		})
	})

	Context("with bad input", func() {
		It("fails finally, without a downstream call, when the tool does not exist", func() {
			Expect(k8s.Create(ctx, newAction(ns, "order-notool", "nope", charge(1)))).To(Succeed())
			done := env.WaitForPhase(ns, "order-notool", v1alpha1.PhaseFailed)
			Expect(done.Status.Error.Class).To(Equal(v1alpha1.ErrorClassInvalidInput))
			Expect(done.Status.Error.Reason).To(Equal("ToolNotFound"))
			Expect(done.Status.Error.Message).To(Equal(`tool "nope" not found in namespace "` + ns + `"`))
			Expect(conditionStatus(done, v1alpha1.ConditionAccepted)).To(Equal(metav1.ConditionFalse))
			Expect(conditionStatus(done, v1alpha1.ConditionStalled)).To(Equal(metav1.ConditionTrue))
			Expect(done.Status.Attempts).To(Equal(int32(0)))
			Expect(downstream.Requests(keyOf(ns, "order-notool"))).To(Equal(0))
		})

		It("fails finally, without a downstream call, when the client digest does not match", func() {
			newTool(ns)
			action := newAction(ns, "order-digest-bad", "charge", charge(100))
			action.Spec.RequestDigest = "sha256:" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
			Expect(k8s.Create(ctx, action)).To(Succeed())
			done := env.WaitForPhase(ns, "order-digest-bad", v1alpha1.PhaseFailed)
			Expect(done.Status.Error.Class).To(Equal(v1alpha1.ErrorClassInvalidInput))
			Expect(done.Status.Error.Reason).To(Equal("RequestDigestMismatch"))
			Expect(done.Status.Error.Message).To(MatchRegexp(`^spec.requestDigest sha256:0123456789abcdef\w+ does not match the request's digest sha256:[0-9a-f]{64} `))
			Expect(downstream.Requests(keyOf(ns, "order-digest-bad"))).To(Equal(0))
		})
	})

	Context("from the command line", func() {
		It("lets kubectl wait for Succeeded and shows the phase", func() {
			newTool(ns)
			out, err := env.Kubectl("apply", "-f", specenv.WriteManifest(chargeManifest(ns, "order-wait", 4242)))
			Expect(err).NotTo(HaveOccurred(), out)

			out, err = env.Kubectl("wait", "--for=condition=Succeeded", "toolaction/order-wait", "-n", ns, "--timeout=60s")
			Expect(err).NotTo(HaveOccurred(), out)
			Expect(out).To(ContainSubstring("toolaction.toolledger.dev/order-wait condition met"))

			out, err = env.Kubectl("get", "ta", "order-wait", "-n", ns, "-o", "wide")
			Expect(err).NotTo(HaveOccurred(), out)
			Expect(out).To(MatchRegexp(`(?m)^NAME\s+TOOL\s+PHASE\s+ATTEMPTS\s+AGE\s+EXTERNAL-REF\s+MESSAGE`))
			Expect(out).To(MatchRegexp(`(?m)^order-wait\s+charge\s+Succeeded\s+1\s+\S+\s+ch_[0-9a-f]+`))
		})
	})
})
