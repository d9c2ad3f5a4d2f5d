package sdk_test

import (
	"context"
	"os"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/demo"
	"github.com/toolledger/toolledger/internal/telemetry"
	"github.com/toolledger/toolledger/internal/testenv"
	"github.com/toolledger/toolledger/pkg/sdk"
)

// The agent's span and the SDK's invocation in the agent's trace; the
// manager's attempt (and lookup), and the downstream request, in a trace of
// the manager's own that links to the invocation, as the manager trusts no
// tenant's trace context by default. Exported over OTLP as the OTEL_*
// variables configure it, to a receiver in this process. The suite's
// manager runs in this process too, so it exports through the same
// provider.
var _ = Describe("Tracing", Ordered, func() {
	var (
		receiver *testenv.OTLPReceiver
		tracing  *telemetry.Tracing
		invoker  *sdk.Client
	)

	BeforeAll(func() {
		receiver = testenv.StartOTLPReceiver()
		DeferCleanup(receiver.Close)
		for name, value := range map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.URL, "OTEL_SERVICE_NAME": "sdk-suite"} {
			Expect(os.Setenv(name, value)).To(Succeed())
			DeferCleanup(os.Unsetenv, name)
		}
		var err error
		tracing, err = telemetry.Setup(context.Background(), "unused")
		Expect(err).NotTo(HaveOccurred())
		Expect(tracing.Enabled()).To(BeTrue())
		DeferCleanup(func() {
			otel.SetTracerProvider(noop.NewTracerProvider())
			Expect(tracing.Shutdown(context.Background())).To(Succeed())
		})
		invoker, err = sdk.NewClient(cfg)
		Expect(err).NotTo(HaveOccurred())
	})

	// agentInvoke invokes req inside an agent's span and returns the
	// trace's spans by name once the receiver has them all.
	agentInvoke := func(ctx context.Context, req sdk.Request, names ...string) (*sdk.Outcome, map[string]testenv.Span, string) {
		GinkgoHelper()
		agentCtx, agent := otel.Tracer("agent").Start(ctx, "agent step")
		outcome, err := invoker.Invoke(agentCtx, req)
		agent.End()
		Expect(err).NotTo(HaveOccurred())
		traceID := agent.SpanContext().TraceID().String()
		byName := map[string]testenv.Span{}
		Eventually(func(g Gomega) {
			Expect(tracing.ForceFlush(ctx)).To(Succeed())
			clear(byName)
			for _, s := range receiver.Trace(traceID) {
				g.Expect(byName).NotTo(HaveKey(s.Name), "one span named %q", s.Name)
				byName[s.Name] = s
			}
			for _, name := range names {
				g.Expect(byName).To(HaveKey(name))
			}
		}).Should(Succeed())
		Expect(byName["agent step"].ParentSpanID).To(BeEmpty())
		Expect(byName["agent step"].SpanID).To(Equal(agent.SpanContext().SpanID().String()))
		for _, s := range byName {
			for attr, value := range s.Attributes {
				if strings.HasPrefix(attr, "gen_ai.") {
					Expect(value).NotTo(ContainSubstring(req.Key), "span %q carries the idempotency key in %s", s.Name, attr)
				}
			}
		}
		return outcome, byName, traceID
	}

	// managerSpan is the one span the manager exported under name for key,
	// in whatever trace.
	managerSpan := func(name, key string) testenv.Span {
		GinkgoHelper()
		var spans []testenv.Span
		Eventually(func(g Gomega) {
			Expect(tracing.ForceFlush(context.Background())).To(Succeed())
			spans = receiver.Named(name, key)
			g.Expect(spans).To(HaveLen(1))
		}).Should(Succeed())
		return spans[0]
	}

	// expectLinkedTo: span starts a trace of the manager's own, linked to
	// the caller's span and marked as caller-supplied, not its child.
	expectLinkedTo := func(span, caller testenv.Span) {
		GinkgoHelper()
		Expect(span.TraceID).NotTo(Equal(caller.TraceID), "a trace of the manager's own")
		Expect(span.ParentSpanID).To(BeEmpty())
		Expect(span.Links).To(HaveExactElements(testenv.Link{TraceID: caller.TraceID, SpanID: caller.SpanID,
			Attributes: map[string]any{"toolledger.caller_supplied": true}}))
	}

	It("links the manager's attempt and the downstream request to the agent's invocation, in a trace of their own", func() {
		ctx, ns := newSpec()
		req := sdk.Request{Namespace: ns, Key: "order-2001-charge", Tool: "charge", Parameters: map[string]any{"amount": 1000, "currency": "EUR"}}
		outcome, spans, _ := agentInvoke(ctx, req, "agent step", "invoke charge")
		Expect(outcome.Phase).To(Equal(v1alpha1.PhaseSucceeded))
		Expect(spans).To(HaveLen(2), "the agent's trace holds the agent's and the SDK's spans only")

		invoke, attempt := spans["invoke charge"], managerSpan("execute_tool charge", req.Key)
		Expect(invoke.ParentSpanID).To(Equal(spans["agent step"].SpanID))
		Expect(invoke.Kind).To(BeEquivalentTo(3), "client")
		Expect(invoke.Service).To(Equal("sdk-suite"))
		Expect(invoke.Attributes).To(HaveKeyWithValue("toolledger.key", req.Key))
		Expect(invoke.Attributes).To(HaveKeyWithValue("toolledger.namespace", ns))
		Expect(invoke.Attributes).To(HaveKeyWithValue("toolledger.phase", "Succeeded"))
		Expect(invoke.Attributes).To(HaveKeyWithValue("toolledger.deduplicated", false))
		Expect(invoke.Attributes).To(HaveKeyWithValue("toolledger.external_ref", outcome.ExternalRef))

		expectLinkedTo(attempt, invoke)
		Expect(attempt.Attributes).To(HaveKeyWithValue("gen_ai.operation.name", "execute_tool"))
		Expect(attempt.Attributes).To(HaveKeyWithValue("gen_ai.tool.name", "charge"))
		Expect(attempt.Attributes).To(HaveKeyWithValue("toolledger.key", req.Key))
		Expect(attempt.Attributes).To(HaveKeyWithValue("toolledger.operation", "attempt"))
		Expect(attempt.Attributes).To(HaveKeyWithValue("toolledger.attempt", int64(1)))
		Expect(attempt.Attributes).To(HaveKeyWithValue("toolledger.result", "succeeded"))
		Expect(attempt.Attributes).To(HaveKeyWithValue("toolledger.request_digest", outcome.RequestDigest))
		Expect(attempt.Error).To(BeFalse())

		Expect(downstream.ProvenanceHeaders(ns+"/"+req.Key).Get("Traceparent")).To(Equal("00-"+attempt.TraceID+"-"+attempt.SpanID+"-01"),
			"the downstream request continues the attempt's span")

		By("a repeated invocation from another span finds the outcome and sends nothing")
		again, spans, _ := agentInvoke(ctx, req, "agent step", "invoke charge")
		Expect(again.Deduplicated).To(BeTrue())
		Expect(spans).To(HaveLen(2))
		Expect(spans["invoke charge"].Attributes).To(HaveKeyWithValue("toolledger.deduplicated", true))
		Expect(downstream.Requests(ns + "/" + req.Key)).To(Equal(1))

		By("another field manager's invocation from another span is the same intent, not a conflict")
		recorded := env.Get(ns, req.Key).Annotations[v1alpha1.TraceparentAnnotation]
		other, err := sdk.NewClient(cfg, sdk.WithFieldManager("other-agent"))
		Expect(err).NotTo(HaveOccurred())
		otherCtx, span := otel.Tracer("agent").Start(ctx, "other agent step")
		fromOther, err := other.Invoke(otherCtx, req)
		span.End()
		Expect(err).NotTo(HaveOccurred())
		Expect(fromOther.Deduplicated).To(BeTrue())
		Expect(env.Get(ns, req.Key).Annotations).To(HaveKeyWithValue(v1alpha1.TraceparentAnnotation, recorded), "the recorded span stays")
		Expect(downstream.Requests(ns + "/" + req.Key)).To(Equal(1))
	})

	It("traces the lookup that settles an unknown outcome", func() {
		ctx, ns := newSpec()
		downstream.InjectFault(demo.Fault{Mode: demo.FaultDropAfterCommit})
		req := sdk.Request{Namespace: ns, Key: "order-2002-charge", Tool: "charge", Parameters: map[string]any{"amount": 1000, "currency": "EUR"}}
		outcome, spans, _ := agentInvoke(ctx, req, "agent step", "invoke charge")
		Expect(outcome.Phase).To(Equal(v1alpha1.PhaseSucceeded))
		Expect(outcome.SettledBy).To(Equal(v1alpha1.ReasonFoundByLookup))
		Expect(downstream.Effects(ns + "/" + req.Key)).To(Equal(1))

		invoke, attempt, lookup := spans["invoke charge"], managerSpan("execute_tool charge", req.Key), managerSpan("lookup charge", req.Key)
		Expect(attempt.Attributes).To(HaveKeyWithValue("toolledger.result", "unknown"))
		Expect(attempt.Error).To(BeTrue())
		expectLinkedTo(attempt, invoke)
		expectLinkedTo(lookup, invoke)
		Expect(lookup.TraceID).NotTo(Equal(attempt.TraceID), "each call of the manager is a trace of its own")
		Expect(lookup.Attributes).To(HaveKeyWithValue("toolledger.operation", "lookup"))
		Expect(lookup.Attributes).To(HaveKeyWithValue("toolledger.result", "found"))
		Expect(lookup.Attributes).To(HaveKeyWithValue("toolledger.attempt", int64(1)))
		Expect(lookup.Attributes).To(HaveKeyWithValue("toolledger.external_ref", outcome.ExternalRef))
		Expect(lookup.Attributes).NotTo(HaveKey("gen_ai.operation.name"), "a lookup executes nothing")
		Expect(invoke.Attributes).To(HaveKeyWithValue("toolledger.settled_by", "FoundByLookup"))
	})
})
