package mcpgateway_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/mcpgateway"
	"github.com/toolledger/toolledger/internal/serve"
	"github.com/toolledger/toolledger/internal/testenv"
)

// apiRequests counts the requests a client sends to the API server, as
// they leave it (after impersonation): what the API server receives.
type apiRequests struct {
	mu   sync.Mutex
	seen []seenRequest
}

type seenRequest struct {
	method, path, query, impersonating string
}

func (c *apiRequests) wrap(cfg *rest.Config) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.Wrap(func(next http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			c.mu.Lock()
			c.seen = append(c.seen, seenRequest{method: r.Method, path: r.URL.Path, query: r.URL.RawQuery, impersonating: r.Header.Get("Impersonate-User")})
			c.mu.Unlock()
			return next.RoundTrip(r)
		})
	})
	return out
}

// count is the number of requests seen that match.
func (c *apiRequests) count(match func(seenRequest) bool) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, r := range c.seen {
		if match(r) {
			n++
		}
	}
	return n
}

func tokenReviews(r seenRequest) bool {
	return r.method == http.MethodPost && r.path == "/apis/authentication.k8s.io/v1/tokenreviews"
}

func toolActionWatches(r seenRequest) bool {
	return r.method == http.MethodGet && strings.HasSuffix(r.path, "/toolactions") && strings.Contains(r.query, "watch=true")
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func withToken(token string) *http.Client {
	return &http.Client{Transport: &bearer{token: token, next: http.DefaultTransport}}
}

// fromAddress is an HTTP client whose connections come from ip (a loopback
// address), a client address of its own for the gateway's rate limit.
func fromAddress(ip, token string) *http.Client {
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	return &http.Client{Transport: &bearer{token: token, next: &http.Transport{DialContext: dialer.DialContext}}}
}

// gatewayAs runs a gateway over a new tenant as a ServiceAccount bound to
// the shipped ClusterRole role (toolledger-mcp-gateway, or
// toolledger-mcp-gateway-constrained, with which the gateway impersonates
// ServiceAccounts by name) and toolledger-viewer there, counting what it
// sends to the API server, and serves it on 127.0.0.1 with limit; it
// returns the tenant, the endpoint, the count and the gateway's own config.
func gatewayAs(role string, limit *serve.RateLimit) (ns, endpoint string, requests *apiRequests, identity *rest.Config) {
	GinkgoHelper()
	ns = env.NewTenant()
	env.CreateTool(ns, "pay", testenv.WithParametersSchema(paySchema), testenv.WithResultPointers("/customer"))
	removeIdentity, err := testenv.InstallIdentityPolicy(context.Background(), cfg, k8s, ns, "mcp-suite")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(removeIdentity)
	gatewaySA := serviceAccount(ns, "gateway", "toolledger-viewer")
	bindCluster(ns, gatewaySA, role)
	identity = rest.AnonymousClientConfig(cfg)
	identity.BearerToken = token(gatewaySA, nil)
	requests = &apiRequests{}
	g := startGatewayWith(mcpgateway.Options{Config: requests.wrap(identity), Namespace: ns,
		ConstrainedImpersonation: role == "toolledger-mcp-gateway-constrained"}, "pay")
	handler := http.NotFoundHandler()
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handler.ServeHTTP(w, r) }))
	DeferCleanup(server.Close)
	endpoint = server.URL + mcpgateway.MCPPath
	h, err := g.HTTPHandler(mcpgateway.HTTPOptions{ResourceURL: endpoint, RateLimit: limit})
	Expect(err).NotTo(HaveOccurred())
	handler = h
	return ns, endpoint, requests, identity
}

var _ = Describe("The MCP gateway's authentication and authorization", func() {
	// gatewayOverHTTP runs a gateway with the shipped legacy role
	// (gatewayAs).
	gatewayOverHTTP := func(limit *serve.RateLimit) (ns, endpoint string, requests *apiRequests) {
		GinkgoHelper()
		ns, endpoint, requests, _ = gatewayAs("toolledger-mcp-gateway", limit)
		return ns, endpoint, requests
	}
	send := func(c *http.Client, endpoint string) *http.Response {
		GinkgoHelper()
		req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, endpoint, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
		Expect(err).NotTo(HaveOccurred())
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		Expect(err).NotTo(HaveOccurred())
		_ = resp.Body.Close()
		return resp
	}
	post := func(c *http.Client, endpoint string) int {
		GinkgoHelper()
		return send(c, endpoint).StatusCode
	}

	It("reviews a refused token once, and one that cannot be a bearer token never", func() {
		_, endpoint, requests := gatewayOverHTTP(nil)

		By("sending the same unknown token ten times: one TokenReview")
		bad := withToken("not-a-token-the-api-server-knows")
		for range 10 {
			Expect(post(bad, endpoint)).To(Equal(http.StatusUnauthorized))
		}
		Expect(requests.count(tokenReviews)).To(Equal(1))

		By("sending tokens that cannot be bearer tokens: no TokenReview")
		Expect(post(withToken("<script>alert(1)</script>"), endpoint)).To(Equal(http.StatusUnauthorized))
		Expect(post(withToken(strings.Repeat("a", 17<<10)), endpoint)).To(Equal(http.StatusUnauthorized))
		Expect(requests.count(tokenReviews)).To(Equal(1))
	})

	It("answers a client over its rate 429 before reviewing its token, while another client is served", func() {
		_, endpoint, requests := gatewayOverHTTP(serve.NewRateLimit(0.2, 4, 100))
		bad := fromAddress("127.0.0.1", "not-a-token-the-api-server-knows")
		statuses := map[int]int{}
		for range 8 {
			statuses[post(bad, endpoint)]++
		}
		Expect(statuses).To(Equal(map[int]int{http.StatusUnauthorized: 4, http.StatusTooManyRequests: 4}), "a burst of 4, then 429")
		resp := send(bad, endpoint)
		Expect(resp.StatusCode).To(Equal(http.StatusTooManyRequests))
		Expect(resp.Header.Get("Retry-After")).To(BeElementOf("1", "2", "3", "4", "5"), "the next token is due within 5 s")
		Expect(post(fromAddress("127.0.0.2", "another-unknown-token"), endpoint)).To(Equal(http.StatusUnauthorized))
		Expect(requests.count(tokenReviews)).To(Equal(2))
	})

	It("lists the tools only to a caller who may invoke them", func() {
		ns, endpoint, _ := gatewayOverHTTP(nil)
		stranger := serviceAccount(ns, "stranger", "")
		strangerSession := connect(&mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: withToken(token(stranger, []string{endpoint}))}, nil)
		_, err := strangerSession.ListTools(context.Background(), nil)
		Expect(err).To(MatchError(ContainSubstring("system:serviceaccount:" + ns + ":stranger may not invoke tools in namespace \"" + ns + "\" (creating ToolActions is forbidden), so no tools are listed")))

		agent := serviceAccount(ns, "agent", "toolledger-agent")
		agentSession := connect(&mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: withToken(token(agent, []string{endpoint}))}, nil)
		tools, err := agentSession.ListTools(context.Background(), nil)
		Expect(err).NotTo(HaveOccurred())
		Expect(tools.Tools).To(HaveLen(1))
	})

	It("waits for every caller's calls in one watch of its own, while each call applies as its caller", func() {
		ns, endpoint, requests := gatewayOverHTTP(nil)
		ctx := context.Background()
		sessions := []*mcp.ClientSession{}
		for _, name := range []string{"agent-a", "agent-b"} {
			agent := serviceAccount(ns, name, "toolledger-agent")
			cs := connect(&mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: withToken(token(agent, []string{endpoint}))}, nil)
			tools, err := cs.ListTools(ctx, nil)
			Expect(err).NotTo(HaveOccurred())
			Expect(tools.Tools).To(HaveLen(1))
			sessions = append(sessions, cs)
		}
		for i, cs := range sessions {
			res, outcome := pay(cs, map[string]any{"amount": 10 + i, "currency": "EUR", "customer": "c-w"}, nil)
			Expect(res.IsError).To(BeFalse(), textOf(res))
			Expect(outcome.Phase).To(Equal("Succeeded"))
		}
		Expect(requests.count(toolActionWatches)).To(Equal(1), "one watch of the namespace's actions, whatever the callers")
		Expect(requests.count(func(r seenRequest) bool { return toolActionWatches(r) && r.impersonating != "" })).To(BeZero(), "the watch is the gateway's own")
		Expect(requests.count(func(r seenRequest) bool {
			return r.method == http.MethodPatch && r.impersonating == "system:serviceaccount:"+ns+":agent-b"
		})).To(Equal(1), "each call still applies as its caller")
	})

	It("acts for callers under constrained impersonation, and its own token acts as them for the ledger's requests only", func() {
		ctx := context.Background()
		ns, endpoint, requests, gatewayIdentity := gatewayAs("toolledger-mcp-gateway-constrained", nil)

		By("serving an agent: its tools, and its call, made as the agent (its ServiceAccount by name)")
		agent := serviceAccount(ns, "agent", "toolledger-agent")
		cs := connect(&mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: withToken(token(agent, []string{endpoint}))}, nil)
		tools, err := cs.ListTools(ctx, nil)
		Expect(err).NotTo(HaveOccurred())
		Expect(tools.Tools).To(HaveLen(1))
		res, outcome := pay(cs, map[string]any{"amount": 42, "currency": "EUR", "customer": "c-c"}, nil)
		Expect(res.IsError).To(BeFalse(), textOf(res))
		Expect(outcome.Phase).To(Equal("Succeeded"))
		Expect(downstream.Effects(ns + "/" + outcome.Key)).To(Equal(1))
		Expect(env.Get(ns, outcome.Key).Annotations).To(HaveKeyWithValue(v1alpha1.RequestedByAnnotation, "system:serviceaccount:"+ns+":agent"))
		Expect(requests.count(func(r seenRequest) bool {
			return r.method == http.MethodPatch && r.impersonating == "system:serviceaccount:"+ns+":agent"
		})).To(Equal(1))

		By("refusing tools/list to a stranger")
		stranger := serviceAccount(ns, "stranger", "")
		strangerSession := connect(&mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: withToken(token(stranger, []string{endpoint}))}, nil)
		_, err = strangerSession.ListTools(ctx, nil)
		Expect(err).To(MatchError(ContainSubstring("so no tools are listed")))

		By("refusing the gateway's own token anything else as anyone: listing actions as the agent, who may; secrets as system:masters")
		asAgent := rest.CopyConfig(gatewayIdentity)
		asAgent.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":agent"}
		agentClient, err := client.New(asAgent, client.Options{Scheme: k8s.Scheme(), Mapper: k8s.RESTMapper()})
		Expect(err).NotTo(HaveOccurred())
		Expect(agentClient.List(ctx, &v1alpha1.ToolActionList{}, client.InNamespace(ns))).To(MatchError(ContainSubstring("forbidden")))
		asMaster := rest.CopyConfig(gatewayIdentity)
		asMaster.Impersonate = rest.ImpersonationConfig{UserName: "mallory", Groups: []string{"system:masters"}}
		masterClient, err := client.New(asMaster, client.Options{Scheme: k8s.Scheme(), Mapper: k8s.RESTMapper()})
		Expect(err).NotTo(HaveOccurred())
		Expect(masterClient.List(ctx, &corev1.SecretList{}, client.InNamespace(ns))).To(MatchError(ContainSubstring("forbidden")))
		// A user that is no ServiceAccount is impersonated with everything
		// (the user-info mode), for the same requests only.
		asAna := rest.CopyConfig(gatewayIdentity)
		asAna.Impersonate = rest.ImpersonationConfig{UserName: "ana@example.com", UID: "u-1", Groups: []string{"payments"},
			Extra: map[string][]string{"authentication.kubernetes.io/credential-id": {"JTI=1"}}}
		anaClient, err := client.New(asAna, client.Options{Scheme: k8s.Scheme(), Mapper: k8s.RESTMapper()})
		Expect(err).NotTo(HaveOccurred())
		review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: "create", Group: v1alpha1.GroupVersion.Group, Resource: "toolactions"}}}
		Expect(anaClient.Create(ctx, review)).To(Succeed())
		Expect(anaClient.List(ctx, &v1alpha1.ToolActionList{}, client.InNamespace(ns))).To(MatchError(ContainSubstring("forbidden")))
		// The legacy role allows what the constrained one refused.
		legacy := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "mcp-legacy-" + ns},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "toolledger-mcp-gateway"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "gateway"}},
		}
		Expect(k8s.Create(ctx, legacy)).To(Succeed())
		DeferCleanup(func() { _ = k8s.Delete(context.Background(), legacy) })
		Eventually(func() error { return masterClient.List(ctx, &corev1.SecretList{}, client.InNamespace(ns)) }).Should(Succeed())
	})
})
