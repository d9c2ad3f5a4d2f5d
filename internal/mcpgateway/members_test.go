package mcpgateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/toolledger/toolledger/internal/mcpgateway"
	"github.com/toolledger/toolledger/internal/testenv"
)

var _ = Describe("A request that names a member twice", func() {
	It("is refused at every entry, top level and nested, and records nothing", func() {
		ns := env.NewTenant()
		env.CreateTool(ns, "pay", testenv.WithParametersSchema(paySchema))
		served := serveToAnAgent(ns, 3*time.Second, "pay")
		post := func(path, body string, headers map[string]string) (int, string) {
			req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, served.base+path, strings.NewReader(body))
			Expect(err).NotTo(HaveOccurred())
			req.Header.Set("Authorization", "Bearer "+served.agentToken)
			req.Header.Set("Content-Type", "application/json")
			for name, value := range headers {
				req.Header.Set(name, value)
			}
			resp, err := http.DefaultClient.Do(req)
			Expect(err).NotTo(HaveOccurred())
			defer func() { _ = resp.Body.Close() }()
			out, err := io.ReadAll(resp.Body)
			Expect(err).NotTo(HaveOccurred())
			return resp.StatusCode, string(out)
		}
		twice := `{"amount":2500,"currency":"EUR","customer":"c-1","amount":2600}`
		nested := `{"amount":2500,"currency":"EUR","customer":"c-1","metadata":{"order":"7","order":"8"}}`

		By("the HTTP front: 400 invalid_parameters, naming the member")
		status, body := post(mcpgateway.FrontPath+"pay", twice, map[string]string{"Idempotency-Key": "dup-1"})
		Expect(status).To(Equal(http.StatusBadRequest), body)
		Expect(body).To(MatchJSON(`{"type":"invalid_request","code":"invalid_parameters","message":"the body cannot be taken: the arguments cannot be taken: a JSON object names a member twice: \"/amount\"; nothing was recorded"}`))
		status, body = post(mcpgateway.FrontPath+"pay", nested, map[string]string{"Idempotency-Key": "dup-2"})
		Expect(status).To(Equal(http.StatusBadRequest), body)
		Expect(body).To(ContainSubstring(`names a member twice: \"/metadata/order\"`))

		By("MCP over HTTP: a JSON-RPC invalid-params error, the envelope and _meta included")
		mcpHeaders := map[string]string{"Accept": "application/json, text/event-stream", "Mcp-Protocol-Version": "2025-06-18"}
		status, body = post(mcpgateway.MCPPath, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"pay","arguments":`+twice+`}}`, mcpHeaders)
		Expect(status).To(Equal(http.StatusBadRequest), body)
		Expect(body).To(MatchJSON(`{"jsonrpc":"2.0","id":3,"error":{"code":-32602,"message":"a JSON object names a member twice: \"/params/arguments/amount\"; nothing was recorded"}}`))
		status, body = post(mcpgateway.MCPPath, `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"pay","name":"refund","arguments":{}}}`, mcpHeaders)
		Expect(status).To(Equal(http.StatusBadRequest), body)
		Expect(body).To(ContainSubstring(`\"/params/name\"`))

		By("MCP in process: the tool result refuses the arguments")
		cs := inMemory(startGateway(ns, cfg, "pay"), nil)
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "pay", Arguments: json.RawMessage(twice)})
		Expect(err).NotTo(HaveOccurred())
		Expect(res.IsError).To(BeTrue())
		Expect(outcomeOf(res).ErrorReason).To(Equal("InvalidArguments"))
		Expect(textOf(res)).To(ContainSubstring(`names a member twice: "/amount"`))

		By("A2A: -32602, the data part's members included")
		a2aHeaders := map[string]string{"A2A-Version": "1.0"}
		send := func(data string) string {
			_, body := post(mcpgateway.A2APath, `{"jsonrpc":"2.0","id":5,"method":"SendMessage","params":{"message":{"messageId":"dup-a2a","role":"ROLE_USER","parts":[{"data":`+data+`}]}}}`, a2aHeaders)
			return body
		}
		Expect(send(`{"skill":"pay","arguments":` + twice + `}`)).To(And(ContainSubstring(`"code":-32602`), ContainSubstring(`names a member twice: \"/params/message/parts/0/data/arguments/amount\"`)))
		Expect(send(`{"skill":"pay","skill":"refund","arguments":{}}`)).To(ContainSubstring(`\"/params/message/parts/0/data/skill\"`))

		Expect(actionsIn(ns)).To(BeZero(), "nothing recorded")
	})
})
