package mcpgateway_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/toolledger/toolledger/internal/telemetry"
	"github.com/toolledger/toolledger/internal/testenv"
)

// The gateway binary and the suite's manager (in this process) export their
// spans over OTLP, as OTEL_EXPORTER_OTLP_ENDPOINT configures each, to one
// receiver: a call whose _meta names the agent's traceparent continues the
// agent's trace through the gateway's call and invocation; the manager's
// attempt, which trusts no tenant's trace context by default, starts a trace
// of its own linked to the invocation, and the downstream request continues
// the attempt.
var _ = Describe("The MCP gateway's trace", func() {
	It("continues the traceparent of params._meta through the invocation, to which the attempt and the downstream link", func() {
		receiver := testenv.StartOTLPReceiver()
		DeferCleanup(receiver.Close)
		Expect(os.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.URL)).To(Succeed())
		DeferCleanup(os.Unsetenv, "OTEL_EXPORTER_OTLP_ENDPOINT")
		manager, err := telemetry.Setup(context.Background(), "toolledger-manager")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() {
			otel.SetTracerProvider(noop.NewTracerProvider())
			Expect(manager.Shutdown(context.Background())).To(Succeed())
		})

		ns := env.NewTenant()
		env.CreateTool(ns, "pay", testenv.WithParametersSchema(paySchema))
		cmd := exec.Command(gatewayBinary, "--namespace", ns, "--kubeconfig", adminKubeconfig)
		cmd.Stderr = GinkgoWriter
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "traced-agent", Version: "v1"}, nil).
			Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
		Expect(err).NotTo(HaveOccurred())

		traceID, agentSpan := randomHex(16), randomHex(8)
		res, o := pay(cs, map[string]any{"amount": 9, "currency": "EUR", "customer": "c-9"},
			mcp.Meta{"traceparent": "00-" + traceID + "-" + agentSpan + "-01", "tracestate": "agent=1"})
		Expect(res.IsError).To(BeFalse())
		Expect(o.Phase).To(Equal("Succeeded"))
		// The gateway exports what is left when its stdin closes.
		Expect(cs.Close()).To(Succeed())

		spans := map[string]testenv.Span{}
		Eventually(func(g Gomega) {
			g.Expect(manager.ForceFlush(context.Background())).To(Succeed())
			clear(spans)
			for _, s := range receiver.Trace(traceID) {
				spans[s.Name] = s
			}
			g.Expect(spans).To(HaveKey("tools/call pay"))
			g.Expect(spans).To(HaveKey("invoke pay"))
			g.Expect(receiver.Named("execute_tool pay", o.Key)).To(HaveLen(1))
		}).Should(Succeed())
		Expect(spans).To(HaveLen(2), "the attempt is in a trace of its own")
		call, invoke, attempt := spans["tools/call pay"], spans["invoke pay"], receiver.Named("execute_tool pay", o.Key)[0]
		spans[attempt.Name] = attempt
		Expect(call.ParentSpanID).To(Equal(agentSpan))
		Expect(call.Service).To(Equal("toolledger-mcp"))
		Expect(call.Kind).To(BeEquivalentTo(2), "server")
		Expect(call.Attributes).To(HaveKeyWithValue("mcp.method.name", "tools/call"))
		Expect(call.Attributes).To(HaveKeyWithValue("gen_ai.operation.name", "execute_tool"))
		Expect(call.Attributes).To(HaveKeyWithValue("gen_ai.tool.name", "pay"))
		Expect(call.Attributes).To(HaveKeyWithValue("toolledger.key", o.Key))
		Expect(call.Attributes).To(HaveKeyWithValue("toolledger.phase", "Succeeded"))
		Expect(invoke.ParentSpanID).To(Equal(call.SpanID))
		Expect(invoke.Service).To(Equal("toolledger-mcp"))
		Expect(attempt.TraceID).NotTo(Equal(traceID))
		Expect(attempt.ParentSpanID).To(BeEmpty())
		Expect(attempt.Links).To(HaveExactElements(testenv.Link{TraceID: traceID, SpanID: invoke.SpanID,
			Attributes: map[string]any{"toolledger.caller_supplied": true}}))
		Expect(attempt.Service).To(Equal("toolledger-manager"))
		Expect(attempt.Attributes).To(HaveKeyWithValue("toolledger.result", "succeeded"))
		for _, s := range spans {
			for attr, value := range s.Attributes {
				if strings.HasPrefix(attr, "gen_ai.") {
					Expect(value).NotTo(Equal(o.Key), "span %q carries the idempotency key in %s", s.Name, attr)
				}
			}
		}
		Expect(downstream.ProvenanceHeaders(ns + "/" + o.Key).Get("Traceparent")).To(Equal("00-" + attempt.TraceID + "-" + attempt.SpanID + "-01"))
	})
})

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
