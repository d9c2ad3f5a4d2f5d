package mcpgateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/demo"
	"github.com/toolledger/toolledger/internal/mcpgateway"
	"github.com/toolledger/toolledger/internal/testenv"
	"github.com/toolledger/toolledger/pkg/sdk"
)

// actionWithClientKey is the action of ns that records the client key.
func actionWithClientKey(ns, key string) *v1alpha1.ToolAction {
	GinkgoHelper()
	var list v1alpha1.ToolActionList
	Expect(k8s.List(context.Background(), &list)).To(Succeed())
	for i := range list.Items {
		if list.Items[i].Namespace == ns && list.Items[i].Spec.ClientKey == key {
			return &list.Items[i]
		}
	}
	Fail("no action of " + ns + " records the client key " + key)
	return nil
}

var _ = Describe("The MCP gateway's commerce key bindings", func() {
	It("takes ACP's and UCP's meta keys, scoped to the caller and the tool, and keeps meta out of the request", func() {
		ns := env.NewTenant()
		// The policy records the caller in toolledger.dev/requested-by.
		removeIdentity, err := testenv.InstallIdentityPolicy(context.Background(), cfg, k8s, ns, "mcp-suite")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(removeIdentity)
		env.CreateTool(ns, "pay", testenv.WithParametersSchema(paySchema))
		env.CreateTool(ns, "pay-keyed", testenv.WithParametersSchema(paySchema), testenv.WithClientKeyRequired())
		env.CreateTool(ns, "pay-meta", testenv.WithParametersSchema(`{"type":"object","properties":{"meta":{"type":"string"}}}`))
		g := startGateway(ns, cfg, "pay", "pay-keyed")
		cs := inMemory(g, nil)
		order := map[string]any{"amount": 40, "currency": "EUR", "customer": "c-acp"}
		with := func(meta map[string]any) map[string]any {
			args := map[string]any{"meta": meta}
			for k, v := range order {
				args[k] = v
			}
			return args
		}

		By("recording an ACP key under a name derived from it, the key kept as sent")
		res, created := pay(cs, with(map[string]any{"idempotency_key": "idem_Order-40", "request_id": "r-1"}), nil)
		Expect(res.IsError).To(BeFalse(), textOf(res))
		action := env.Get(ns, created.Key)
		Expect(action.Spec.ClientKey).To(Equal("idem_Order-40"))
		Expect(action.Annotations).To(HaveKey(v1alpha1.RequestedByAnnotation))
		Expect(created.Key).To(Equal(sdk.ClientKey(action.Annotations[v1alpha1.RequestedByAnnotation], "pay", "idem_Order-40")))
		Expect(created.Key).To(HavePrefix("idem-order-40-"))
		Expect(action.Spec.Parameters).To(HaveLen(3), "meta is the call's metadata, never a parameter")

		By("answering a retry with another request_id as the same request: one effect")
		res, replayed := pay(cs, with(map[string]any{"idempotency_key": "idem_Order-40", "request_id": "r-2"}), nil)
		Expect(res.IsError).To(BeFalse(), textOf(res))
		Expect(replayed.Key).To(Equal(created.Key))
		Expect(replayed.Deduplicated).To(BeTrue())
		Expect(downstream.Effects(ns + "/" + created.Key)).To(Equal(1))

		By("keeping the same key for another tool, or in UCP's member, apart only by scope")
		_, ucp := pay(cs, with(map[string]any{"idempotency-key": "idem_Order-40", "ucp-agent": map[string]any{"profile": "p"}}), nil)
		Expect(ucp.Key).To(Equal(created.Key), "the key is the caller's, whichever binding carries it")
		res, err = cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "pay-keyed", Arguments: with(map[string]any{"idempotency-key": "idem_Order-40"})})
		Expect(err).NotTo(HaveOccurred())
		Expect(outcomeOf(res).Key).NotTo(Equal(created.Key))
		Expect(actionWithClientKey(ns, "idem_Order-40")).NotTo(BeNil())

		By("keeping _meta's key the action's name when the arguments carry a meta without a key")
		res, named := pay(cs, with(map[string]any{"request_id": "r-9"}), mcp.Meta{mcpgateway.MetaKey: "order-9"})
		Expect(res.IsError).To(BeFalse(), textOf(res))
		Expect(named.Key).To(Equal("order-9"))
		Expect(env.Get(ns, "order-9").Spec.ClientKey).To(BeEmpty())

		By("refusing keys that are not keys, and two keys at once, with nothing recorded")
		before := actionsIn(ns)
		for _, tc := range []struct {
			args    map[string]any
			meta    mcp.Meta
			message string
		}{
			{with(map[string]any{"idempotency_key": ""}), nil, "arguments.meta.idempotency_key is not a valid key: the client key is empty; nothing was recorded"},
			{with(map[string]any{"idempotency_key": 42}), nil, "arguments.meta.idempotency_key must be a string; nothing was recorded"},
			{with(map[string]any{"idempotency-key": strings.Repeat("k", 256)}), nil, `arguments.meta["idempotency-key"] is not a valid key: the client key is 256 characters long; at most 255 are allowed; nothing was recorded`},
			{with(map[string]any{"idempotency_key": "a", "idempotency-key": "a"}), nil, `the call carries two keys, arguments.meta.idempotency_key and arguments.meta["idempotency-key"]; send one; nothing was recorded`},
			{with(map[string]any{"idempotency_key": "a"}), mcp.Meta{mcpgateway.MetaKey: "order-1"}, "the call carries two keys, arguments.meta.idempotency_key and _meta toolledger.dev/key; send one; nothing was recorded"},
		} {
			_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "pay", Arguments: tc.args, Meta: tc.meta})
			var wire *jsonrpc.Error
			Expect(errors.As(err, &wire)).To(BeTrue(), "%v", err)
			Expect(wire.Code).To(BeEquivalentTo(-32000))
			Expect(wire.Message).To(Equal(tc.message))
		}
		Expect(actionsIn(ns)).To(Equal(before))

		By("requiring a key where the Tool does: _meta's is one, none is refused")
		res, keyed := pay(cs, order, nil)
		Expect(res.IsError).To(BeFalse(), "pay does not require a key: %s", textOf(res))
		Expect(keyed.Phase).To(Equal("Succeeded"))
		res, err = cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "pay-keyed", Arguments: order})
		Expect(err).NotTo(HaveOccurred())
		Expect(outcomeOf(res)).To(Equal(mcpgateway.Outcome{Phase: mcpgateway.PhaseNotRecorded, ErrorClass: "InvalidInput", ErrorReason: "KeyRequired",
			Message: `tool pay-keyed requires the caller's own idempotency key (arguments.meta.idempotency_key, arguments.meta["idempotency-key"] or _meta "toolledger.dev/key"); nothing was recorded: call again with one key per intent, the same on every retry`}))
		res, err = cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "pay-keyed", Arguments: order, Meta: mcp.Meta{mcpgateway.MetaKey: "order-77"}})
		Expect(err).NotTo(HaveOccurred())
		Expect(outcomeOf(res).Key).To(Equal("order-77"))

		By("publishing the key's place in the input schema, and no Tool whose own parameter is called meta")
		listed, err := cs.ListTools(context.Background(), nil)
		Expect(err).NotTo(HaveOccurred())
		schemas := map[string]map[string]any{}
		for _, t := range listed.Tools {
			encoded, err := json.Marshal(t.InputSchema)
			Expect(err).NotTo(HaveOccurred())
			var schema map[string]any
			Expect(json.Unmarshal(encoded, &schema)).To(Succeed())
			schemas[t.Name] = schema
		}
		Expect(schemas).NotTo(HaveKey("pay-meta"))
		Expect(schemas["pay"]["required"]).To(ConsistOf("amount", "currency", "customer"))
		Expect(schemas["pay-keyed"]["required"]).To(ConsistOf("amount", "currency", "customer", "meta"))
		keyedMeta := schemas["pay-keyed"]["properties"].(map[string]any)["meta"].(map[string]any)
		Expect(keyedMeta["anyOf"]).To(ConsistOf(
			map[string]any{"required": []any{"idempotency_key"}}, map[string]any{"required": []any{"idempotency-key"}}))
		Expect(keyedMeta["properties"]).To(HaveKeyWithValue("idempotency_key", map[string]any{"type": "string", "minLength": 1.0, "maxLength": 255.0, "pattern": "^[ -~]+$"}))
	})

	It("answers ACP's and UCP's five cases in their shapes to the TypeScript MCP SDK's client: one effect per key", func() {
		node := tsClient()
		ctx := context.Background()
		ns := env.NewTenant()
		env.CreateTool(ns, "pay", testenv.WithParametersSchema(paySchema))
		env.CreateTool(ns, "pay-keyed", testenv.WithParametersSchema(paySchema), testenv.WithClientKeyRequired())
		served := serveToAnAgent(ns, 2*time.Second, "pay", "pay-keyed")
		endpoint, agentName := served.endpoint, served.agentName
		for _, b := range []struct {
			binding, key, inFlightKey string
			missing                   int64
		}{
			{"acp", "idem_4f2b9c1e-acp", "idem_slow-acp", -32000},
			{"ucp", "0d6f4a3c-1b2e-4c8d-9e7f-ucp", "7c1e-slow-ucp", -32602},
		} {
			By("running the matrix in " + b.binding)
			// The downstream holds the first charge 5 s, past the gateway's 2 s wait.
			downstream.InjectFault(demo.Fault{Mode: demo.FaultDelay, Delay: 5 * time.Second})
			cmd := exec.CommandContext(ctx, node, "matrix.mjs")
			cmd.Dir = tsClientDir
			cmd.Env = append(os.Environ(), "MCP_URL="+endpoint, "MCP_TOKEN="+served.agentToken,
				"BINDING="+b.binding, "KEY="+b.key, "IN_FLIGHT_KEY="+b.inFlightKey)
			var stdout bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, GinkgoWriter
			Expect(cmd.Run()).To(Succeed())
			var report map[string]struct {
				Result  *mcpgateway.Outcome `json:"result"`
				IsError bool                `json:"isError"`
				Error   *struct {
					Code int64           `json:"code"`
					Data json.RawMessage `json:"data"`
				} `json:"error"`
			}
			Expect(json.Unmarshal(stdout.Bytes(), &report)).To(Succeed(), stdout.String())

			name := sdk.ClientKey(agentName, "pay", b.key)
			slow := sdk.ClientKey(agentName, "pay", b.inFlightKey)
			inFlight := func(code, where, key, action string) string {
				if b.binding == "acp" {
					return `{"type":"invalid_request","code":"` + code + `","message":"a request with ` + where + ` \"` + key + `\" is still being processed (action ` + action + `, phase Executing); call again later with the same key and arguments"}`
				}
				return `{"code":"` + code + `","content":"a request with ` + where + ` \"` + key + `\" is still being processed (action ` + action + `, phase Executing); call again later with the same key and arguments","retry_after":1}`
			}
			where := "arguments.meta.idempotency_key"
			if b.binding == "ucp" {
				where = `arguments.meta[\"idempotency-key\"]`
			}

			By("in flight: the first call and a concurrent duplicate answered in flight, then one settled effect")
			for _, c := range []string{"inFlightFirst", "inFlightDuplicate"} {
				Expect(report[c].Error).NotTo(BeNil(), c)
				Expect(report[c].Error.Code).To(BeEquivalentTo(-32000), c)
				Expect(report[c].Error.Data).To(MatchJSON(inFlight("idempotency_in_flight", where, b.inFlightKey, slow)), c)
			}
			Expect(report["inFlightSettled"].Result).NotTo(BeNil())
			Expect(report["inFlightSettled"].Result.Phase).To(Equal("Succeeded"))
			Expect(report["inFlightSettled"].Result.Deduplicated).To(BeTrue())
			Expect(downstream.Effects(ns + "/" + slow)).To(Equal(1))

			By("a new key: executed once, under the name derived from it")
			Expect(report["created"].Result).To(HaveField("Key", name))
			Expect(report["created"].Result.Phase).To(Equal("Succeeded"))
			Expect(report["created"].Result.Deduplicated).To(BeFalse())
			Expect(env.Get(ns, name).Spec.ClientKey).To(Equal(b.key))

			By("a replay with another request_id: the same outcome, marked, no second effect")
			Expect(report["replayed"].Result).To(HaveField("Key", name))
			Expect(report["replayed"].Result.Deduplicated).To(BeTrue())
			Expect(report["replayed"].Result.UntrustedDownstreamData.ExternalRef).To(Equal(report["created"].Result.UntrustedDownstreamData.ExternalRef))
			Expect(downstream.Requests(ns + "/" + name)).To(Equal(1))

			By("a changed request under the key: a conflict, nothing executed")
			Expect(report["changed"].Error).NotTo(BeNil())
			Expect(report["changed"].Error.Code).To(BeEquivalentTo(-32000))
			conflict := where + ` \"` + b.key + `\" has already been used with a different request (action ` + name + `); nothing was executed`
			if b.binding == "acp" {
				Expect(report["changed"].Error.Data).To(MatchJSON(`{"type":"invalid_request","code":"idempotency_conflict","message":"` + conflict + `"}`))
			} else {
				Expect(report["changed"].Error.Data).To(MatchJSON(`{"code":"idempotency_conflict","content":"` + conflict + `"}`))
			}
			Expect(env.Get(ns, name).Spec.Parameters["amount"].Raw).To(MatchJSON(`2500`))

			By("no key where the Tool requires one: refused in the binding's shape, nothing recorded")
			Expect(report["missing"].Error).NotTo(BeNil())
			Expect(report["missing"].Error.Code).To(Equal(b.missing))
			Expect(string(report["missing"].Error.Data)).To(ContainSubstring(`"code":"idempotency_key_required"`))
			Expect(actionsOfTool(ns, "pay-keyed")).To(BeZero())
		}
		Expect(downstream.TotalEffects()).To(BeNumerically(">=", 4))
	})
})

// actionsOfTool counts the actions of ns that name tool.
func actionsOfTool(ns, tool string) int {
	GinkgoHelper()
	var list v1alpha1.ToolActionList
	Expect(k8s.List(context.Background(), &list)).To(Succeed())
	n := 0
	for _, a := range list.Items {
		if a.Namespace == ns && a.Spec.ToolRef.Name == tool {
			n++
		}
	}
	return n
}

// tsClientDir holds the TypeScript MCP SDK's client, pinned by its
// package-lock.json.
var tsClientDir = filepath.Join("testdata", "tsclient")

// tsClient returns node's path, installing the client's packages with
// npm ci when they are missing; make test installs node and npm.
func tsClient() string {
	GinkgoHelper()
	node, err := exec.LookPath("node")
	Expect(err).NotTo(HaveOccurred(), "node is needed for the TypeScript MCP SDK's client: make test installs it")
	if _, err := os.Stat(filepath.Join(tsClientDir, "node_modules", "@modelcontextprotocol", "sdk")); err != nil {
		install := exec.CommandContext(context.Background(), "npm", "ci", "--no-audit", "--no-fund")
		install.Dir, install.Stdout, install.Stderr = tsClientDir, GinkgoWriter, GinkgoWriter
		Expect(install.Run()).To(Succeed(), "npm ci in "+tsClientDir)
	}
	return node
}
