package api

import (
	"context"
	"encoding/json"
	"errors"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/toolledger/toolledger/internal/adapter/kubernetesapply"
	"github.com/toolledger/toolledger/internal/testenv/specenv"
	"github.com/toolledger/toolledger/pkg/adapter"
)

var _ = Describe("The kubernetesApply adapter", func() {
	It("is refused on a ClusterTool, which would act in the operator's namespace", func() {
		out, err := env.Kubectl("apply", "-f", specenv.WriteManifest(`apiVersion: toolledger.dev/v1alpha1
kind: ClusterTool
metadata: {name: cluster-settings}
spec:
  operation: settings.set
  version: v1
  idempotencyClass: NaturallyIdempotent
  namespaceSelector: {}
  kubernetesApply:
    serviceAccountName: writer
    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: settings}}
`))
		Expect(err).To(HaveOccurred())
		Expect(out).To(ContainSubstring(`The ClusterTool "cluster-settings" is invalid: spec: Invalid value: kubernetesApply is for Tools: the effect must carry a tenant namespace's own permissions`))
	})
})

// The manager's ClusterRole writes nothing but toolledger's own objects and
// events: a manager that holds it, and the impersonator ClusterRole bound
// in one namespace, applies as that namespace's ServiceAccounts and no
// other namespace's.
var _ = Describe("The kubernetesApply adapter with the manager's RBAC only", Ordered, func() {
	ctx := context.Background()
	const managerUser = "least-privilege-manager"
	var managerConfig *rest.Config
	var bound, unbound string

	BeforeAll(func() {
		managerRole := env.LoadClusterRole("role.yaml", "least-privilege")
		impersonatorRole := env.LoadClusterRole("role_impersonator.yaml", "least-privilege")
		user, err := env.Env.AddUser(envtest.User{Name: managerUser}, nil)
		Expect(err).NotTo(HaveOccurred())
		managerConfig = user.Config()
		subjects := []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: managerUser}}
		binding := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: managerRole},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: managerRole},
			Subjects:   subjects,
		}
		Expect(k8s.Create(ctx, binding)).To(Succeed())
		DeferCleanup(func() { _ = k8s.Delete(context.Background(), binding) })

		bound, unbound = env.NewTenant(), env.NewTenant()
		Expect(k8s.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: bound, Name: "toolledger-impersonator"},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: impersonatorRole},
			Subjects:   subjects,
		})).To(Succeed())
		for _, namespace := range []string{bound, unbound} {
			env.GrantConfigMaps(namespace, "writer", "settings")
		}
	})

	It("cannot write a ConfigMap itself", func() {
		managerClient, err := client.New(managerConfig, client.Options{Scheme: k8s.Scheme()})
		Expect(err).NotTo(HaveOccurred())
		err = managerClient.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: bound, Name: "settings"}})
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "err = %v", err)
	})

	It("applies as a ServiceAccount of the namespace that binds it the impersonator role", func() {
		connector, err := kubernetesapply.New(managerConfig)
		Expect(err).NotTo(HaveOccurred())
		tool := specenv.KubernetesApplyTool(bound, "settings", "writer", specenv.SettingsTemplate)
		Expect(connector.Validate(ctx, tool)).To(Succeed())

		out, err := specenv.ConnectAs(managerConfig, tool).Execute(ctx, adapter.Request{
			IdempotencyKey: bound + "/fast", RequestDigest: "sha256:1", Parameters: json.RawMessage(`{"mode": "fast", "owner": "a"}`)})
		Expect(err).NotTo(HaveOccurred())
		Expect(out.ExternalRef).To(Equal("configmaps/" + bound + "/settings"))
		Expect(env.GetConfigMap(bound, "settings").Data).To(HaveKeyWithValue("mode", "fast"))
	})

	It("is not Ready, and is Denied, in a namespace that does not", func() {
		connector, err := kubernetesapply.New(managerConfig)
		Expect(err).NotTo(HaveOccurred())
		tool := specenv.KubernetesApplyTool(unbound, "settings", "writer", specenv.SettingsTemplate)
		err = connector.Validate(ctx, tool)
		var config *adapter.ConfigError
		Expect(errors.As(err, &config)).To(BeTrue(), "err = %v", err)
		Expect(config.Reason).To(Equal(kubernetesapply.ReasonImpersonationNotAllowed))
		Expect(config.Message).To(ContainSubstring("kubectl create rolebinding toolledger-impersonator --namespace %s --clusterrole toolledger-impersonator --user %s", unbound, managerUser))

		_, err = specenv.ConnectAs(managerConfig, tool).Execute(ctx, adapter.Request{
			IdempotencyKey: unbound + "/fast", RequestDigest: "sha256:1", Parameters: json.RawMessage(`{"mode": "fast", "owner": "a"}`)})
		var denied *adapter.PermanentError
		Expect(errors.As(err, &denied)).To(BeTrue(), "err = %v", err)
		Expect(denied.Kind).To(Equal(adapter.Denied))
		Expect(err.Error()).To(ContainSubstring(`cannot impersonate resource "serviceaccounts"`))
		Expect(apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: unbound, Name: "settings"}, &corev1.ConfigMap{}))).To(BeTrue())
	})
})
