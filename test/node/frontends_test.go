//go:build node && linux

package node

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// serviceURL is the http:// address of the release's Service of component,
// at its ClusterIP, which the host reaches on the node's bridge.
func serviceURL(ctx context.Context, component string) string {
	GinkgoHelper()
	var services corev1.ServiceList
	Expect(k8s.List(ctx, &services, client.InNamespace(releaseNamespace),
		client.MatchingLabels{"app.kubernetes.io/instance": release, "app.kubernetes.io/component": component})).To(Succeed())
	Expect(services.Items).To(HaveLen(1), "the Services of %s", component)
	svc := services.Items[0]
	return fmt.Sprintf("http://%s:%d", svc.Spec.ClusterIP, svc.Spec.Ports[0].Port)
}

// bearer sends a token with every request.
type bearer struct{ token string }

func (b bearer) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(req)
}

// frontEnds proves the web console and the MCP gateway as the chart deploys
// them, reached through their Services with tokens of a tenant's
// ServiceAccount for each one's audience.
func frontEnds(ctx context.Context, shop *downstream) {
	GinkgoHelper()
	const resourceURL = "https://mcp.toolledger.test/mcp"
	started := time.Now()
	helm(ctx, "upgrade", release, "charts/toolledger", "-n", releaseNamespace, "--reuse-values", "--wait", "--timeout", "5m",
		"--set", "console.enabled=true", "--set", "mcpGateway.enabled=true",
		"--set", "mcpGateway.namespace=agents", "--set", "mcpGateway.resourceURL="+resourceURL)
	admin(ctx, "create", "serviceaccount", "-n", "agents", "desk")
	for _, role := range []string{"agent", "viewer"} {
		admin(ctx, "create", "rolebinding", "-n", "agents", "desk-"+role, "--clusterrole="+release+"-"+role, "--serviceaccount=agents:desk")
	}

	By("the console shows an archived action to the tenant's ServiceAccount")
	consoleToken := strings.TrimSpace(admin(ctx, "create", "token", "desk", "-n", "agents", "--audience", "toolledger-console"))
	console := &http.Client{Transport: bearer{consoleToken}, Timeout: 30 * time.Second}
	Eventually(func(g Gomega) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, serviceURL(ctx, "console")+"/actions/agents/load-0000", nil)
		g.Expect(err).NotTo(HaveOccurred())
		resp, err := console.Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		defer resp.Body.Close()
		page, err := io.ReadAll(resp.Body)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(resp.StatusCode).To(Equal(http.StatusOK), string(page))
		g.Expect(string(page)).To(And(ContainSubstring("load-0000"), ContainSubstring("Succeeded")))
	}).Should(Succeed())

	By("an agent lists the tools through the MCP gateway and charges twice with the same arguments: one effect")
	mcpToken := strings.TrimSpace(admin(ctx, "create", "token", "desk", "-n", "agents", "--audience", resourceURL))
	agent := mcp.NewClient(&mcp.Implementation{Name: "node-suite-agent", Version: "v1"}, nil)
	session, err := agent.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint: serviceURL(ctx, "mcp-gateway") + "/mcp", HTTPClient: &http.Client{Transport: bearer{mcpToken}},
	}, nil)
	Expect(err).NotTo(HaveOccurred())
	defer session.Close()
	listed, err := session.ListTools(ctx, nil)
	Expect(err).NotTo(HaveOccurred())
	var names []string
	for _, tool := range listed.Tools {
		names = append(names, tool.Name)
	}
	Expect(names).To(ContainElement("charge"))
	before := shop.stats(ctx).Effects
	arguments := map[string]any{"amount": 4200, "currency": "EUR", "customer": "cus_mcp"}
	for range 2 {
		result, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "charge", Arguments: arguments})
		Expect(err).NotTo(HaveOccurred())
		Expect(result.IsError).To(BeFalse(), "%+v", result.Content)
	}
	added := map[string]int{}
	for key, n := range shop.stats(ctx).Effects {
		if n != before[key] {
			added[key] = n - before[key]
		}
	}
	Expect(added).To(HaveLen(1), "one key for the two calls")
	duplicates := 0
	for _, n := range added {
		duplicates += n - 1
	}
	record(ctx, "the console and the MCP gateway deployed by the chart, through their Services: an archived action's page; the same charge called twice", 2, duplicates, 0, 0, started)
	Expect(duplicates).To(BeZero())
}
