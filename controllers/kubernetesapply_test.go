package controllers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/adapter/kubernetesapply"
	"github.com/toolledger/toolledger/internal/testenv/specenv"
	"github.com/toolledger/toolledger/pkg/adapter"
)

func fieldManagers(cm *corev1.ConfigMap) []string {
	var managers []string
	for _, entry := range cm.ManagedFields {
		managers = append(managers, fmt.Sprintf("%s/%s", entry.Manager, entry.Operation))
	}
	return managers
}

func toolReady(namespace, name string) *metav1.Condition {
	GinkgoHelper()
	var condition *metav1.Condition
	Eventually(func(g Gomega) {
		var tool v1alpha1.Tool
		g.Expect(k8s.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name}, &tool)).To(Succeed())
		condition = meta.FindStatusCondition(tool.Status.Conditions, v1alpha1.ConditionToolReady)
		g.Expect(condition).NotTo(BeNil())
		g.Expect(condition.ObservedGeneration).To(Equal(tool.Generation))
	}).Should(Succeed())
	return condition
}

var _ = Describe("The kubernetesApply adapter", func() {
	ctx := context.Background()
	var ns string
	BeforeEach(func() {
		ns = env.NewTenant()
		env.GrantConfigMaps(ns, "writer", "settings")
	})

	It("applies the filled template as the Tool's ServiceAccount, under the Tool's field manager", func() {
		Expect(k8s.Create(ctx, specenv.KubernetesApplyTool(ns, "settings", "writer", specenv.SettingsTemplate))).To(Succeed())
		Expect(toolReady(ns, "settings").Status).To(Equal(metav1.ConditionTrue))
		Expect(k8s.Create(ctx, newAction(ns, "fast", "settings", params(map[string]any{"mode": "fast", "owner": "team-a"})))).To(Succeed())

		action := env.WaitForPhase(ns, "fast", v1alpha1.PhaseSucceeded)
		Expect(action.Status.ExternalRef).To(Equal("configmaps/" + ns + "/settings"))
		cm := env.GetConfigMap(ns, "settings")
		Expect(cm.Data).To(Equal(map[string]string{"mode": "fast", "note": "set for team-a"}))
		Expect(cm.Annotations).To(HaveKeyWithValue(v1alpha1.IdempotencyKeyAnnotation, action.Status.IdempotencyKey))
		Expect(cm.Annotations).To(HaveKeyWithValue(v1alpha1.RequestDigestAnnotation, action.Status.RequestDigest))
		Expect(fieldManagers(cm)).To(ConsistOf("toolledger-settings/Apply"))
		var result map[string]string
		Expect(json.Unmarshal(action.Status.Result.Raw, &result)).To(Succeed())
		Expect(result).To(Equal(map[string]string{"uid": string(cm.UID), "resourceVersion": cm.ResourceVersion}))
	})

	It("acts as the ServiceAccount: an object its RBAC does not cover is Denied, though the manager may write it", func() {
		elsewhere := strings.Replace(specenv.SettingsTemplate, `"name": "settings"`, `"name": "elsewhere"`, 1)
		Expect(k8s.Create(ctx, specenv.KubernetesApplyTool(ns, "elsewhere", "writer", elsewhere))).To(Succeed())
		Expect(k8s.Create(ctx, newAction(ns, "denied", "elsewhere", params(map[string]any{"mode": "fast", "owner": "a"})))).To(Succeed())

		failed := env.WaitForPhase(ns, "denied", v1alpha1.PhaseFailed)
		Expect(failed.Status.Error.Class).To(Equal(v1alpha1.ErrorClassDenied))
		Expect(failed.Status.Error.Reason).To(Equal("Forbidden"))
		Expect(failed.Status.Error.Message).To(ContainSubstring(`User "system:serviceaccount:%s:writer" cannot patch resource "configmaps"`, ns))
		Expect(apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "elsewhere"}, &corev1.ConfigMap{}))).To(BeTrue())
	})

	It("fails with Denied for a ServiceAccount without rights", func() {
		Expect(k8s.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nobody"}})).To(Succeed())
		Expect(k8s.Create(ctx, specenv.KubernetesApplyTool(ns, "settings", "nobody", specenv.SettingsTemplate))).To(Succeed())
		Expect(k8s.Create(ctx, newAction(ns, "denied", "settings", params(map[string]any{"mode": "fast", "owner": "a"})))).To(Succeed())

		failed := env.WaitForPhase(ns, "denied", v1alpha1.PhaseFailed)
		Expect(failed.Status.Error.Class).To(Equal(v1alpha1.ErrorClassDenied))
		Expect(failed.Status.Error.Message).To(ContainSubstring(`User "system:serviceaccount:%s:nobody" cannot patch resource "configmaps"`, ns))
		Expect(failed.Status.Attempts).To(Equal(int32(1)), "a denial is final: no retry")
	})

	It("fails with ApplyConflict, forcing nothing, when another field manager owns a field", func() {
		owned := corev1ac.ConfigMap("settings", ns).WithData(map[string]string{"mode": "safe"})
		Expect(k8s.Apply(ctx, owned, client.FieldOwner("ops"))).To(Succeed())
		Expect(k8s.Create(ctx, specenv.KubernetesApplyTool(ns, "settings", "writer", specenv.SettingsTemplate))).To(Succeed())
		Expect(k8s.Create(ctx, newAction(ns, "fast", "settings", params(map[string]any{"mode": "fast", "owner": "a"})))).To(Succeed())

		failed := env.WaitForPhase(ns, "fast", v1alpha1.PhaseFailed)
		Expect(failed.Status.Error.Class).To(Equal(v1alpha1.ErrorClassInvalidInput))
		Expect(failed.Status.Error.Reason).To(Equal("ApplyConflict"))
		Expect(failed.Status.Error.Message).To(ContainSubstring(`conflict with "ops"`))
		Expect(failed.Status.Error.Message).To(ContainSubstring(".data.mode"))
		cm := env.GetConfigMap(ns, "settings")
		Expect(cm.Data).To(Equal(map[string]string{"mode": "safe"}))
		Expect(fieldManagers(cm)).To(ConsistOf("ops/Apply"))
	})

	It("applies an intent again as a no-op, and its lookup finds it by key and digest", func() {
		conn := specenv.ConnectAs(cfg, specenv.KubernetesApplyTool(ns, "settings", "writer", specenv.SettingsTemplate))
		req := adapter.Request{IdempotencyKey: ns + "/fast", RequestDigest: "sha256:1", Parameters: json.RawMessage(`{"mode": "fast", "owner": "a"}`)}
		first, err := conn.Execute(ctx, req)
		Expect(err).NotTo(HaveOccurred())
		before := env.GetConfigMap(ns, "settings")

		second, err := conn.Execute(ctx, req)
		Expect(err).NotTo(HaveOccurred())
		Expect(second).To(Equal(first))
		after := env.GetConfigMap(ns, "settings")
		Expect(after.ResourceVersion).To(Equal(before.ResourceVersion), "the second apply changed the ConfigMap")
		Expect(after.ManagedFields).To(Equal(before.ManagedFields))

		found, err := conn.Lookup(ctx, req)
		Expect(err).NotTo(HaveOccurred())
		Expect(found).To(Equal(first))
		other := req
		other.IdempotencyKey = ns + "/slow"
		_, err = conn.Lookup(ctx, other)
		Expect(err).To(MatchError(adapter.ErrNotFound))
	})

	It("does not apply a ToolAction created again under its settled key", func() {
		Expect(k8s.Create(ctx, specenv.KubernetesApplyTool(ns, "settings", "writer", specenv.SettingsTemplate))).To(Succeed())
		Expect(k8s.Create(ctx, newAction(ns, "fast", "settings", params(map[string]any{"mode": "fast", "owner": "a"})))).To(Succeed())
		env.WaitForPhase(ns, "fast", v1alpha1.PhaseSucceeded)
		Expect(k8s.Delete(ctx, newAction(ns, "fast", "settings", nil))).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "fast"}, &v1alpha1.ToolAction{}))
		}).Should(BeTrue())
		// Someone takes the field over since: an apply of the action would now conflict.
		Expect(k8s.Apply(ctx, corev1ac.ConfigMap("settings", ns).WithData(map[string]string{"mode": "safe"}),
			client.FieldOwner("ops"), client.ForceOwnership)).To(Succeed())

		Expect(k8s.Create(ctx, newAction(ns, "fast", "settings", params(map[string]any{"mode": "fast", "owner": "a"})))).To(Succeed())
		again := env.WaitForPhase(ns, "fast", v1alpha1.PhaseSucceeded)
		Expect(again.Status.Attempts).To(BeZero(), "the key's tombstone answers the action")
		Expect(env.GetConfigMap(ns, "settings").Data).To(HaveKeyWithValue("mode", "safe"))
	})

	DescribeTable("keeps a Tool whose template cannot be applied not Ready, and applies nothing",
		func(template, reason, message string) {
			Expect(k8s.Create(ctx, specenv.KubernetesApplyTool(ns, "bad", "writer", template))).To(Succeed())
			ready := toolReady(ns, "bad")
			Expect(ready.Status).To(Equal(metav1.ConditionFalse))
			Expect(ready.Reason).To(Equal(reason))
			Expect(ready.Message).To(ContainSubstring(message))

			Expect(k8s.Create(ctx, newAction(ns, "waits", "bad", params(map[string]any{"mode": "fast", "owner": "a"})))).To(Succeed())
			Consistently(func(g Gomega) {
				action := env.Get(ns, "waits")
				g.Expect(action.Status.Attempts).To(BeZero())
				g.Expect(action.Status.Phase).NotTo(BeElementOf(v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed))
			}, "2s").Should(Succeed())
		},
		Entry("another namespace", `{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": "kube-system"}}`,
			kubernetesapply.ReasonForeignNamespace, `metadata.namespace kube-system is not the Tool's namespace`),
		Entry("a cluster-scoped kind", `{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "mine"}}`,
			kubernetesapply.ReasonClusterScoped, "ClusterRole is cluster-scoped"),
		Entry("a kind the API server does not serve", `{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}`,
			kubernetesapply.ReasonUnknownKind, "no kind Widget in example.com/v1"),
	)

	It("fails an action whose parameters lack one the template names, naming it", func() {
		Expect(k8s.Create(ctx, specenv.KubernetesApplyTool(ns, "settings", "writer", specenv.SettingsTemplate))).To(Succeed())
		Expect(k8s.Create(ctx, newAction(ns, "incomplete", "settings", params(map[string]any{"mode": "fast"})))).To(Succeed())

		failed := env.WaitForPhase(ns, "incomplete", v1alpha1.PhaseFailed)
		Expect(failed.Status.Error.Class).To(Equal(v1alpha1.ErrorClassInvalidInput))
		Expect(failed.Status.Error.Reason).To(Equal("MissingParameter"))
		Expect(failed.Status.Error.Message).To(ContainSubstring(`parameter "owner" is required`))
	})

	It("runs the sample: the storefront's maintenance mode, as its own ServiceAccount", func() {
		out, err := env.Kubectl("apply", "-n", ns, "-f", filepath.Join("..", "config", "samples", "toolledger_v1alpha1_tool_kubernetesapply.yaml"))
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(k8s.Create(ctx, newAction(ns, "maintenance", "storefront-maintenance", params(map[string]any{"mode": "on", "reason": "database upgrade"})))).To(Succeed())

		env.WaitForPhase(ns, "maintenance", v1alpha1.PhaseSucceeded)
		cm := env.GetConfigMap(ns, "storefront-maintenance")
		Expect(cm.Data).To(Equal(map[string]string{"mode": "on", "reason": "database upgrade"}))
		Expect(fieldManagers(cm)).To(ConsistOf("toolledger-storefront-maintenance/Apply"))
	})
})
