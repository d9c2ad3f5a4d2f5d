package controllers_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/testenv"
	"github.com/toolledger/toolledger/pkg/sdk"
)

const chargeSchema = `{
  "type": "object",
  "required": ["amount", "currency"],
  "additionalProperties": false,
  "properties": {
    "amount": {"type": "integer", "minimum": 1},
    "currency": {"type": "string", "enum": ["EUR", "USD"]},
    "customer": {"type": "string"},
    "memo": {"type": "string", "maxLength": 140}
  }
}`

var _ = Describe("The tool contract", func() {
	ctx := context.Background()
	var ns string
	BeforeEach(func() { ns = env.NewTenant() })

	It("fails parameters that violate the schema before anything is sent, naming the field", func() {
		newTool(ns, testenv.WithParametersSchema(chargeSchema))
		Expect(k8s.Create(ctx, newAction(ns, "order-bad-currency", "charge",
			params(map[string]any{"amount": 100, "currency": "GBP"})))).To(Succeed())
		Expect(k8s.Create(ctx, newAction(ns, "order-extra", "charge",
			params(map[string]any{"amount": 0, "currency": "EUR", "tip": 5})))).To(Succeed())

		bad := env.WaitForPhase(ns, "order-bad-currency", v1alpha1.PhaseFailed)
		Expect(bad.Status.Error.Class).To(Equal(v1alpha1.ErrorClassInvalidInput))
		Expect(bad.Status.Error.Reason).To(Equal("InvalidParameters"))
		Expect(bad.Status.Error.Message).To(Equal(`spec.parameters.currency: Unsupported value: "GBP": supported values: "EUR", "USD"`))

		extra := env.WaitForPhase(ns, "order-extra", v1alpha1.PhaseFailed)
		Expect(extra.Status.Error.Message).To(ContainSubstring("spec.parameters.amount: Invalid value: 0: amount in body should be greater than or equal to 1"))
		Expect(extra.Status.Error.Message).To(ContainSubstring(`spec.parameters: Invalid value: "tip": .tip in body is a forbidden property`))

		for _, name := range []string{"order-bad-currency", "order-extra"} {
			Expect(downstream.Requests(keyOf(ns, name))).To(Equal(0))
		}
	})

	It("digests only the consequential fields, while the key still pins the whole request", func() {
		newTool(ns, testenv.WithConsequentialFields("/amount", "/currency", "/customer"))
		withMemo := func(memo string) map[string]apiextensionsv1.JSON {
			return params(map[string]any{"amount": 900, "currency": "EUR", "customer": "cus_42", "memo": memo})
		}
		Expect(k8s.Create(ctx, newAction(ns, "order-a", "charge", withMemo("first try")))).To(Succeed())
		Expect(k8s.Create(ctx, newAction(ns, "order-b", "charge", withMemo("re-derived after compaction")))).To(Succeed())
		Expect(k8s.Create(ctx, newAction(ns, "order-c", "charge",
			params(map[string]any{"amount": 901, "currency": "EUR", "customer": "cus_42", "memo": "first try"})))).To(Succeed())
		a := env.WaitForPhase(ns, "order-a", v1alpha1.PhaseSucceeded)
		b := env.WaitForPhase(ns, "order-b", v1alpha1.PhaseSucceeded)
		c := env.WaitForPhase(ns, "order-c", v1alpha1.PhaseSucceeded)
		Expect(a.Status.RequestDigest).To(Equal(b.Status.RequestDigest), "a memo is not part of the intent")
		Expect(c.Status.RequestDigest).NotTo(Equal(a.Status.RequestDigest), "the amount is")

		// Under one key, even a harmless field cannot change: the key records the request.
		var current v1alpha1.ToolAction
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "order-a"}, &current)).To(Succeed())
		current.Spec.Parameters = withMemo("edited")
		err := k8s.Update(ctx, &current)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "update: %v", err)
		Expect(err.Error()).To(ContainSubstring(immutableMessage))
	})

	It("publishes whether a tool can be used, and its MCP hints", func() {
		newTool(ns)
		createTool(ns, "charge-locked", testenv.WithClass(v1alpha1.NonRepeatable), testenv.WithAuthSecret("missing", "token"))
		createTool(ns, "charge-badschema", testenv.WithParametersSchema(`{"type": "object", "properties": {"amount": {"type": "money"}}}`))

		Eventually(func(g Gomega) {
			ready := toolCondition(g, ns, "charge")
			g.Expect(ready.Status).To(Equal(metav1.ConditionTrue))
			var tool v1alpha1.Tool
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "charge"}, &tool)).To(Succeed())
			g.Expect(tool.Status.MCPHints).To(Equal(&v1alpha1.MCPHints{IdempotentHint: true, OpenWorldHint: true}))
		}).Should(Succeed())
		Eventually(func(g Gomega) {
			locked := toolCondition(g, ns, "charge-locked")
			g.Expect(locked.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(locked.Reason).To(Equal("SecretNotUsable"))
			g.Expect(locked.Message).To(Equal("Secret " + ns + "/missing is not usable by Tools: only a Secret labelled toolledger.dev/tool-credential=true is"))
			var tool v1alpha1.Tool
			g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "charge-locked"}, &tool)).To(Succeed())
			g.Expect(tool.Status.MCPHints).To(Equal(&v1alpha1.MCPHints{DestructiveHint: true, OpenWorldHint: true}))
		}).Should(Succeed())
		Eventually(func(g Gomega) {
			schema := toolCondition(g, ns, "charge-badschema")
			g.Expect(schema.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(schema.Reason).To(Equal("InvalidSchema"))
			g.Expect(schema.Message).To(Equal(`spec.parametersSchema: parametersSchema.properties[amount].type: "money" is not an OpenAPI v3 type`))
		}).Should(Succeed())

		out, err := env.Kubectl("get", "tools", "-n", ns, "-o", "wide")
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(MatchRegexp(`(?m)^NAME\s+OPERATION\s+VERSION\s+CLASS\s+ADAPTER\s+READY\s+AGE`))
		Expect(out).To(MatchRegexp(`(?m)^charge-locked\s+payments.charge\s+v1\s+NonRepeatable\s+http://\S+\s+False`))
	})

	It("deletes a finished action once its key retention has passed", func() {
		newTool(ns, testenv.WithKeyRetention(2*time.Second))
		Expect(k8s.Create(ctx, newAction(ns, "order-ttl", "charge", charge(11)))).To(Succeed())
		done := env.WaitForPhase(ns, "order-ttl", v1alpha1.PhaseSucceeded)
		Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(done), &v1alpha1.ToolAction{}))
		}).Should(BeTrue())
		Expect(downstream.Effects(keyOf(ns, "order-ttl"))).To(Equal(1))
	})

	It("deletes an action rejected before any dispatch once its key retention has passed", func() {
		// Only the retention sweep sees this one: no executor finished it
		// after a dispatch, and finished actions are not cached.
		newTool(ns, testenv.WithParametersSchema(chargeSchema), testenv.WithKeyRetention(time.Second))
		Expect(k8s.Create(ctx, newAction(ns, "order-bad-ttl", "charge", params(map[string]any{"amount": -1})))).To(Succeed())
		rejected := env.WaitForPhase(ns, "order-bad-ttl", v1alpha1.PhaseFailed)
		Expect(rejected.Status.Error.Class).To(Equal(v1alpha1.ErrorClassInvalidInput))
		Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(rejected), &v1alpha1.ToolAction{}))
		}).Should(BeTrue())
		Expect(downstream.Requests(keyOf(ns, "order-bad-ttl"))).To(BeZero())
	})

	It("sends the same key in two tenants as two intents with two Idempotency-Keys", func() {
		other := env.NewTenant()
		newTool(ns)
		newTool(other)
		Expect(k8s.Create(ctx, newAction(ns, "order-shared", "charge", charge(10)))).To(Succeed())
		Expect(k8s.Create(ctx, newAction(other, "order-shared", "charge", charge(10)))).To(Succeed())
		first := env.WaitForPhase(ns, "order-shared", v1alpha1.PhaseSucceeded)
		second := env.WaitForPhase(other, "order-shared", v1alpha1.PhaseSucceeded)

		Expect(first.Status.IdempotencyKey).To(Equal(ns + "/order-shared"))
		Expect(second.Status.IdempotencyKey).To(Equal(other + "/order-shared"))
		Expect(downstream.Effects(ns + "/order-shared")).To(Equal(1))
		Expect(downstream.Effects(other + "/order-shared")).To(Equal(1))
		Expect(first.Status.ExternalRef).NotTo(Equal(second.Status.ExternalRef))
		Expect(first.Status.RequestDigest).NotTo(Equal(second.Status.RequestDigest), "the tenant is part of the intent")
	})
})

var _ = Describe("ClusterTools", func() {
	It("serve the namespaces their selector admits and deny the others, without a dispatch", func() {
		ctx := context.Background()
		gold := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "gold-", Labels: map[string]string{"toolledger.dev/tier": "gold"}}}
		plain := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "plain-"}}
		Expect(k8s.Create(ctx, gold)).To(Succeed())
		Expect(k8s.Create(ctx, plain)).To(Succeed())

		name := "platform-charge-" + gold.Name
		clusterTool := &v1alpha1.ClusterTool{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1alpha1.ClusterToolSpec{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"toolledger.dev/tier": "gold"}},
				ToolSpec:          testenv.NewTool("", name, env.DownstreamURL+"/charges", testenv.WithTimeout(5*time.Second)).Spec,
			},
		}
		Expect(k8s.Create(ctx, clusterTool)).To(Succeed())
		DeferCleanup(func() { _ = k8s.Delete(context.Background(), clusterTool) })

		viaClusterTool := func(namespace, key string) *v1alpha1.ToolAction {
			a := newAction(namespace, key, name, charge(77))
			a.Spec.ToolRef.Kind = v1alpha1.KindClusterTool
			return a
		}
		Expect(k8s.Create(ctx, viaClusterTool(gold.Name, "order-gold"))).To(Succeed())
		Expect(k8s.Create(ctx, viaClusterTool(plain.Name, "order-plain"))).To(Succeed())

		env.WaitForPhase(gold.Name, "order-gold", v1alpha1.PhaseSucceeded)
		Expect(downstream.Effects(keyOf(gold.Name, "order-gold"))).To(Equal(1))

		denied := env.WaitForPhase(plain.Name, "order-plain", v1alpha1.PhaseFailed)
		Expect(denied.Status.Error.Class).To(Equal(v1alpha1.ErrorClassDenied))
		Expect(denied.Status.Error.Reason).To(Equal("ToolNotAdmitted"))
		Expect(denied.Status.Error.Message).To(Equal(`clustertool "` + name + `" does not admit namespace "` + plain.Name + `"`))
		Expect(downstream.Requests(keyOf(plain.Name, "order-plain"))).To(Equal(0))

		// A namespaced Tool of the same name is not a ClusterTool.
		Expect(k8s.Create(ctx, newAction(plain.Name, "order-wrong-kind", name, charge(1)))).To(Succeed())
		wrong := env.WaitForPhase(plain.Name, "order-wrong-kind", v1alpha1.PhaseFailed)
		Expect(wrong.Status.Error.Reason).To(Equal("ToolNotFound"))
	})
})

var _ = Describe("Tenancy", func() {
	It("confines an agent's service account to its own namespace and keeps it off the catalog", func() {
		ctx := context.Background()
		home, away := env.NewTenant(), env.NewTenant()
		role := env.LoadClusterRole("role_agent.yaml", home)
		Expect(k8s.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: home, Name: "agents"},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "billing-agent", Namespace: home}},
		})).To(Succeed())
		newTool(home)
		newTool(away)
		Expect(k8s.Create(ctx, newAction(away, "order-away", "charge", charge(3)))).To(Succeed())

		agent := env.Impersonate("system:serviceaccount:" + home + ":billing-agent")
		Eventually(func() error {
			return agent.Create(ctx, newAction(home, "order-home", "charge", charge(2)))
		}).Should(Succeed(), "the binding takes effect")
		env.WaitForPhase(home, "order-home", v1alpha1.PhaseSucceeded)

		// The role is enough for the SDK's one-request invoke.
		agentConfig := rest.CopyConfig(cfg)
		agentConfig.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + home + ":billing-agent"}
		invoker, err := sdk.NewClient(agentConfig)
		Expect(err).NotTo(HaveOccurred())
		invokeCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		outcome, err := invoker.Invoke(invokeCtx, sdk.Request{Namespace: home, Key: "order-sdk", Tool: "charge",
			Parameters: map[string]any{"amount": 12, "currency": "EUR"}})
		Expect(err).NotTo(HaveOccurred())
		Expect(outcome.Phase).To(Equal(v1alpha1.PhaseSucceeded))
		_, err = invoker.Invoke(invokeCtx, sdk.Request{Namespace: away, Key: "order-sdk", Tool: "charge",
			Parameters: map[string]any{"amount": 12, "currency": "EUR"}})
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "SDK invoke in another namespace: %v", err)

		var own v1alpha1.ToolAction
		Expect(agent.Get(ctx, client.ObjectKey{Namespace: home, Name: "order-home"}, &own)).To(Succeed())
		Expect(agent.List(ctx, &v1alpha1.ToolActionList{}, client.InNamespace(home))).To(Succeed())

		forbidden := func(err error, what string) {
			GinkgoHelper()
			Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%s: %v", what, err)
		}
		forbidden(agent.Get(ctx, client.ObjectKey{Namespace: away, Name: "order-away"}, &v1alpha1.ToolAction{}), "get in another namespace")
		forbidden(agent.List(ctx, &v1alpha1.ToolActionList{}, client.InNamespace(away)), "list in another namespace")
		forbidden(agent.Create(ctx, newAction(away, "order-sneaky", "charge", charge(1))), "create in another namespace")
		_, err = agent.Watch(ctx, &v1alpha1.ToolActionList{}, client.InNamespace(away))
		forbidden(err, "watch in another namespace")
		forbidden(agent.Create(ctx, testenv.NewTool(home, "my-own-url", "http://127.0.0.1:1/",
			testenv.WithOperation("x"), testenv.WithClass(v1alpha1.ReadOnly))), "create a Tool")
		own.Status.Phase = v1alpha1.PhaseFailed
		forbidden(agent.Status().Update(ctx, &own), "write status")
		forbidden(agent.Get(ctx, client.ObjectKey{Namespace: home, Name: "anything"}, &corev1.Secret{}), "read Secrets")
		Expect(downstream.Requests(keyOf(away, "order-sneaky"))).To(Equal(0))
	})
})

func toolCondition(g Gomega, namespace, name string) *metav1.Condition {
	var tool v1alpha1.Tool
	g.Expect(k8s.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name}, &tool)).To(Succeed())
	condition := meta.FindStatusCondition(tool.Status.Conditions, v1alpha1.ConditionToolReady)
	g.Expect(condition).NotTo(BeNil())
	return condition
}
