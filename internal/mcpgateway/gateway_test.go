package mcpgateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/demo"
	"github.com/toolledger/toolledger/internal/mcpgateway"
	"github.com/toolledger/toolledger/internal/testenv"
)

const paySchema = `{"type":"object","required":["amount","currency","customer"],"properties":{"amount":{"type":"integer","minimum":1},"currency":{"type":"string","pattern":"^[A-Z]{3}$"},"customer":{"type":"string"}}}`

// startGateway runs a gateway over ns, as identity, until the spec ends,
// and waits until it publishes every tool in want.
func startGateway(ns string, identity *rest.Config, want ...string) *mcpgateway.Gateway {
	GinkgoHelper()
	return startGatewayWith(mcpgateway.Options{Config: identity, Namespace: ns}, want...)
}

// startGatewayWith runs a gateway of opts (with the suite's defaults for
// the rest) until the spec ends, and waits until it publishes every tool
// in want.
func startGatewayWith(opts mcpgateway.Options, want ...string) *mcpgateway.Gateway {
	GinkgoHelper()
	ctx, cancel := context.WithCancel(context.Background())
	DeferCleanup(cancel)
	if opts.Wait == 0 {
		opts.Wait = 20 * time.Second
	}
	opts.ClusterTools, opts.ProgressInterval, opts.Logger = true, 100*time.Millisecond, log.Log.WithName("gateway")
	g, err := mcpgateway.New(ctx, opts)
	Expect(err).NotTo(HaveOccurred())
	Expect(g.Run(ctx)).To(Succeed())
	Eventually(g.Tools).Should(ContainElements(want))
	return g
}

// inMemory connects an MCP client to the gateway in-process.
func inMemory(g *mcpgateway.Gateway, opts *mcp.ClientOptions) *mcp.ClientSession {
	GinkgoHelper()
	serverSide, clientSide := mcp.NewInMemoryTransports()
	ss, err := g.Server().Connect(context.Background(), serverSide, nil)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(ss.Close)
	return connect(clientSide, opts)
}

func connect(t mcp.Transport, opts *mcp.ClientOptions) *mcp.ClientSession {
	GinkgoHelper()
	c := mcp.NewClient(&mcp.Implementation{Name: "suite-agent", Version: "v1"}, opts)
	cs, err := c.Connect(context.Background(), t, nil)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(cs.Close)
	return cs
}

// pay calls the tool "pay" and decodes its structured outcome.
func pay(cs *mcp.ClientSession, arguments any, meta mcp.Meta) (*mcp.CallToolResult, mcpgateway.Outcome) {
	GinkgoHelper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "pay", Arguments: arguments, Meta: meta})
	Expect(err).NotTo(HaveOccurred())
	return res, outcomeOf(res)
}

// payTwiceAtOnce makes the same call twice concurrently.
func payTwiceAtOnce(cs *mcp.ClientSession, arguments any) []mcpgateway.Outcome {
	var wg sync.WaitGroup
	outcomes := make([]mcpgateway.Outcome, 2)
	for i := range outcomes {
		wg.Go(func() {
			defer GinkgoRecover()
			_, outcomes[i] = pay(cs, arguments, nil)
		})
	}
	wg.Wait()
	return outcomes
}

func outcomeOf(res *mcp.CallToolResult) mcpgateway.Outcome {
	GinkgoHelper()
	encoded, err := json.Marshal(res.StructuredContent)
	Expect(err).NotTo(HaveOccurred())
	var o mcpgateway.Outcome
	Expect(json.Unmarshal(encoded, &o)).To(Succeed())
	return o
}

func textOf(res *mcp.CallToolResult) string {
	GinkgoHelper()
	Expect(res.Content).To(HaveLen(1))
	return res.Content[0].(*mcp.TextContent).Text
}

func actionsIn(ns string) int {
	GinkgoHelper()
	var list v1alpha1.ToolActionList
	Expect(k8s.List(context.Background(), &list, client.InNamespace(ns))).To(Succeed())
	return len(list.Items)
}

var _ = Describe("The MCP gateway in-process", func() {
	It("records a call once per intent: a repeat and a concurrent pair each cause one effect", func() {
		ns := env.NewTenant()
		env.CreateTool(ns, "pay", testenv.WithParametersSchema(paySchema))
		cs := inMemory(startGateway(ns, cfg, "pay"), nil)

		res, first := pay(cs, map[string]any{"amount": 100, "currency": "EUR", "customer": "c-1"}, nil)
		Expect(res.IsError).To(BeFalse(), textOf(res))
		Expect(first.Phase).To(Equal("Succeeded"))
		Expect(first.Deduplicated).To(BeFalse())
		Expect(first.UntrustedDownstreamData.ExternalRef).NotTo(BeEmpty())
		Expect(textOf(res)).To(HavePrefix("Succeeded (key " + first.Key))

		// The same intent, spelled differently: members reordered, 100 as 1e2.
		res, again := pay(cs, json.RawMessage(`{"customer":"c-1","currency":"EUR","amount":1e2}`), nil)
		Expect(res.IsError).To(BeFalse(), textOf(res))
		Expect(again.Key).To(Equal(first.Key))
		Expect(again.Deduplicated).To(BeTrue())
		Expect(again.UntrustedDownstreamData.ExternalRef).To(Equal(first.UntrustedDownstreamData.ExternalRef))
		Expect(textOf(res)).To(ContainSubstring("this call caused no second effect"))
		Expect(downstream.Requests(ns + "/" + first.Key)).To(Equal(1))
		Expect(downstream.Effects(ns + "/" + first.Key)).To(Equal(1))

		outcomes := payTwiceAtOnce(cs, map[string]any{"amount": 200, "currency": "EUR", "customer": "c-1"})
		Expect(outcomes[0].Key).To(Equal(outcomes[1].Key))
		Expect(outcomes[0].Key).NotTo(Equal(first.Key))
		Expect(outcomes[0].UntrustedDownstreamData.ExternalRef).To(Equal(outcomes[1].UntrustedDownstreamData.ExternalRef))
		Expect([]bool{outcomes[0].Deduplicated, outcomes[1].Deduplicated}).To(ConsistOf(false, true))
		Expect(downstream.Effects(ns + "/" + outcomes[0].Key)).To(Equal(1))
		Expect(actionsIn(ns)).To(Equal(2))
	})

	It("keys a new step apart, takes an explicit key, and refuses a changed payload under it without an effect", func() {
		ns := env.NewTenant()
		env.CreateTool(ns, "pay", testenv.WithParametersSchema(paySchema), testenv.WithKeyRetention(24*time.Hour))
		cs := inMemory(startGateway(ns, cfg, "pay"), nil)
		args := map[string]any{"amount": 5, "currency": "EUR", "customer": "c-2"}

		_, step1 := pay(cs, args, mcp.Meta{mcpgateway.MetaRunID: "run-1", mcpgateway.MetaStepID: "step-1"})
		_, step2 := pay(cs, args, mcp.Meta{mcpgateway.MetaRunID: "run-1", mcpgateway.MetaStepID: "step-2"})
		Expect(step1.Key).NotTo(Equal(step2.Key))
		Expect(step2.Deduplicated).To(BeFalse())
		Expect(env.Get(ns, step1.Key).Spec.Provenance).To(Equal(&v1alpha1.Provenance{RunID: "run-1", StepID: "step-1"}))

		res, explicit := pay(cs, args, mcp.Meta{mcpgateway.MetaKey: "order-7"})
		Expect(res.IsError).To(BeFalse(), textOf(res))
		Expect(explicit.Key).To(Equal("order-7"))
		keptUntil := env.Get(ns, "order-7").Status.KeptUntil.UTC().Format(time.RFC3339)
		Expect(explicit.KeptUntil).To(Equal(keptUntil), "the answer states until when the ledger keeps the key")
		Expect(explicit.DownstreamKeptUntil).To(BeEmpty(), "the tool declares no downstream window")
		Expect(textOf(res)).To(ContainSubstring("The ledger keeps this key until at least " + keptUntil))
		res, conflict := pay(cs, map[string]any{"amount": 6, "currency": "EUR", "customer": "c-2"}, mcp.Meta{mcpgateway.MetaKey: "order-7"})
		Expect(res.IsError).To(BeTrue())
		Expect(conflict).To(Equal(mcpgateway.Outcome{Key: "order-7", Phase: mcpgateway.PhaseNotRecorded, ErrorClass: "DuplicateConflict", ErrorReason: "DuplicateConflict",
			Message: `the key "order-7" already records a different request (other arguments, tool or run); nothing was executed. Repeat the recorded request to read its outcome, or use a new key only for a new intent`}))
		Expect(downstream.Requests(ns + "/order-7")).To(Equal(1))
		Expect(env.Get(ns, "order-7").Spec.Parameters["amount"].Raw).To(MatchJSON(`5`))

		before := actionsIn(ns)
		res, invalid := pay(cs, map[string]any{"amount": 0, "currency": "EUR", "customer": "c-2"}, nil)
		Expect(res.IsError).To(BeTrue())
		Expect(invalid.Phase).To(Equal(mcpgateway.PhaseNotRecorded))
		Expect(invalid.ErrorClass).To(Equal("InvalidInput"))
		Expect(invalid.Message).To(Equal("arguments.amount: Invalid value: 0: amount in body should be greater than or equal to 1; nothing was recorded: correct the arguments and call again"))
		Expect(actionsIn(ns)).To(Equal(before))

		_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "not-in-the-catalog", Arguments: args})
		Expect(err).To(MatchError(ContainSubstring(`unknown tool "not-in-the-catalog"`)))
		Expect(actionsIn(ns)).To(Equal(before))
	})

	It("answers a call awaiting approval as a state to ask again about, and the same call after the approval with its outcome", func() {
		ctx := context.Background()
		ns := env.NewTenant()
		removeIdentity, err := testenv.InstallIdentityPolicy(ctx, cfg, k8s, ns, "mcp-suite")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(removeIdentity)
		// The suite's one user requests and approves.
		env.CreateTool(ns, "pay", testenv.WithParametersSchema(paySchema), testenv.WithApprovalRequired(), testenv.WithSelfApprovalAllowed())
		cs := inMemory(startGateway(ns, cfg, "pay"), nil)
		args := map[string]any{"amount": 77, "currency": "EUR", "customer": "c-7"}

		res, waiting := pay(cs, args, nil)
		Expect(res.IsError).To(BeFalse(), "awaiting approval is a state, not an error")
		Expect(waiting.Phase).To(Equal("AwaitingApproval"))
		action := env.Get(ns, waiting.Key)
		Expect(textOf(res)).To(Equal(fmt.Sprintf("Awaiting a human's approval (key %s, request digest %s): it runs once approved, and not before. "+
			"Do not retry under a new key or with changed arguments: that could cause the effect twice. "+
			"Call this tool again later with the same arguments; the same call returns the settled outcome.", waiting.Key, action.Status.RequestDigest)))
		Expect(downstream.Requests(ns + "/" + waiting.Key)).To(Equal(0))

		Expect(k8s.Create(ctx, &v1alpha1.ToolApproval{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "approve-77"},
			Spec:       v1alpha1.ToolApprovalSpec{ActionName: waiting.Key, RequestDigest: action.Status.RequestDigest, Decision: v1alpha1.Approved, Reason: "within budget"},
		})).To(Succeed())
		env.WaitForPhase(ns, waiting.Key, v1alpha1.PhaseSucceeded)
		res, settled := pay(cs, args, nil)
		Expect(res.IsError).To(BeFalse(), textOf(res))
		Expect(settled.Key).To(Equal(waiting.Key))
		Expect(settled.Phase).To(Equal("Succeeded"))
		Expect(settled.Deduplicated).To(BeTrue())
		Expect(downstream.Effects(ns + "/" + waiting.Key)).To(Equal(1))
	})

	It("publishes each class's annotations, schemas and description, and tells the client when a Tool is added", func() {
		ns := env.NewTenant()
		classes := map[string]v1alpha1.IdempotencyClass{"read": v1alpha1.ReadOnly, "set": v1alpha1.NaturallyIdempotent,
			"keyed": v1alpha1.KeyProtected, "offset": v1alpha1.Compensatable, "once": v1alpha1.NonRepeatable}
		for name, class := range classes {
			env.CreateTool(ns, name, testenv.WithClass(class), testenv.WithParametersSchema(paySchema))
		}
		g := startGateway(ns, cfg, "read", "set", "keyed", "offset", "once")
		changed := make(chan struct{}, 8)
		cs := inMemory(g, &mcp.ClientOptions{ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} }})

		listed, err := cs.ListTools(context.Background(), nil)
		Expect(err).NotTo(HaveOccurred())
		type hints struct{ readOnly, destructive, idempotent, openWorld bool }
		got := map[string]hints{}
		for _, tool := range listed.Tools {
			a := tool.Annotations
			got[tool.Name] = hints{a.ReadOnlyHint, *a.DestructiveHint, a.IdempotentHint, *a.OpenWorldHint}
			Expect(tool.InputSchema).To(HaveKeyWithValue("required", ConsistOf("amount", "currency", "customer")))
			Expect(tool.OutputSchema).To(HaveKeyWithValue("required", ConsistOf("phase", "deduplicated")))
			Expect(tool.Title).To(Equal("payments.charge v1"))
		}
		// The class table of docs/mcp.md, written out: readOnly, destructive, idempotent, openWorld.
		Expect(got).To(Equal(map[string]hints{
			"read":   {true, false, true, true},
			"set":    {false, false, true, true},
			"keyed":  {false, false, true, true},
			"offset": {false, false, false, true},
			"once":   {false, true, false, true},
		}))

		tool := testenv.NewTool(ns, "refund", env.DownstreamURL+"/charges")
		tool.Spec.Description = "Refunds a charge."
		Expect(k8s.Create(context.Background(), tool)).To(Succeed())
		Eventually(changed).Should(Receive())
		Eventually(func(g Gomega) {
			listed, err := cs.ListTools(context.Background(), nil)
			g.Expect(err).NotTo(HaveOccurred())
			var names []string
			for _, t := range listed.Tools {
				names = append(names, t.Name)
				if t.Name == "refund" {
					g.Expect(t.Description).To(HavePrefix("Refunds a charge.\n\nOperation payments.charge, version v1, idempotency class KeyProtected"))
				}
			}
			g.Expect(names).To(ContainElement("refund"))
		}).Should(Succeed())
	})
})

var _ = Describe("The MCP gateway over Streamable HTTP", func() {
	// serve serves the gateway's handler on 127.0.0.1 until the spec ends.
	serve := func(g *mcpgateway.Gateway, opts func(url string) mcpgateway.HTTPOptions) string {
		GinkgoHelper()
		handler := http.NotFoundHandler()
		server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handler.ServeHTTP(w, r) }))
		DeferCleanup(server.Close)
		h, err := g.HTTPHandler(opts(server.URL + mcpgateway.MCPPath))
		Expect(err).NotTo(HaveOccurred())
		handler = h
		return server.URL
	}

	It("authenticates callers, acts as each by impersonation, and refuses one without rights", func() {
		ctx := context.Background()
		ns := env.NewTenant()
		env.CreateTool(ns, "pay", testenv.WithParametersSchema(paySchema))
		g := gatewayAsServiceAccount(ns, 0, "pay")
		base := serve(g, func(url string) mcpgateway.HTTPOptions { return mcpgateway.HTTPOptions{ResourceURL: url} })
		endpoint := base + mcpgateway.MCPPath

		By("refusing a request without a token, pointing at the resource metadata")
		resp, err := http.Post(endpoint, "application/json", nil)
		Expect(err).NotTo(HaveOccurred())
		Expect(resp.StatusCode).To(Equal(http.StatusUnauthorized))
		Expect(resp.Header.Get("WWW-Authenticate")).To(Equal(fmt.Sprintf(`Bearer resource_metadata=%q`, base+mcpgateway.ResourceMetadataPath+mcpgateway.MCPPath)))
		resp, err = http.Get(base + mcpgateway.ResourceMetadataPath + mcpgateway.MCPPath)
		Expect(err).NotTo(HaveOccurred())
		body, _ := io.ReadAll(resp.Body)
		Expect(body).To(MatchJSON(fmt.Sprintf(`{"resource":%q,"bearer_methods_supported":["header"],"resource_name":"toolledger MCP gateway, namespace %s"}`, endpoint, ns)))

		By("refusing a token for the API server's audience, not the gateway's")
		agent := serviceAccount(ns, "agent", "toolledger-agent")
		client := mcp.NewClient(&mcp.Implementation{Name: "suite-agent", Version: "v1"}, nil)
		_, err = client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: withToken(token(agent, nil)), MaxRetries: -1}, nil)
		Expect(err).To(MatchError(ContainSubstring("Unauthorized")))

		By("acting as the agent, twice concurrently: one effect")
		agentSession := connect(&mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: withToken(token(agent, []string{endpoint}))}, nil)
		outcomes := payTwiceAtOnce(agentSession, map[string]any{"amount": 300, "currency": "EUR", "customer": "c-3"})
		Expect(outcomes[0].Phase).To(Equal("Succeeded"))
		Expect(outcomes[0].UntrustedDownstreamData.ExternalRef).To(Equal(outcomes[1].UntrustedDownstreamData.ExternalRef))
		Expect([]bool{outcomes[0].Deduplicated, outcomes[1].Deduplicated}).To(ConsistOf(false, true))
		Expect(downstream.Effects(ns + "/" + outcomes[0].Key)).To(Equal(1))
		// The API server saw the agent, not the gateway.
		Expect(env.Get(ns, outcomes[0].Key).Annotations).To(HaveKeyWithValue(v1alpha1.RequestedByAnnotation, "system:serviceaccount:"+ns+":agent"))
		key, err := mcpgateway.DeriveKey(mcpgateway.KeyInput{Caller: "system:serviceaccount:" + ns + ":agent", Tool: "pay",
			Arguments: json.RawMessage(`{"amount":300,"currency":"EUR","customer":"c-3"}`)})
		Expect(err).NotTo(HaveOccurred())
		Expect(outcomes[0].Key).To(Equal(key))

		By("refusing a caller without rights on the namespace, creating nothing")
		stranger := serviceAccount(ns, "stranger", "")
		strangerSession := connect(&mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: withToken(token(stranger, []string{endpoint}))}, nil)
		before, effects := actionsIn(ns), downstream.TotalEffects()
		res, refused := pay(strangerSession, map[string]any{"amount": 1, "currency": "EUR", "customer": "c-4"}, nil)
		Expect(res.IsError).To(BeTrue())
		Expect(refused.Phase).To(Equal(mcpgateway.PhaseNotRecorded))
		Expect(refused.ErrorClass).To(Equal("Denied"))
		Expect(refused.ErrorReason).To(Equal("Forbidden"))
		Expect(refused.Message).To(HavePrefix(fmt.Sprintf(`system:serviceaccount:%s:stranger may not invoke tools in namespace %q (creating ToolActions is forbidden)`, ns, ns)))
		Expect(actionsIn(ns)).To(Equal(before))
		Expect(downstream.TotalEffects()).To(Equal(effects))
	})

	It("follows the catalog over a subscription, and answers a call in flight with progress and then its phase", func() {
		ns := env.NewTenant()
		env.CreateTool(ns, "pay", testenv.WithParametersSchema(paySchema))
		g := startGateway(ns, cfg, "pay")
		base := serve(g, func(string) mcpgateway.HTTPOptions { return mcpgateway.HTTPOptions{LocalOnly: true} })
		changed := make(chan struct{}, 8)
		progress := make(chan string, 64)
		cs := connect(&mcp.StreamableClientTransport{Endpoint: base + mcpgateway.MCPPath}, &mcp.ClientOptions{
			ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
			ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
				progress <- req.Params.Message
			},
		})

		env.CreateTool(ns, "pay-later")
		Eventually(changed).Should(Receive())

		downstream.InjectFault(demo.Fault{Mode: demo.FaultDelay, Delay: 1500 * time.Millisecond})
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "pay", Arguments: map[string]any{"amount": 7, "currency": "EUR", "customer": "c-5"},
			Meta: mcp.Meta{"progressToken": "p-1"}})
		Expect(err).NotTo(HaveOccurred())
		o := outcomeOf(res)
		Expect(o.Phase).To(Equal("Succeeded"))
		Expect(progress).To(Receive(HavePrefix("action " + o.Key + " in flight for")))
	})
})

var _ = Describe("The MCP gateway as a stdio server", func() {
	It("gives one effect when the gateway is killed mid-call and the call is sent again", func() {
		ns := env.NewTenant()
		env.CreateTool(ns, "pay", testenv.WithParametersSchema(paySchema))
		arguments := map[string]any{"amount": 42, "currency": "EUR", "customer": "c-6"}
		key, err := mcpgateway.DeriveKey(mcpgateway.KeyInput{Caller: adminName, Tool: "pay", Arguments: json.RawMessage(`{"amount":42,"currency":"EUR","customer":"c-6"}`)})
		Expect(err).NotTo(HaveOccurred())
		gateway := func() (*mcp.ClientSession, *exec.Cmd) {
			cmd := exec.Command(gatewayBinary, "--namespace", ns, "--kubeconfig", adminKubeconfig, "--wait", "30s")
			cmd.Stderr = GinkgoWriter
			c := mcp.NewClient(&mcp.Implementation{Name: "desktop-agent", Version: "v1"}, nil)
			cs, err := c.Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
			Expect(err).NotTo(HaveOccurred())
			// The first one is killed: its Close reports the signal.
			DeferCleanup(func() { _ = cs.Close() })
			return cs, cmd
		}

		// The downstream holds the charge while the gateway dies.
		downstream.InjectFault(demo.Fault{Mode: demo.FaultDelay, Delay: 3 * time.Second})
		first, cmd := gateway()
		Eventually(func(g Gomega) {
			listed, err := first.ListTools(context.Background(), nil)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(listed.Tools).To(HaveLen(1))
		}).Should(Succeed())
		lost := make(chan error, 1)
		go func() {
			_, err := first.CallTool(context.Background(), &mcp.CallToolParams{Name: "pay", Arguments: arguments})
			lost <- err
		}()
		Eventually(func() int { return downstream.Requests(ns + "/" + key) }).Should(Equal(1))
		Expect(cmd.Process.Kill()).To(Succeed())
		Eventually(lost).Should(Receive(HaveOccurred()))

		again, _ := gateway()
		var res *mcp.CallToolResult
		Eventually(func(g Gomega) {
			res, err = again.CallTool(context.Background(), &mcp.CallToolParams{Name: "pay", Arguments: arguments})
			g.Expect(err).NotTo(HaveOccurred())
		}).Should(Succeed())
		o := outcomeOf(res)
		Expect(o.Key).To(Equal(key))
		Expect(o.Phase).To(Equal("Succeeded"))
		Expect(o.Deduplicated).To(BeTrue())
		Expect(downstream.Requests(ns + "/" + key)).To(Equal(1))
		Expect(downstream.Effects(ns + "/" + key)).To(Equal(1))
	})
})

type bearer struct {
	token string
	next  http.RoundTripper
}

func (b *bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// serviceAccount creates a ServiceAccount of ns, bound there to the
// ClusterRole role unless it is empty.
func serviceAccount(ns, name, role string) *corev1.ServiceAccount {
	GinkgoHelper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	Expect(k8s.Create(context.Background(), sa)).To(Succeed())
	if role != "" {
		Expect(k8s.Create(context.Background(), &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}},
		})).To(Succeed())
	}
	return sa
}

func bindCluster(ns string, sa *corev1.ServiceAccount, role string) {
	GinkgoHelper()
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "mcp-" + ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: sa.Name}},
	}
	Expect(k8s.Create(context.Background(), binding)).To(Succeed())
	DeferCleanup(func() { _ = k8s.Delete(context.Background(), binding) })
}

// token requests a token of sa for audiences (the API server's when nil).
func token(sa *corev1.ServiceAccount, audiences []string) string {
	GinkgoHelper()
	expiry := int64(600)
	request := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{Audiences: audiences, ExpirationSeconds: &expiry}}
	Expect(k8s.SubResource("token").Create(context.Background(), sa, request)).To(Succeed())
	return request.Status.Token
}

// servedTo is a gateway served over HTTP on 127.0.0.1 to one agent.
type servedTo struct {
	// base is the server's URL; endpoint its MCP endpoint.
	base, endpoint string
	// agentToken is a token of the agent (the ServiceAccount agent of the
	// namespace, with the shipped agent role) for the gateway's audience;
	// agentName is the agent's user name.
	agentToken, agentName string
}

// serveToAnAgent runs a gateway of ns as a ServiceAccount with the shipped
// roles only, waiting up to wait, until it publishes want; it serves it
// over HTTP and makes an agent to call it. The identity policy records
// each action's requester.
func serveToAnAgent(ns string, wait time.Duration, want ...string) servedTo {
	GinkgoHelper()
	g := gatewayAsServiceAccount(ns, wait, want...)
	handler := http.NotFoundHandler()
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handler.ServeHTTP(w, r) }))
	DeferCleanup(server.Close)
	endpoint := server.URL + mcpgateway.MCPPath
	handler, err := g.HTTPHandler(mcpgateway.HTTPOptions{ResourceURL: endpoint})
	Expect(err).NotTo(HaveOccurred())
	agent := serviceAccount(ns, "agent", "toolledger-agent")
	return servedTo{base: server.URL, endpoint: endpoint, agentToken: token(agent, []string{endpoint}), agentName: "system:serviceaccount:" + ns + ":agent"}
}

// gatewayAsServiceAccount runs a gateway of ns as a ServiceAccount with the
// shipped roles only, waiting up to wait (the suite's default when 0), until
// it publishes want. The identity policy records each action's requester.
func gatewayAsServiceAccount(ns string, wait time.Duration, want ...string) *mcpgateway.Gateway {
	GinkgoHelper()
	removeIdentity, err := testenv.InstallIdentityPolicy(context.Background(), cfg, k8s, ns, "mcp-suite")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(removeIdentity)
	gatewaySA := serviceAccount(ns, "gateway", "toolledger-viewer")
	bindCluster(ns, gatewaySA, "toolledger-mcp-gateway")
	identity := rest.AnonymousClientConfig(cfg)
	identity.BearerToken = token(gatewaySA, nil)
	return startGatewayWith(mcpgateway.Options{Config: identity, Namespace: ns, Wait: wait}, want...)
}
