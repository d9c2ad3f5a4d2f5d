package api

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/testenv"
	"github.com/toolledger/toolledger/internal/testenv/specenv"
)

// The persona specs install config/rbac's roles under their shipped names
// and labels and aggregate them into admin, edit and view as a cluster's
// controller manager would, then act as users that RBAC knows only through
// those roles: what docs/security.md says each may do. The spec that needs
// the controller, a resolver settling an escalated action, is in controllers/.
var _ = Describe("Persona roles", Ordered, func() {
	ctx := context.Background()

	BeforeAll(func() {
		env.InstallPersonaRoles()
	})

	It("lets a namespace admin publish Tools but not ClusterTools, whether admin is bound in the namespace or cluster-wide", func() {
		ns := env.NewTenant()
		platform := env.CreateClusterTool("platform-charge-"+ns, specenv.OnlyNamespace(ns))

		tenantAdmin := "tenant-admin@" + ns
		env.BindIn(ns, "admin", tenantAdmin)
		everyNamespaceAdmin := "every-namespace-admin@" + ns
		env.BindClusterWide("admin", everyNamespaceAdmin)

		for _, admin := range []struct{ name, tool string }{{tenantAdmin, "charge-tenant"}, {everyNamespaceAdmin, "charge-everywhere"}} {
			By("as " + admin.name)
			as := env.Impersonate(admin.name)
			// toolledger-catalog-admin reaches admin only through the aggregation.
			Eventually(func() error {
				return as.Create(ctx, testenv.NewTool(ns, admin.tool, env.DownstreamURL+"/charges"))
			}).Should(Succeed(), "admin grants the namespace's Tools")
			env.CannotPublish(as, admin.name, platform)
			Expect(apierrors.IsForbidden(as.Get(ctx, client.ObjectKeyFromObject(platform), &v1alpha1.ClusterTool{}))).To(BeTrue(),
				"admin does not read the cluster catalog either")
		}

		// A tenant makes agents of its own, but not resolvers: it lacks
		// what toolledger-resolver grants, and RBAC refuses to let it grant that.
		as := env.Impersonate(tenantAdmin)
		Expect(as.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "agents"},
			RoleRef:    specenv.ClusterRoleRef("toolledger-agent"), Subjects: specenv.User("agent@" + ns),
		})).To(Succeed())
		err := as.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "resolvers"},
			RoleRef:    specenv.ClusterRoleRef("toolledger-resolver"), Subjects: specenv.User("resolver@" + ns),
		})
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "bind the resolver role: %v", err)
		Expect(err.Error()).To(ContainSubstring("is attempting to grant RBAC permissions not currently held"))
	})
})
