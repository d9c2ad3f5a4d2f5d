package mcpgateway_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/mcpgateway"
	"github.com/toolledger/toolledger/internal/testenv"
	"github.com/toolledger/toolledger/pkg/sdk"
)

var _ = Describe("A client's key through the HTTP front", func() {
	It("meets its intent whether a Tool or a same-named ClusterTool answers the name, and a key issued for a ClusterTool before is still found", func() {
		ctx := context.Background()
		ns := env.NewTenant()
		name := "pay-" + ns
		shared := &v1alpha1.ClusterTool{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1alpha1.ClusterToolSpec{
				ToolSpec:          testenv.NewTool("", name, env.DownstreamURL+"/charges", testenv.WithParametersSchema(paySchema)).Spec,
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
			},
		}
		Expect(k8s.Create(ctx, shared)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8s.Delete(context.Background(), shared))).To(Succeed()) })
		served := serveToAnAgent(ns, 5*time.Second, name)
		post := func(key string) (*http.Response, string) {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, served.base+mcpgateway.FrontPath+name,
				strings.NewReader(`{"amount":100,"currency":"EUR","customer":"c-1"}`))
			Expect(err).NotTo(HaveOccurred())
			req.Header.Set("Authorization", "Bearer "+served.agentToken)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", key)
			resp, err := http.DefaultClient.Do(req)
			Expect(err).NotTo(HaveOccurred())
			defer func() { _ = resp.Body.Close() }()
			body, err := io.ReadAll(resp.Body)
			Expect(err).NotTo(HaveOccurred())
			return resp, string(body)
		}
		charged := func(action string) int { return downstream.Requests(ns + "/" + action) }

		By("a key issued for the ClusterTool while the kind named keys: recorded under that name by the agent")
		agent := rest.CopyConfig(cfg)
		agent.Impersonate = rest.ImpersonationConfig{UserName: served.agentName}
		agentLedger, err := sdk.NewClient(agent)
		Expect(err).NotTo(HaveOccurred())
		issued := sdk.ClusterToolClientKey(served.agentName, name, "order-0")
		out, err := agentLedger.Invoke(ctx, sdk.Request{Namespace: ns, Tool: name, ToolKind: v1alpha1.KindClusterTool, Key: issued, ClientKey: "order-0",
			Parameters: map[string]any{"amount": 100, "currency": "EUR", "customer": "c-1"}})
		Expect(err).NotTo(HaveOccurred())
		Expect(out.Phase).To(Equal(v1alpha1.PhaseSucceeded))

		By("its retry through the front is answered from that record, no second charge and no new action")
		resp, body := post("order-0")
		Expect(resp.StatusCode).To(Equal(http.StatusOK), body)
		Expect(resp.Header.Get("Toolledger-Key")).To(Equal(issued))
		Expect(resp.Header.Get("Idempotent-Replayed")).To(Equal("true"))
		Expect(charged(issued)).To(Equal(1))
		err = k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: sdk.ClientKey(served.agentName, name, "order-0")}, &v1alpha1.ToolAction{})
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "no action under the name the key would get now: %v", err)

		By("a new key while the ClusterTool answers: named by caller, tool name and key")
		resp, body = post("order-1")
		Expect(resp.StatusCode).To(Equal(http.StatusOK), body)
		first := sdk.ClientKey(served.agentName, name, "order-1")
		Expect(resp.Header.Get("Toolledger-Key")).To(Equal(first))
		Expect(env.Get(ns, first).Spec.ToolRef.Kind).To(Equal(v1alpha1.KindClusterTool))

		By("a namespace Tool of the same name shadows the ClusterTool; a new key goes to it")
		env.CreateTool(ns, name, testenv.WithParametersSchema(paySchema))
		probes := 0
		Eventually(func(g Gomega) {
			probes++
			resp, body := post(fmt.Sprintf("order-2-%d", probes))
			g.Expect(resp.StatusCode).To(Equal(http.StatusOK), body)
			g.Expect(env.Get(ns, resp.Header.Get("Toolledger-Key")).Spec.ToolRef.Kind).To(Equal(v1alpha1.KindTool))
		}).Should(Succeed())

		By("the retry of the first key meets its recorded intent: refused as a changed request (the kind it recorded differs), never a second action or charge")
		before := env.Get(ns, first)
		resp, body = post("order-1")
		Expect(resp.StatusCode).To(Equal(http.StatusUnprocessableEntity), body)
		Expect(body).To(ContainSubstring(`"code":"idempotency_conflict"`))
		Expect(resp.Header.Get("Toolledger-Key")).To(Equal(first))
		Expect(env.Get(ns, first).UID).To(Equal(before.UID))
		Expect(charged(first)).To(Equal(1))
		var all v1alpha1.ToolActionList
		Expect(k8s.List(ctx, &all, client.InNamespace(ns))).To(Succeed())
		keys := map[string]int{}
		for _, a := range all.Items {
			keys[a.Spec.ClientKey]++
		}
		Expect(keys).To(HaveLen(2 + probes))
		for key, n := range keys {
			Expect(n).To(Equal(1), "client key %q has %d actions", key, n)
		}
	})
})

var _ = Describe("A front's answer", func() {
	It("comes only from an action the same caller created: one another user made first under the name is a conflict, never the caller's answer", func() {
		ctx := context.Background()
		ns := env.NewTenant()
		env.CreateTool(ns, "pay", testenv.WithParametersSchema(paySchema))
		served := serveToAnAgent(ns, 5*time.Second, "pay")
		name := sdk.ClientKey(served.agentName, "pay", "order-9")

		By("another user of the namespace creates the action first, under the name the agent's key derives, with the same request")
		ledger, err := sdk.NewClient(cfg)
		Expect(err).NotTo(HaveOccurred())
		out, err := ledger.Invoke(ctx, sdk.Request{Namespace: ns, Tool: "pay", Key: name, ClientKey: "order-9",
			Parameters: map[string]any{"amount": 100, "currency": "EUR", "customer": "c-1"}})
		Expect(err).NotTo(HaveOccurred())
		Expect(out.Phase).To(Equal(v1alpha1.PhaseSucceeded))
		Expect(out.RequestedBy).NotTo(Equal(served.agentName))

		By("the agent's request under that key: 422, naming nothing of the other's outcome")
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, served.base+mcpgateway.FrontPath+"pay",
			strings.NewReader(`{"amount":100,"currency":"EUR","customer":"c-1"}`))
		Expect(err).NotTo(HaveOccurred())
		req.Header.Set("Authorization", "Bearer "+served.agentToken)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "order-9")
		resp, err := http.DefaultClient.Do(req)
		Expect(err).NotTo(HaveOccurred())
		body, err := io.ReadAll(resp.Body)
		Expect(err).NotTo(HaveOccurred())
		Expect(resp.Body.Close()).To(Succeed())
		Expect(resp.StatusCode).To(Equal(http.StatusUnprocessableEntity), string(body))
		Expect(string(body)).To(ContainSubstring(`"code":"idempotency_conflict"`))
		Expect(string(body)).NotTo(ContainSubstring(out.ExternalRef))
		Expect(resp.Header.Get("Toolledger-Phase")).To(BeEmpty())
		Expect(downstream.Requests(ns + "/" + name)).To(Equal(1))
	})
})
