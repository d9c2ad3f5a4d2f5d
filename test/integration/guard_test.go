package integration

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/testenv"
)

// What kubectl prints when the guard refuses a request, after the object's
// name: the policy, its binding, and the message of config/admission.
const (
	finalizerRefused = ` is forbidden: ValidatingAdmissionPolicy 'toolledger-action-guard' with binding 'toolledger-action-guard' denied request: ` +
		`the finalizer toolledger.dev/outcome stays on a ToolAction that was dispatched (status.attempts > 0), so that its key is not freed without a tombstone: ` +
		`delete the ToolAction instead; the manager removes the finalizer once it has written the key's tombstone`
	ownerRefused = ` is forbidden: ValidatingAdmissionPolicy 'toolledger-action-guard' with binding 'toolledger-action-guard' denied request: ` +
		`ownerReferences cannot be added to a ToolAction: the garbage collector would delete the record with its owner; ` +
		`relate it to its run in spec.provenance or in a label instead`
	tombstoneRefused = ` is forbidden: ValidatingAdmissionPolicy 'toolledger-tombstone-guard' with binding 'toolledger-tombstone-guard' denied request: ` +
		`tombstones are written and deleted only by the toolledger manager; an administrator in the group toolledger:break-glass may delete one to free its key`
)

const (
	// agent has config/rbac's toolledger-agent role in the spec's tenant.
	agent = "agent-1"
	// operator may delete tombstones by RBAC, and is not in the break-glass group.
	operator = "operator-1"
	// breakGlass is what an administrator adds to kubectl to be exempt.
	breakGlass = "--as-group=" + testenv.BreakGlassGroup
	// masters gives an impersonated user every RBAC right, so that only the guard refuses.
	masters = "--as-group=system:masters"

	removeFinalizers = `[{"op":"remove","path":"/metadata/finalizers"}]`
	addOwner         = `{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"run-7","uid":"6c1f3a2e-0d4b-4f6a-9c1e-2b7d8e9f0a1b"}]}}`
)

var _ = Describe("The guard admission policy (config/admission)", Ordered, func() {
	ctx := context.Background()
	var (
		kubeconfig string
		ns         string
	)

	// kubectl runs the real kubectl as the suite's admin; --as and --as-group
	// make it another user.
	kubectl := func(args ...string) (stdout, stderr string, err error) {
		GinkgoHelper()
		path, err := exec.LookPath("kubectl")
		Expect(err).NotTo(HaveOccurred(), "kubectl must be on PATH")
		cmdCtx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		cmd := exec.CommandContext(cmdCtx, path, append([]string{"--kubeconfig", kubeconfig, "-n", ns}, args...)...)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err = cmd.Run()
		return out.String(), errOut.String(), err
	}
	// refused runs kubectl and expects the guard's refusal of object.
	refused := func(object, message string, args ...string) {
		GinkgoHelper()
		_, stderr, err := kubectl(args...)
		Expect(err).To(HaveOccurred())
		Expect(stderr).To(Equal("Error from server (Forbidden): " + object + message + "\n"))
	}
	succeeds := func(args ...string) string {
		GinkgoHelper()
		stdout, stderr, err := kubectl(args...)
		Expect(err).NotTo(HaveOccurred(), stderr)
		return stdout
	}
	// manifest writes a charge of the tool "charge" with more metadata.
	manifest := func(name, extraMetadata string) string {
		GinkgoHelper()
		content := strings.Replace(testenv.ChargeManifest(ns, name, 1000, "cus_42"), "metadata:\n", "metadata:\n"+extraMetadata, 1)
		path := filepath.Join(GinkgoT().TempDir(), name+".yaml")
		Expect(os.WriteFile(path, []byte(content), 0o600)).To(Succeed())
		return path
	}
	// dispatched applies a charge as the agent, waits until the manager has
	// dispatched it, and returns its manifest.
	dispatched := func(name string) string {
		GinkgoHelper()
		path := manifest(name, "")
		succeeds("--as="+agent, "apply", "-f", path)
		done := env.WaitForPhase(ns, name, v1alpha1.PhaseSucceeded)
		Expect(done.Status.Attempts).To(BeNumerically(">", 0))
		Expect(done.Finalizers).To(ContainElement(v1alpha1.Finalizer))
		return path
	}
	tombstoneOf := func(name string) error {
		return k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &v1alpha1.Tombstone{})
	}

	BeforeAll(func() {
		kubeconfig = filepath.Join(GinkgoT().TempDir(), "kubeconfig")
		_, err := env.AddAdmin("guard-admin", kubeconfig)
		Expect(err).NotTo(HaveOccurred())
		Expect(testenv.ApplyFile(ctx, env.Config, filepath.Join("..", "..", "config", "rbac", "role_agent.yaml"), "integration")).To(Succeed())
		deleter := &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: "guard-spec-tombstone-deleter"},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"tombstones"}, Verbs: []string{"get", "delete"}}},
		}
		Expect(k8s.Create(ctx, deleter)).To(Succeed())
		Expect(k8s.Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "guard-spec-tombstone-deleter"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: deleter.Name},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: operator}},
		})).To(Succeed())
		startManager("guarded-executor", nil)
	})

	BeforeEach(func() {
		ns = env.NewTenant()
		Expect(k8s.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: agent},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "toolledger-agent"},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: agent}},
		})).To(Succeed())
	})

	It("keeps the finalizer of a dispatched action from everyone but the break-glass group", func() {
		createTool(ns)
		dispatched("order-1")
		refused(`toolactions.toolledger.dev "order-1"`, finalizerRefused,
			"--as="+agent, "patch", "toolaction", "order-1", "--type=json", "-p", removeFinalizers)
		refused(`toolactions.toolledger.dev "order-1"`, finalizerRefused,
			"--as="+operator, masters, "patch", "toolaction", "order-1", "--type=json", "-p", removeFinalizers)
		Expect(env.Get(ns, "order-1").Finalizers).To(ContainElement(v1alpha1.Finalizer))

		out := succeeds("--as="+operator, masters, breakGlass, "patch", "toolaction", "order-1", "--type=json", "-p", removeFinalizers,
			"-o", "jsonpath={.metadata.finalizers}")
		Expect(out).To(BeEmpty())
	})

	It("lets an agent remove the finalizer of an action that was never dispatched", func() {
		// The tenant has no tool "charge": the action is rejected before any
		// dispatch. It has its finalizer from the start, as the SDK creates it.
		succeeds("--as="+agent, "create", "-f", manifest("order-2", "  finalizers: ["+v1alpha1.Finalizer+"]\n"))
		rejected := env.WaitForPhase(ns, "order-2", v1alpha1.PhaseFailed)
		Expect(rejected.Status.Error.Reason).To(Equal("ToolNotFound"))
		Expect(rejected.Status.Attempts).To(BeZero())
		out := succeeds("--as="+agent, "patch", "toolaction", "order-2", "--type=json", "-p", removeFinalizers, "-o", "jsonpath={.metadata.finalizers}")
		Expect(out).To(BeEmpty())
	})

	It("refuses new owners of an action, created or patched, and keeps the owners it has", func() {
		createTool(ns)
		dispatched("order-3")
		refused(`toolactions.toolledger.dev "order-3"`, ownerRefused,
			"--as="+agent, "patch", "toolaction", "order-3", "--type=merge", "-p", addOwner)

		owned := manifest("order-4", "  ownerReferences: [{apiVersion: v1, kind: ConfigMap, name: run-7, uid: 6c1f3a2e-0d4b-4f6a-9c1e-2b7d8e9f0a1b}]\n")
		refused(`error when creating "`+owned+`": toolactions.toolledger.dev "order-4"`, ownerRefused, "--as="+agent, "create", "-f", owned)

		succeeds("--as="+operator, masters, breakGlass, "create", "-f", owned)
		succeeds("--as="+agent, "label", "toolaction", "order-4", "team=payments")
		Expect(env.Get(ns, "order-4").OwnerReferences).To(HaveLen(1))
	})

	It("leaves tombstones to the manager, which writes them and answers from them, and frees a key only for the break-glass group", func() {
		createTool(ns)
		path := dispatched("order-5")
		succeeds("delete", "toolaction", "order-5")
		Expect(apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "order-5"}, &v1alpha1.ToolAction{}))).To(BeTrue())
		Expect(tombstoneOf("order-5")).To(Succeed())

		succeeds("--as="+agent, "apply", "-f", path)
		again := env.WaitForPhase(ns, "order-5", v1alpha1.PhaseSucceeded)
		Expect(again.Status.Conditions).To(ContainElement(HaveField("Reason", v1alpha1.ReasonSettledByTombstone)))
		Expect(downstream.Requests(v1alpha1.IdempotencyKey(ns, "order-5"))).To(Equal(1))

		_, stderr, err := kubectl("--as="+agent, "delete", "tombstone", "order-5")
		Expect(err).To(HaveOccurred())
		Expect(stderr).To(Equal(`Error from server (Forbidden): tombstones.toolledger.dev "order-5" is forbidden: User "agent-1" cannot delete resource "tombstones" in API group "toolledger.dev" in the namespace "` + ns + `"` + "\n"))
		refused(`tombstones.toolledger.dev "order-5"`, tombstoneRefused, "--as="+operator, "delete", "tombstone", "order-5")
		refused(`tombstones.toolledger.dev "order-5"`, tombstoneRefused, "--as="+operator, masters, "label", "tombstone", "order-5", "kept=no")
		Expect(tombstoneOf("order-5")).To(Succeed())

		succeeds("--as="+operator, breakGlass, "delete", "tombstone", "order-5")
		Expect(apierrors.IsNotFound(tombstoneOf("order-5"))).To(BeTrue())
	})

	It("refuses to create a tombstone, and lets the tombstones of a tenant being deleted go with it", func() {
		tomb := filepath.Join(GinkgoT().TempDir(), "tombstone.yaml")
		Expect(os.WriteFile(tomb, []byte(`apiVersion: toolledger.dev/v1alpha1
kind: Tombstone
metadata:
  name: order-6
record: {actionUID: 6c1f3a2e-0d4b-4f6a-9c1e-2b7d8e9f0a1b, requestDigest: "sha256:0", phase: Succeeded, completionTime: "2026-01-01T00:00:00Z",
  toolRef: {name: charge}, cause: Deleted, deletionTime: "2026-01-01T00:00:00Z"}
`), 0o600)).To(Succeed())
		refused(`error when creating "`+tomb+`": tombstones.toolledger.dev "order-6"`, tombstoneRefused, "--as="+operator, masters, "create", "-f", tomb)
		succeeds("--as="+operator, masters, breakGlass, "create", "-f", tomb)

		// Without kube-controller-manager the namespace stays Terminating.
		succeeds("delete", "namespace", ns, "--wait=false")
		succeeds("--as="+operator, "delete", "tombstone", "order-6")
	})
})
