package kubectlplugin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/testenv"
)

var _ = Describe("kubectl toolledger status of a deleted key", func() {
	It("shows the tombstone the manager left, and names it beside a record created again", func() {
		ctx := context.Background()
		ns := env.NewTenant()
		newTool(ns, v1alpha1.KeyProtected, testenv.WithKeyRetention(30*24*time.Hour))
		createAction(ns, "order-gone")
		done := env.WaitForPhase(ns, "order-gone", v1alpha1.PhaseSucceeded)
		charged, ok := downstream.Charge(ns + "/order-gone")
		Expect(ok).To(BeTrue())

		By("deleting the record, as a GitOps prune would")
		Expect(k8s.Delete(ctx, done)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(done), &v1alpha1.ToolAction{}))
		}).Should(BeTrue())
		var stored v1alpha1.Tombstone
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(done), &stored)).To(Succeed())

		r := in(ns, "status", "order-gone")
		Expect(r.code).To(Equal(0), r.stderr)
		Expect(r.stderr).To(BeEmpty())
		completed := done.Status.CompletionTime.UTC()
		for _, line := range []string{
			`Name:\s+order-gone`,
			`Namespace:\s+` + ns,
			`Record:\s+deleted; this is its Tombstone, which keeps the key`,
			`Deleted:\s+\S+Z \(\d+s ago\)`,
			`Cause:\s+Deleted: someone deleted the ToolAction \(a user, a GitOps prune, the garbage collector\)`,
			`Outcome:\s+Succeeded`,
			`External ref:\s+` + charged.ID,
			`Error:\s+<none>`,
			`Attempts:\s+1`,
			`Completed:\s+` + completed.Format(time.RFC3339) + ` \(\d+s ago\)`,
			`Tool:\s+charge`,
			`Idempotency class:\s+KeyProtected`,
			`Request digest:\s+` + done.Status.RequestDigest,
			`Key freed:\s+` + completed.Add(30*24*time.Hour).Format(time.RFC3339) + ` \(in 29d\): the completion plus the tool's keyRetention of 30d`,
		} {
			Expect(r.stdout).To(MatchRegexp(`(?m)^%s$`, line))
		}
		Expect(r.stdout).NotTo(ContainSubstring("Deleted by"), "the API server does not record who deleted it")

		r = in(ns, "status", "order-gone", "-o", "json")
		Expect(r.code).To(Equal(0), r.stderr)
		var fromJSON v1alpha1.Tombstone
		Expect(json.Unmarshal([]byte(r.stdout), &fromJSON)).To(Succeed())
		Expect(fromJSON.Kind).To(Equal("Tombstone"))
		Expect(fromJSON.APIVersion).To(Equal("toolledger.dev/v1alpha1"))
		Expect(fromJSON.ManagedFields).To(BeEmpty())
		Expect(fromJSON.Record).To(Equal(stored.Record))
		Expect(fromJSON.Record.ActionUID).To(Equal(done.UID))

		r = in(ns, "status", "order-gone", "-o", "yaml")
		Expect(r.code).To(Equal(0), r.stderr)
		var fromYAML v1alpha1.Tombstone
		Expect(yaml.UnmarshalStrict([]byte(r.stdout), &fromYAML)).To(Succeed())
		Expect(fromYAML.Record).To(Equal(stored.Record))

		By("applying the same intent again: the tombstone answers it, and status names the tombstone")
		createAction(ns, "order-gone")
		again := env.WaitForPhase(ns, "order-gone", v1alpha1.PhaseSucceeded)
		Expect(again.UID).NotTo(Equal(done.UID))
		r = in(ns, "status", "order-gone")
		Expect(r.code).To(Equal(0), r.stderr)
		Expect(r.stdout).To(MatchRegexp(`(?m)^Phase:\s+Succeeded$`))
		Expect(r.stdout).To(MatchRegexp(`(?m)^  Succeeded\s+True\s+SettledByTombstone\s`))
		Expect(r.stdout).To(MatchRegexp(`(?m)^Tombstone:\s+tombstone/order-gone keeps what the key's deleted record did: Succeeded, external ref %s, completed %s; deleted \S+Z \(cause Deleted\)$`,
			charged.ID, completed.Format(time.RFC3339)))
		Expect(regexp.MustCompile(`(?m)^Tombstone:`).FindAllString(r.stdout, -1)).To(HaveLen(1), "one line names the tombstone")
		r = in(ns, "status", "order-gone", "-o", "json")
		Expect(r.code).To(Equal(0), r.stderr)
		var action v1alpha1.ToolAction
		Expect(json.Unmarshal([]byte(r.stdout), &action)).To(Succeed())
		Expect(action.Kind).To(Equal("ToolAction"))
		Expect(action.UID).To(Equal(again.UID))

		By("failing for a key that has neither a record nor a tombstone")
		r = in(ns, "status", "order-never")
		Expect(r.code).To(Equal(1))
		Expect(r.stdout).To(BeEmpty())
		Expect(r.stderr).To(Equal(fmt.Sprintf("error: ToolAction \"order-never\" not found in namespace %q, and no Tombstone keeps that key\n", ns)))
		r = in(ns, "status", "order-never", "-o", "json")
		Expect(r.code).To(Equal(1))
		Expect(r.stdout).To(BeEmpty())
	})
})

var _ = Describe("kubectl toolledger tombstones", func() {
	It("lists a namespace's tombstones, all namespaces', one tool's, and as JSON, with when each key is freed", func() {
		ctx := context.Background()
		ns, other, empty := env.NewTenant(), env.NewTenant(), env.NewTenant()
		env.CreateTool(ns, "charge", testenv.WithKeyRetention(24*time.Hour))
		env.CreateTool(ns, "refund")
		platform := newClusterTool(ns+"-platform", time.Hour)
		now := time.Now().Truncate(time.Second)
		bury(ns, "order-a", tool("charge"), v1alpha1.PhaseSucceeded, "ch_a", now.Add(-2*time.Hour), v1alpha1.TombstoneCauseDeleted)
		failed := bury(ns, "order-b", tool("refund"), v1alpha1.PhaseFailed, "", now.Add(-3*time.Hour), v1alpha1.TombstoneCauseRecordRetention)
		bury(ns, "order-c", tool("gone"), v1alpha1.PhaseSucceeded, "ch_c", now.Add(-4*time.Hour), v1alpha1.TombstoneCauseDeleted)
		bury(ns, "order-d", v1alpha1.ToolReference{Kind: v1alpha1.KindClusterTool, Name: platform}, v1alpha1.PhaseSucceeded, "ch_d",
			now.Add(-20*time.Minute), v1alpha1.TombstoneCauseDeleted)
		// The tool charge of the other namespace does not exist.
		bury(other, "order-z", tool("charge"), v1alpha1.PhaseSucceeded, "ch_z", now.Add(-time.Hour), v1alpha1.TombstoneCauseDeleted)

		r := in(ns, "tombstones")
		Expect(r.code).To(Equal(0), r.stderr)
		Expect(r.stderr).To(BeEmpty())
		Expect(lines(r.stdout)).To(HaveExactElements(
			MatchRegexp(`^KEY\s+TOOL\s+OUTCOME\s+EXTERNAL-REF\s+COMPLETED\s+CAUSE\s+FREED$`),
			MatchRegexp(`^order-a\s+charge\s+Succeeded\s+ch_a\s+(120m|121m)\s+Deleted\s+in 21h$`),
			MatchRegexp(`^order-b\s+refund\s+Failed\s+<none>\s+(3h|3h1m)\s+RecordRetention\s+never$`),
			MatchRegexp(`^order-c\s+gone\s+Succeeded\s+ch_c\s+(4h|4h1m)\s+Deleted\s+-$`),
			MatchRegexp(`^order-d\s+ClusterTool/%s\s+Succeeded\s+ch_d\s+(20m|21m)\s+Deleted\s+in (39|40)m$`, platform),
		))

		By("naming each namespace with -A")
		r = plugin("tomb", "-A", "--kubeconfig", kubeconfig)
		Expect(r.code).To(Equal(0), r.stderr)
		Expect(r.stdout).To(MatchRegexp(`^NAMESPACE\s+KEY\s+TOOL\s+OUTCOME\s+EXTERNAL-REF\s+COMPLETED\s+CAUSE\s+FREED\n`))
		Expect(r.stdout).To(MatchRegexp(`(?m)^%s\s+order-a\s+charge\s+Succeeded\s+ch_a\s+\S+\s+Deleted\s+in 21h$`, ns))
		Expect(r.stdout).To(MatchRegexp(`(?m)^%s\s+order-d\s+ClusterTool/%s\s`, ns, platform))
		Expect(r.stdout).To(MatchRegexp(`(?m)^%s\s+order-z\s+charge\s+Succeeded\s+ch_z\s+\S+\s+Deleted\s+-$`, other))

		By("selecting one tool's tombstones by label")
		r = in(ns, "tombstones", "--tool", "charge")
		Expect(r.code).To(Equal(0), r.stderr)
		Expect(lines(r.stdout)).To(HaveLen(2))
		Expect(r.stdout).To(MatchRegexp(`(?m)^order-a\s+charge\s`))
		r = plugin("tombstones", "-A", "--tool", "Tool/charge", "--kubeconfig", kubeconfig)
		Expect(r.code).To(Equal(0), r.stderr)
		Expect(r.stdout).To(MatchRegexp(`(?m)^%s\s+order-a\s`, ns))
		Expect(r.stdout).To(MatchRegexp(`(?m)^%s\s+order-z\s`, other))
		for _, row := range lines(r.stdout)[1:] {
			Expect(row).To(MatchRegexp(`^\S+\s+\S+\s+charge\s`), "only the tool charge's tombstones")
		}
		r = plugin("tombstones", "-A", "--tool", "ClusterTool/"+platform, "--kubeconfig", kubeconfig)
		Expect(r.code).To(Equal(0), r.stderr)
		Expect(lines(r.stdout)).To(HaveExactElements(HavePrefix("NAMESPACE"), MatchRegexp(`^%s\s+order-d\s`, ns)))
		r = in(ns, "tombstones", "--tool", "charge-nothing")
		Expect(r.code).To(Equal(0), r.stderr)
		Expect(r.stdout).To(BeEmpty())
		Expect(r.stderr).To(Equal(fmt.Sprintf("No Tombstones of tool charge-nothing in namespace %q.\n", ns)))

		By("printing a summary of each as JSON")
		r = in(ns, "tombstones", "-o", "json")
		Expect(r.code).To(Equal(0), r.stderr)
		var list struct {
			Items []struct {
				Namespace, Name, Tool, Outcome, ErrorClass, ExternalRef, Cause string
				CompletionTime                                                 metav1.Time
				KeyFreed                                                       struct {
					By, KeyRetention, Reason string
					Time                     *metav1.Time
				}
			} `json:"items"`
		}
		Expect(json.Unmarshal([]byte(r.stdout), &list)).To(Succeed())
		Expect(list.Items).To(HaveLen(4))
		a, b, c, d := list.Items[0], list.Items[1], list.Items[2], list.Items[3]
		Expect([]string{a.Namespace, a.Name, a.Tool, a.Outcome, a.ExternalRef, a.Cause}).To(Equal([]string{ns, "order-a", "charge", "Succeeded", "ch_a", "Deleted"}))
		Expect(a.CompletionTime.Time).To(BeTemporally("==", now.Add(-2*time.Hour)))
		Expect(a.KeyFreed.By).To(Equal("KeyRetention"))
		Expect(a.KeyFreed.KeyRetention).To(Equal("24h0m0s"))
		Expect(a.KeyFreed.Time.Time).To(BeTemporally("==", now.Add(22*time.Hour)))
		Expect([]string{b.Name, b.Outcome, b.ErrorClass, b.Cause, b.KeyFreed.By}).To(Equal([]string{"order-b", "Failed", "InvalidInput", "RecordRetention", "Administrator"}))
		Expect(b.KeyFreed.Time).To(BeNil())
		Expect([]string{c.Name, c.KeyFreed.By, c.KeyFreed.Reason}).To(Equal([]string{"order-c", "Unknown", "tool not found"}))
		Expect([]string{d.Name, d.Tool, d.KeyFreed.By, d.KeyFreed.KeyRetention}).To(Equal([]string{"order-d", "ClusterTool/" + platform, "KeyRetention", "1h0m0s"}))

		By("saying in status when each kind of key is freed")
		r = in(ns, "status", "order-b")
		Expect(r.code).To(Equal(0), r.stderr)
		Expect(r.stdout).To(MatchRegexp(`(?m)^Error:\s+InvalidInput \(SchemaViolation\)$`))
		Expect(r.stdout).To(MatchRegexp(`(?m)^Cause:\s+RecordRetention: the tool's recordRetention passed$`))
		Expect(r.stdout).To(MatchRegexp(`(?m)^Deleted by:\s+%s$`, regexp.QuoteMeta(failed.Record.DeletedBy)))
		Expect(r.stdout).To(MatchRegexp(`(?m)^Key freed:\s+kept until an administrator deletes it \(the tool has no keyRetention\)$`))
		r = in(ns, "status", "order-c")
		Expect(r.code).To(Equal(0), r.stderr)
		Expect(r.stdout).To(MatchRegexp(`(?m)^Key freed:\s+unknown \(tool not found\)$`))
		r = in(ns, "status", "order-d")
		Expect(r.code).To(Equal(0), r.stderr)
		Expect(r.stdout).To(MatchRegexp(`(?m)^Tool:\s+ClusterTool/%s$`, platform))
		Expect(r.stdout).To(MatchRegexp(`(?m)^Key freed:\s+%s \(in \d+m\): the completion plus the tool's keyRetention of 60m$`,
			now.Add(40*time.Minute).UTC().Format(time.RFC3339)))

		By("saying so when a namespace has none")
		r = in(empty, "tombstones")
		Expect(r.code).To(Equal(0), r.stderr)
		Expect(r.stdout).To(BeEmpty())
		Expect(r.stderr).To(Equal(fmt.Sprintf("No Tombstones in namespace %q.\n", empty)))
		r = in(empty, "tombstones", "-o", "yaml")
		Expect(r.code).To(Equal(0), r.stderr)
		Expect(r.stdout).To(Equal("items: []\n"))

		Expect(k8s.Delete(ctx, &v1alpha1.Tombstone{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "order-a"}})).To(Succeed())
		r = in(ns, "tombstones")
		Expect(r.code).To(Equal(0), r.stderr)
		Expect(r.stdout).NotTo(ContainSubstring("order-a"), "an administrator deleted it")
	})

	It("reads a namespace with more tombstones than one response holds", func() {
		ns := env.NewTenant()
		env.CreateTool(ns, "charge")
		const count = 260 // more than the console's page of 250
		completed := time.Now().Add(-time.Hour)
		for i := range count {
			bury(ns, fmt.Sprintf("order-%03d", i), tool("charge"), v1alpha1.PhaseSucceeded, fmt.Sprintf("ch_%03d", i), completed, v1alpha1.TombstoneCauseDeleted)
		}
		r := in(ns, "tombstones")
		Expect(r.code).To(Equal(0), r.stderr)
		rows := lines(r.stdout)
		Expect(rows).To(HaveLen(count + 1))
		Expect(rows[1]).To(MatchRegexp(`^order-000\s+charge\s+Succeeded\s+ch_000\s+\S+\s+Deleted\s+never$`))
		Expect(rows[count]).To(MatchRegexp(`^order-259\s`))

		r = in(ns, "tombstones", "-o", "json")
		Expect(r.code).To(Equal(0), r.stderr)
		var list struct {
			Items []struct{ Name string } `json:"items"`
		}
		Expect(json.Unmarshal([]byte(r.stdout), &list)).To(Succeed())
		Expect(list.Items).To(HaveLen(count))
	})

	It("needs no more than the shipped resolver role, bound in the namespace", func() {
		ctx := context.Background()
		ns := env.NewTenant()
		env.CreateTool(ns, "charge", testenv.WithKeyRetention(24*time.Hour))
		platform := newClusterTool(ns+"-platform", time.Hour)
		now := time.Now().Truncate(time.Second)
		bury(ns, "order-a", tool("charge"), v1alpha1.PhaseSucceeded, "ch_a", now.Add(-time.Hour), v1alpha1.TombstoneCauseDeleted)
		bury(ns, "order-d", v1alpha1.ToolReference{Kind: v1alpha1.KindClusterTool, Name: platform}, v1alpha1.PhaseSucceeded, "ch_d",
			now.Add(-time.Minute), v1alpha1.TombstoneCauseDeleted)

		manifest, err := os.ReadFile(filepath.Join("..", "..", "config", "rbac", "toolresolution_resolver_role.yaml"))
		Expect(err).NotTo(HaveOccurred())
		var role rbacv1.ClusterRole
		Expect(yaml.UnmarshalStrict(manifest, &role)).To(Succeed())
		role.Name = "resolver-" + ns
		Expect(k8s.Create(ctx, &role)).To(Succeed())
		DeferCleanup(func() { _ = k8s.Delete(context.Background(), &role) })
		user := "ops@" + ns + ".example.com"
		Expect(k8s.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ops"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
		})).To(Succeed())

		r := in(ns, "status", "order-a", "--as", user)
		Expect(r.code).To(Equal(0), r.stderr)
		Expect(r.stdout).To(MatchRegexp(`(?m)^Key freed:\s+\S+Z \(in 22h\): the completion plus the tool's keyRetention of 24h$`))

		By("leaving a ClusterTool's retention unknown, which a namespace's binding cannot read")
		r = in(ns, "tombstones", "--as", user)
		Expect(r.code).To(Equal(0), r.stderr)
		Expect(lines(r.stdout)).To(HaveExactElements(
			HavePrefix("KEY"),
			MatchRegexp(`^order-a\s+charge\s.*\sin 22h$`),
			MatchRegexp(`^order-d\s+ClusterTool/%s\s.*\s-$`, platform),
		))
		Expect(r.stderr).To(MatchRegexp(`^warning: cannot list ClusterTools: .*forbidden.*; when the keys of ClusterTool tombstones are freed is unknown\n$`))
		r = in(ns, "status", "order-d", "--as", user)
		Expect(r.code).To(Equal(0), r.stderr)
		Expect(r.stdout).To(MatchRegexp(`(?m)^Key freed:\s+unknown \(cannot get ClusterTool "%s": .*forbidden.*\)$`, platform))

		By("refusing what the binding does not reach")
		r = plugin("tombstones", "-A", "--as", user, "--kubeconfig", kubeconfig)
		Expect(r.code).To(Equal(1))
		Expect(r.stderr).To(MatchRegexp(`^error: cannot list Tombstones in all namespaces: .*forbidden`))
	})
})

func tool(name string) v1alpha1.ToolReference {
	return v1alpha1.ToolReference{Kind: v1alpha1.KindTool, Name: name}
}

// bury creates a Tombstone as the manager writes one, with its labels: the
// console reads it as it would any other.
func bury(namespace, key string, ref v1alpha1.ToolReference, phase v1alpha1.Phase, externalRef string, completed time.Time, cause string) *v1alpha1.Tombstone {
	GinkgoHelper()
	tomb := &v1alpha1.Tombstone{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: namespace,
			Name:      key,
			Labels:    map[string]string{v1alpha1.LabelTool: ref.Name, v1alpha1.LabelToolKind: ref.Kind},
		},
		Record: v1alpha1.TombstoneRecord{
			ActionUID:        "00000000-0000-4000-8000-000000000001",
			RequestDigest:    "sha256:" + strings.Repeat("0", 64),
			Phase:            phase,
			ExternalRef:      externalRef,
			Attempts:         1,
			CompletionTime:   metav1.NewTime(completed),
			ToolRef:          ref,
			IdempotencyClass: v1alpha1.KeyProtected,
			Cause:            cause,
			DeletionTime:     metav1.NewTime(completed.Add(time.Minute)),
		},
	}
	if phase == v1alpha1.PhaseFailed {
		tomb.Record.ErrorClass, tomb.Record.ErrorReason = v1alpha1.ErrorClassInvalidInput, "SchemaViolation"
	}
	if cause == v1alpha1.TombstoneCauseRecordRetention {
		tomb.Record.DeletedBy = "toolledger (plugin-suite)"
	}
	Expect(k8s.Create(context.Background(), tomb)).To(Succeed())
	return tomb
}

// newClusterTool creates a ClusterTool for every namespace, with a
// keyRetention, and deletes it after the spec.
func newClusterTool(name string, keyRetention time.Duration) string {
	GinkgoHelper()
	tool := &v1alpha1.ClusterTool{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.ClusterToolSpec{
			ToolSpec:          testenv.NewTool("", name, env.DownstreamURL+"/charges", testenv.WithKeyRetention(keyRetention)).Spec,
			NamespaceSelector: &metav1.LabelSelector{},
		},
	}
	Expect(k8s.Create(context.Background(), tool)).To(Succeed())
	DeferCleanup(func() { _ = k8s.Delete(context.Background(), tool) })
	return name
}

// lines splits a table into its rows.
func lines(table string) []string {
	return strings.Split(strings.TrimSuffix(table, "\n"), "\n")
}
