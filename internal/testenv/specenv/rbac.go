package specenv

import (
	"context"
	"os"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/testenv"
)

// Impersonate is a client of the suite's API server that acts as user.
func (e *Env) Impersonate(user string) client.WithWatch {
	ginkgo.GinkgoHelper()
	impersonated := rest.CopyConfig(e.Config)
	impersonated.Impersonate = rest.ImpersonationConfig{UserName: user}
	c, err := client.NewWithWatch(impersonated, client.Options{Scheme: e.Client.Scheme()})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	return c
}

// LoadClusterRole creates a shipped persona role under a name of the spec's own.
func (e *Env) LoadClusterRole(file, suffix string) string {
	ginkgo.GinkgoHelper()
	manifest, err := os.ReadFile(testenv.ConfigPath("rbac", file))
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	var role rbacv1.ClusterRole
	gomega.Expect(yaml.UnmarshalStrict(manifest, &role)).To(gomega.Succeed())
	role.Name += "-" + suffix
	role.Labels = nil // aggregation is not under test here
	gomega.Expect(e.Client.Create(context.Background(), &role)).To(gomega.Succeed())
	ginkgo.DeferCleanup(func() { _ = e.Client.Delete(context.Background(), &role) })
	return role.Name
}

// InstallPersonaRoles installs config/rbac's persona roles under their
// shipped names and labels, aggregated into admin, edit and view as a
// cluster's controller manager would, until the spec's container ends.
func (e *Env) InstallPersonaRoles() {
	ginkgo.GinkgoHelper()
	remove, err := testenv.InstallRBAC(context.Background(), e.Config, e.Client, "persona-specs",
		"role_agent.yaml", "role_viewer.yaml", "role_catalog_admin.yaml",
		"toolresolution_resolver_role.yaml", "role_approver.yaml",
		"role_clustertool_admin.yaml", "role_clustertool_reader.yaml")
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	ginkgo.DeferCleanup(remove)
}

// ClusterRoleRef refers to the ClusterRole name.
func ClusterRoleRef(name string) rbacv1.RoleRef {
	return rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name}
}

// User is the subjects of a binding to the user name.
func User(name string) []rbacv1.Subject {
	return []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: name}}
}

// BindIn binds the ClusterRole role to the user name in namespace.
func (e *Env) BindIn(namespace, role, name string) {
	ginkgo.GinkgoHelper()
	gomega.Expect(e.Client.Create(context.Background(), &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, GenerateName: "personas-"},
		RoleRef:    ClusterRoleRef(role), Subjects: User(name),
	})).To(gomega.Succeed())
}

// BindClusterWide binds the ClusterRole role to the user name in every
// namespace, until the spec ends.
func (e *Env) BindClusterWide(role, name string) {
	ginkgo.GinkgoHelper()
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{GenerateName: "personas-"}, RoleRef: ClusterRoleRef(role), Subjects: User(name)}
	gomega.Expect(e.Client.Create(context.Background(), binding)).To(gomega.Succeed())
	ginkgo.DeferCleanup(func() { _ = e.Client.Delete(context.Background(), binding) })
}

// CreateClusterTool creates a ClusterTool of testenv.NewTool's spec, on the
// suite downstream's charges, for the namespaces selector admits, until
// the spec ends.
func (e *Env) CreateClusterTool(name string, selector *metav1.LabelSelector, opts ...testenv.ToolOption) *v1alpha1.ClusterTool {
	ginkgo.GinkgoHelper()
	tool := &v1alpha1.ClusterTool{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.ClusterToolSpec{
			NamespaceSelector: selector,
			ToolSpec:          testenv.NewTool("", name, e.DownstreamURL+"/charges", opts...).Spec,
		},
	}
	gomega.Expect(e.Client.Create(context.Background(), tool)).To(gomega.Succeed())
	ginkgo.DeferCleanup(func() { _ = e.Client.Delete(context.Background(), tool) })
	return tool
}

// OnlyNamespace admits exactly namespace, by the label the API server
// sets on every namespace and nobody can change.
func OnlyNamespace(namespace string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: []string{namespace}},
	}}
}

// CannotPublish checks that the user name, as which as acts, can neither
// create nor change nor delete a ClusterTool.
func (e *Env) CannotPublish(as client.Client, name string, existing *v1alpha1.ClusterTool) {
	ginkgo.GinkgoHelper()
	ctx := context.Background()
	own := &v1alpha1.ClusterTool{
		ObjectMeta: metav1.ObjectMeta{Name: "by-" + existing.Name},
		Spec:       existing.Spec,
	}
	refused(as.Create(ctx, own), name, "create", "")
	changed := existing.DeepCopy()
	changed.Spec.HTTP.URL = "http://127.0.0.1:1/elsewhere"
	refused(as.Update(ctx, changed), name, "update", existing.Name)
	refused(as.Patch(ctx, changed, client.MergeFrom(existing)), name, "patch", existing.Name)
	refused(as.Delete(ctx, existing), name, "delete", existing.Name)

	var stored v1alpha1.ClusterTool
	gomega.Expect(e.Client.Get(ctx, client.ObjectKeyFromObject(existing), &stored)).To(gomega.Succeed())
	gomega.Expect(stored.Spec.HTTP.URL).To(gomega.Equal(existing.Spec.HTTP.URL))
	gomega.Expect(apierrors.IsNotFound(e.Client.Get(ctx, client.ObjectKeyFromObject(own), &v1alpha1.ClusterTool{}))).To(gomega.BeTrue())
}

// refused expects RBAC's refusal of verb on ClusterTools to name; the
// message tells it from an admission policy's.
func refused(err error, name, verb, object string) {
	ginkgo.GinkgoHelper()
	gomega.Expect(apierrors.IsForbidden(err)).To(gomega.BeTrue(), "%s a ClusterTool: %v", verb, err)
	resource := "clustertools.toolledger.dev"
	if object != "" {
		resource += ` "` + object + `"`
	}
	gomega.Expect(err.Error()).To(gomega.Equal(resource + ` is forbidden: User "` + name + `" cannot ` + verb +
		` resource "clustertools" in API group "toolledger.dev" at the cluster scope`))
}
