package specenv

import (
	"context"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/adapter/kubernetesapply"
	"github.com/toolledger/toolledger/pkg/adapter"
)

// SettingsTemplate makes the ConfigMap "settings" from the parameters mode
// and owner.
const SettingsTemplate = `{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"},
  "data": {"mode": "{{mode}}", "note": "set for {{owner}}"}}`

// KubernetesApplyTool builds a NaturallyIdempotent Tool that applies
// template as the ServiceAccount account.
func KubernetesApplyTool(namespace, name, account, template string) *v1alpha1.Tool {
	return &v1alpha1.Tool{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: v1alpha1.ToolSpec{
			Operation:        "settings.set",
			Version:          "v1",
			IdempotencyClass: v1alpha1.NaturallyIdempotent,
			KubernetesApply: &v1alpha1.KubernetesApplyAdapter{
				ServiceAccountName: account,
				Template:           apiextensionsv1.JSON{Raw: []byte(template)},
			},
		},
	}
}

// GrantConfigMaps creates the ServiceAccount account with what server-side
// apply and a lookup need (get, create, patch) on the named ConfigMaps only.
func (e *Env) GrantConfigMaps(namespace, account string, names ...string) {
	ginkgo.GinkgoHelper()
	ctx := context.Background()
	gomega.Expect(e.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: account}})).To(gomega.Succeed())
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: account + "-configmaps"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: names, Verbs: []string{"get", "create", "patch"}}},
	}
	gomega.Expect(e.Client.Create(ctx, role)).To(gomega.Succeed())
	gomega.Expect(e.Client.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: account, Namespace: namespace}},
	})).To(gomega.Succeed())
}

// GetConfigMap reads a ConfigMap.
func (e *Env) GetConfigMap(namespace, name string) *corev1.ConfigMap {
	ginkgo.GinkgoHelper()
	var cm corev1.ConfigMap
	gomega.Expect(e.Client.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name}, &cm)).To(gomega.Succeed())
	return &cm
}

// ConnectAs connects the adapter, built on config, to tool.
func ConnectAs(config *rest.Config, tool *v1alpha1.Tool) adapter.Executor {
	ginkgo.GinkgoHelper()
	connector, err := kubernetesapply.New(config)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	conn, err := connector.Connect(context.Background(), tool)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	return conn.Executor
}
