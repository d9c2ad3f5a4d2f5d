package controllers_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/demo"
	"github.com/toolledger/toolledger/internal/testenv"
)

// The persona specs install config/rbac's roles under their shipped names
// and labels and aggregate them into admin, edit and view as a cluster's
// controller manager would, then act as users that RBAC knows only through
// those roles: what docs/security.md says each may do.
var _ = Describe("Persona roles", Ordered, func() {
	ctx := context.Background()

	BeforeAll(func() {
		remove, err := testenv.InstallRBAC(ctx, cfg, k8s, "persona-specs",
			"role_agent.yaml", "role_viewer.yaml", "role_catalog_admin.yaml",
			"toolresolution_resolver_role.yaml", "role_approver.yaml",
			"role_clustertool_admin.yaml", "role_clustertool_reader.yaml")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(remove)
	})

	roleRef := func(name string) rbacv1.RoleRef {
		return rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name}
	}
	user := func(name string) []rbacv1.Subject {
		return []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: name}}
	}
	bindIn := func(namespace, role, name string) {
		GinkgoHelper()
		Expect(k8s.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, GenerateName: "personas-"},
			RoleRef:    roleRef(role), Subjects: user(name),
		})).To(Succeed())
	}
	bindClusterWide := func(role, name string) {
		GinkgoHelper()
		binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{GenerateName: "personas-"}, RoleRef: roleRef(role), Subjects: user(name)}
		Expect(k8s.Create(ctx, binding)).To(Succeed())
		DeferCleanup(func() { _ = k8s.Delete(context.Background(), binding) })
	}
	createClusterTool := func(name string, selector *metav1.LabelSelector, opts ...testenv.ToolOption) *v1alpha1.ClusterTool {
		GinkgoHelper()
		tool := &v1alpha1.ClusterTool{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1alpha1.ClusterToolSpec{
				NamespaceSelector: selector,
				ToolSpec:          testenv.NewTool("", name, env.DownstreamURL+"/charges", opts...).Spec,
			},
		}
		Expect(k8s.Create(ctx, tool)).To(Succeed())
		DeferCleanup(func() { _ = k8s.Delete(context.Background(), tool) })
		return tool
	}
	// onlyNamespace admits exactly namespace, by the label the API server
	// sets on every namespace and nobody can change.
	onlyNamespace := func(namespace string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: []string{namespace}},
		}}
	}
	// refused expects RBAC's refusal of verb on ClusterTools to name; the
	// message tells it from an admission policy's.
	refused := func(err error, name, verb, object string) {
		GinkgoHelper()
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%s a ClusterTool: %v", verb, err)
		resource := "clustertools.toolledger.dev"
		if object != "" {
			resource += ` "` + object + `"`
		}
		Expect(err.Error()).To(Equal(resource + ` is forbidden: User "` + name + `" cannot ` + verb +
			` resource "clustertools" in API group "toolledger.dev" at the cluster scope`))
	}
	// cannotPublish checks that name can neither create nor change nor delete a ClusterTool.
	cannotPublish := func(as client.Client, name string, existing *v1alpha1.ClusterTool) {
		GinkgoHelper()
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
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(existing), &stored)).To(Succeed())
		Expect(stored.Spec.HTTP.URL).To(Equal(existing.Spec.HTTP.URL))
		Expect(apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(own), &v1alpha1.ClusterTool{}))).To(BeTrue())
	}

	It("lets a namespace admin publish Tools but not ClusterTools, whether admin is bound in the namespace or cluster-wide", func() {
		ns := env.NewTenant()
		platform := createClusterTool("platform-charge-"+ns, onlyNamespace(ns))

		tenantAdmin := "tenant-admin@" + ns
		bindIn(ns, "admin", tenantAdmin)
		everyNamespaceAdmin := "every-namespace-admin@" + ns
		bindClusterWide("admin", everyNamespaceAdmin)

		for _, admin := range []struct{ name, tool string }{{tenantAdmin, "charge-tenant"}, {everyNamespaceAdmin, "charge-everywhere"}} {
			By("as " + admin.name)
			as := impersonate(admin.name)
			// toolledger-catalog-admin reaches admin only through the aggregation.
			Eventually(func() error {
				return as.Create(ctx, testenv.NewTool(ns, admin.tool, env.DownstreamURL+"/charges"))
			}).Should(Succeed(), "admin grants the namespace's Tools")
			cannotPublish(as, admin.name, platform)
			Expect(apierrors.IsForbidden(as.Get(ctx, client.ObjectKeyFromObject(platform), &v1alpha1.ClusterTool{}))).To(BeTrue(),
				"admin does not read the cluster catalog either")
		}

		// A tenant makes agents of its own, but not resolvers: it lacks
		// what toolledger-resolver grants, and RBAC refuses to let it grant that.
		as := impersonate(tenantAdmin)
		Expect(as.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "agents"},
			RoleRef:    roleRef("toolledger-agent"), Subjects: user("agent@" + ns),
		})).To(Succeed())
		err := as.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "resolvers"},
			RoleRef:    roleRef("toolledger-resolver"), Subjects: user("resolver@" + ns),
		})
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "bind the resolver role: %v", err)
		Expect(err.Error()).To(ContainSubstring("is attempting to grant RBAC permissions not currently held"))
	})

	It("lets a resolver bound in the namespace, with the ClusterTool reader bound cluster-wide, resolve an escalated action of a ClusterTool it cannot publish", func() {
		removeIdentity, err := testenv.InstallIdentityPolicy(ctx, cfg, k8s, "default", "persona-specs")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(removeIdentity)

		ns := env.NewTenant()
		platform := createClusterTool("platform-sms-"+ns, onlyNamespace(ns),
			testenv.WithOperation("messages.sms"), testenv.WithClass(v1alpha1.NonRepeatable), testenv.WithTimeout(5*time.Second))

		resolver := "ops@" + ns
		bindIn(ns, "toolledger-resolver", resolver)
		ops := impersonate(resolver)
		Eventually(func() error { return ops.List(ctx, &v1alpha1.ToolActionList{}, client.InNamespace(ns)) }).Should(Succeed())
		Expect(apierrors.IsForbidden(ops.Get(ctx, client.ObjectKeyFromObject(platform), &v1alpha1.ClusterTool{}))).To(BeTrue(),
			"a RoleBinding of the resolver role does not reach ClusterTools")
		bindClusterWide("toolledger-clustertool-reader", resolver)
		Eventually(func() error { return ops.Get(ctx, client.ObjectKeyFromObject(platform), &v1alpha1.ClusterTool{}) }).Should(Succeed())
		cannotPublish(ops, resolver, platform)

		// The agent is a namespace editor: toolledger-agent reaches edit
		// through the aggregation, and invoking a ClusterTool needs no read of it.
		agentName := "agent@" + ns
		bindIn(ns, "edit", agentName)
		agent := impersonate(agentName)
		downstream.InjectFault(demo.Fault{Mode: demo.FaultDropAfterCommit, Count: 1})
		action := newAction(ns, "sms-1001", platform.Name, charge(40))
		action.Spec.ToolRef.Kind = v1alpha1.KindClusterTool
		Eventually(func() error { return agent.Create(ctx, action) }).Should(Succeed(), "edit grants ToolActions")

		escalated := env.WaitForPhase(ns, "sms-1001", v1alpha1.PhaseEscalated)
		Expect(escalated.Annotations).To(HaveKeyWithValue(v1alpha1.RequestedByAnnotation, agentName))
		Expect(escalated.Status.Error.Class).To(Equal(v1alpha1.ErrorClassOutcomeUnknown))
		Expect(escalated.Status.Error.Message).To(Equal("the outcome of attempt 1 is unknown and a NonRepeatable tool is never repeated or settled automatically; resolve it with a ToolResolution"))
		key := keyOf(ns, "sms-1001")
		sent, ok := downstream.Charge(key)
		Expect(ok).To(BeTrue(), "the dropped request did apply")

		resolution := &v1alpha1.ToolResolution{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sms-1001-checked"},
			Spec: v1alpha1.ToolResolutionSpec{
				ActionName:  "sms-1001",
				Attempt:     1,
				Outcome:     v1alpha1.ResolvedSucceeded,
				ExternalRef: sent.ID,
				Reason:      "the provider's log shows the message sent",
			},
		}
		Expect(ops.Create(ctx, resolution)).To(Succeed())

		done := env.WaitForPhase(ns, "sms-1001", v1alpha1.PhaseSucceeded)
		Expect(done.Status.ExternalRef).To(Equal(sent.ID))
		Expect(done.Status.Error).To(BeNil())
		Expect(transitions(done)).To(Equal([]string{
			"Executing/Executing", "Unknown/OutcomeUnknown", "Escalated/OutcomeUnknown", "Succeeded/Resolved",
		}))
		last := done.Status.History[len(done.Status.History)-1]
		Expect(last.Executor).To(Equal("toolresolution/sms-1001-checked"))
		Expect(last.Message).To(Equal("resolved as Succeeded by " + resolver + " (ToolResolution sms-1001-checked): the provider's log shows the message sent"))
		Eventually(func(g Gomega) {
			var applied v1alpha1.ToolResolution
			g.Expect(ops.Get(ctx, client.ObjectKeyFromObject(resolution), &applied)).To(Succeed())
			g.Expect(applied.Annotations).To(HaveKeyWithValue(v1alpha1.ResolvedByAnnotation, resolver))
			condition := meta.FindStatusCondition(applied.Status.Conditions, v1alpha1.ConditionApplied)
			g.Expect(condition).NotTo(BeNil())
			g.Expect(condition.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(applied.Status.AppliedTime).NotTo(BeNil())
		}).Should(Succeed())
		Expect(downstream.Requests(key)).To(Equal(1))
		Expect(downstream.Effects(key)).To(Equal(1))

		done.Status.Phase = v1alpha1.PhaseFailed
		Expect(apierrors.IsForbidden(ops.Status().Update(ctx, done))).To(BeTrue(), "a resolver cannot rewrite the ledger")
	})
})
