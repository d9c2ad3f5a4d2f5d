package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/cmd/manager/app"
	"github.com/toolledger/toolledger/internal/archivebinding"
	"github.com/toolledger/toolledger/internal/demo"
	"github.com/toolledger/toolledger/internal/kubectlplugin"
	"github.com/toolledger/toolledger/internal/testenv"
)

// A namespace deleted and created again under its name is another life:
// restored from a backup (Velero and the like: the namespace from its saved
// YAML, its ToolActions without their status), re-created by GitOps, or
// given to a new tenant. The keys its earlier life left in the archive are
// held until its owner adopts that history or an administrator releases
// it: never dispatched again silently, never answered with an outcome the
// namespace may not see. The namespace controller is played by the spec
// (specenv.DeleteNamespace), which a control plane of kube-apiserver and
// etcd alone does not run; the managers are real, and so is PostgreSQL.
var _ = Describe("A namespace's earlier lives in the archive", func() {
	var (
		ctx    context.Context
		ns     string
		ledger string
		clock  *clocktesting.FakeClock
		dsn    string
	)

	BeforeEach(func() {
		ctx = context.Background()
		ns, ledger = env.NewTenant(), env.NewOperatorNamespace()
		server, err := testenv.StartPostgres(ctx, "")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(server.Stop)
		dsn = server.DSN
		clock = clocktesting.NewFakeClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
		stop, err := testenv.StartManager(testenv.AsManager(env.Config), app.Options{ExecutorID: "lives", LeaseGrace: time.Second,
			Clock: clock, RetentionSweep: 200 * time.Millisecond, ArchiveDSN: dsn, ArchiveRecordRetention: 10 * time.Minute,
			Namespace: ledger, ArchiveBindingSettle: time.Millisecond})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { _ = stop() })
		env.CreateTool(ns, "charge", testenv.WithClass(v1alpha1.NonRepeatable), testenv.WithRecordRetention(time.Hour),
			testenv.WithKeyRetention(24*time.Hour))
		env.AddKubeconfig()
		removeIdentity, err := testenv.InstallIdentityPolicy(ctx, env.Config, k8s, ns, "earlier-lives")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(removeIdentity)
	})

	key := func(name string) string { return ns + "/" + name }

	// firstLife runs the namespace's first life: each key charged once and
	// succeeded, then the namespace deleted, every record archived on its
	// way out; it returns the records as they finished.
	firstLife := func(keys ...string) map[string]*v1alpha1.ToolAction {
		GinkgoHelper()
		finished := map[string]*v1alpha1.ToolAction{}
		for _, k := range keys {
			Expect(k8s.Create(ctx, chargeAction(ns, k, 1200))).To(Succeed())
		}
		for _, k := range keys {
			finished[k] = env.WaitForPhase(ns, k, v1alpha1.PhaseSucceeded)
			Expect(downstream.Requests(key(k))).To(Equal(1))
		}
		env.DeleteNamespace(ns)
		return finished
	}

	// holdsFor expects the action to wait, undispatched, for a decision
	// about the earlier life earlier, and says so without that life's
	// outcome.
	holdsFor := func(name string, earlier types.UID, leaked ...string) {
		GinkgoHelper()
		Eventually(func(g Gomega) {
			a := env.Get(ns, name)
			g.Expect(a.Status.Phase).To(Equal(v1alpha1.PhaseAccepted), "status: %+v", a.Status)
			held := conditionWithReason(a, v1alpha1.ReasonEarlierNamespaceKey)
			g.Expect(held).NotTo(BeNil(), "conditions: %+v", a.Status.Conditions)
			g.Expect(held.Message).To(ContainSubstring("earlier life of namespace %s (uid %s)", ns, earlier))
			for _, l := range leaked {
				g.Expect(held.Message).NotTo(ContainSubstring(l), "the held action shows the earlier life's outcome")
			}
			g.Expect(a.Status.ExternalRef).To(BeEmpty())
			g.Expect(a.Status.KeyUncheckable()).To(BeTrue())
		}).Should(Succeed())
	}

	It("holds a restored namespace's keys until its owner adopts the earlier life, then answers them from it: 0 dispatches", func() {
		keys := []string{"order-7001-charge", "order-7002-charge", "order-7003-charge"}
		earlier := namespaceUID(ns)
		finished := firstLife(keys...)

		By("the namespace restored from its backup: a new life, its Tool and its ToolActions applied again without status")
		restored := env.CreateNamespace(ns)
		Expect(types.UID(restored)).NotTo(Equal(earlier))
		env.CreateTool(ns, "charge", testenv.WithClass(v1alpha1.NonRepeatable), testenv.WithRecordRetention(time.Hour),
			testenv.WithKeyRetention(24*time.Hour))
		for _, k := range keys {
			Expect(k8s.Create(ctx, chargeAction(ns, k, 1200))).To(Succeed())
		}
		for _, k := range keys {
			holdsFor(k, earlier, finished[k].Status.ExternalRef)
		}
		Consistently(func() int {
			n := 0
			for _, k := range keys {
				n += downstream.Requests(key(k))
			}
			return n
		}, 2*time.Second).Should(Equal(len(keys)), "no restored key is dispatched again")

		By("the owner lists what holds the namespace, and adopts its earlier life with kubectl toolledger")
		owner := "owner-" + ns
		env.BindIn(ns, env.LoadClusterRole("role_history_owner.yaml", ns), owner)
		out, err := toolledger(owner, "lives", "-n", ns)
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(ContainSubstring(string(earlier)))
		Expect(out).To(MatchRegexp(`%s\s+3\s+%s`, earlier, strings.Join(keys, ",")))
		out, err = toolledger(owner, "lives", "adopt", "-n", ns, "--reason", "restored from the backup of the first life", "--wait")
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(ContainSubstring("Applied=True (Decided)"))
		var decisions v1alpha1.EarlierLifeDecisionList
		Expect(k8s.List(ctx, &decisions, client.InNamespace(ns))).To(Succeed())
		Expect(decisions.Items).To(HaveLen(1))
		Expect(decisions.Items[0].Spec.Life).To(Equal(types.UID(restored)), "the API server bound the decision to the restored life")
		Expect(decisions.Items[0].Annotations).To(HaveKeyWithValue("toolledger.dev/decided-by", owner), "the API server stamped who decided")

		By("every restored key is answered from its first life's record, without a dispatch")
		for _, k := range keys {
			settled := env.WaitForPhase(ns, k, v1alpha1.PhaseSucceeded)
			Expect(settled.Status.ExternalRef).To(Equal(finished[k].Status.ExternalRef))
			Expect(settled.Status.Attempts).To(BeZero())
			Expect(conditionWithReason(settled, v1alpha1.ReasonSettledByArchive)).NotTo(BeNil())
			Expect(downstream.Requests(key(k))).To(Equal(1))
		}
	})

	It("holds a reused name's keys until an administrator releases the earlier life, which its owner cannot do, and never shows the earlier outcome", func() {
		earlier := namespaceUID(ns)
		finished := firstLife("order-7101-charge")

		By("a new tenant gets the name, with its own provider account, and charges under the same key another amount")
		env.CreateNamespace(ns)
		account := demo.NewServer()
		provider := httptest.NewServer(account)
		DeferCleanup(provider.Close)
		Expect(k8s.Create(ctx, testenv.NewTool(ns, "charge", provider.URL+"/charges", testenv.WithClass(v1alpha1.NonRepeatable),
			testenv.WithRecordRetention(time.Hour), testenv.WithKeyRetention(24*time.Hour)))).To(Succeed())
		Expect(k8s.Create(ctx, chargeAction(ns, "order-7101-charge", 9900))).To(Succeed())
		holdsFor("order-7101-charge", earlier, finished["order-7101-charge"].Status.ExternalRef, finished["order-7101-charge"].Status.RequestDigest)
		Expect(conditionWithReason(env.Get(ns, "order-7101-charge"), v1alpha1.ReasonArchiveConflict)).To(BeNil(),
			"a conflict would tell the new tenant what the earlier one charged")

		By("the new tenant's owner may not release it")
		owner, admin := "owner-"+ns, "admin-"+ns
		env.BindIn(ns, env.LoadClusterRole("role_history_owner.yaml", ns), owner)
		_, err := toolledger(owner, "lives", "release", "-n", ns, "--earlier-life", string(earlier), "--reason", "mine now")
		Expect(err).To(MatchError(ContainSubstring("takes the verb release on earlierlifedecisions")))

		By("an administrator releases it: the key is a new intent of the new tenant, dispatched once")
		env.BindClusterWide(env.LoadClusterRole("role_history_admin.yaml", ns), admin)
		out, err := toolledger(admin, "lives", "release", "-n", ns, "--earlier-life", string(earlier), "--reason", "the name went to a new tenant", "--wait")
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(ContainSubstring("Applied=True (Decided)"))
		fresh := env.WaitForPhase(ns, "order-7101-charge", v1alpha1.PhaseSucceeded)
		Expect(fresh.Status.Attempts).To(Equal(int32(1)))
		Expect(fresh.Status.ExternalRef).NotTo(Equal(finished["order-7101-charge"].Status.ExternalRef))
		Expect(account.Requests(key("order-7101-charge"))).To(Equal(1))
		Expect(downstream.Requests(key("order-7101-charge"))).To(Equal(1), "the earlier tenant's provider saw its one charge only")
	})

	It("decommissions per life: only the namespace's own keys become its Tombstones, and an undecided earlier life refuses it", func() {
		earlier := namespaceUID(ns)
		firstLife("order-7201-charge", "order-7202-charge")

		By("the name reused: the new tenant's own charge retires into the archive")
		env.CreateNamespace(ns)
		env.CreateTool(ns, "charge", testenv.WithClass(v1alpha1.NonRepeatable), testenv.WithRecordRetention(time.Hour),
			testenv.WithKeyRetention(24*time.Hour))
		Expect(k8s.Create(ctx, chargeAction(ns, "order-7203-charge", 1200))).To(Succeed())
		own := env.WaitForPhase(ns, "order-7203-charge", v1alpha1.PhaseSucceeded)
		clock.Step(90 * time.Minute)
		Eventually(gone(own.DeepCopy())).Should(BeTrue())

		By("decommissioning refuses while nobody decided about the earlier life, and changes nothing")
		_, err := app.DecommissionArchive(ctx, testenv.AsManager(env.Config), dsn, ledger)
		var undecided *archivebinding.UndecidedError
		Expect(errors.As(err, &undecided)).To(BeTrue(), "decommissioning: %v", err)
		Expect(err.Error()).To(ContainSubstring("%s (earlier life %s), 2 keys", ns, earlier))
		binding, err := archivebinding.Read(ctx, k8s, ledger)
		Expect(err).NotTo(HaveOccurred())
		Expect(binding.State).To(Equal(archivebinding.InUse))

		By("released, the earlier life's keys stay out of the namespace: only its own key becomes a Tombstone")
		admin := "admin-" + ns
		env.BindClusterWide(env.LoadClusterRole("role_history_admin.yaml", ns), admin)
		_, err = toolledger(admin, "lives", "release", "-n", ns, "--earlier-life", string(earlier), "--reason", "the name went to a new tenant", "--wait")
		Expect(err).NotTo(HaveOccurred())
		report, err := app.DecommissionArchive(ctx, testenv.AsManager(env.Config), dsn, ledger)
		Expect(err).NotTo(HaveOccurred())
		Expect(report.Released).To(Equal(2))
		var tombstones v1alpha1.TombstoneList
		Expect(k8s.List(ctx, &tombstones, client.InNamespace(ns))).To(Succeed())
		names := []string{}
		for _, t := range tombstones.Items {
			names = append(names, t.Name)
		}
		Expect(names).To(ConsistOf("order-7203-charge"), "no Tombstone of the earlier tenant's keys in the new tenant's namespace")
		var tomb v1alpha1.Tombstone
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "order-7203-charge"}, &tomb)).To(Succeed())
		Expect(tomb.Record.ExternalRef).To(Equal(own.Status.ExternalRef))
		var marks corev1.ConfigMapList
		Expect(k8s.List(ctx, &marks, client.InNamespace(ledger), client.HasLabels{"toolledger.dev/archive-mark"})).To(Succeed())
		Expect(marks.Items).To(BeEmpty(), "decommissioning deletes the chains' marks")
	})

	It("binds a decision to the life it was made in: one restored with the namespace decides nothing", func() {
		current := namespaceUID(ns)
		decision := &v1alpha1.EarlierLifeDecision{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "from-a-backup"},
			Spec: v1alpha1.EarlierLifeDecisionSpec{EarlierLife: "an-earlier-life", Life: "another-life", Decision: v1alpha1.LifeAdopt, Reason: "restored"}}
		err := k8s.Create(ctx, decision)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "a decision naming another life: %v", err)
		Expect(err.Error()).To(ContainSubstring("spec.life must be the uid of namespace %s (%s)", ns, current))
		decision.Spec.Life = ""
		Expect(k8s.Create(ctx, decision)).To(Succeed())
		Expect(decision.Spec.Life).To(Equal(current), "the API server sets the life")
		Eventually(func() string {
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(decision), decision)).To(Succeed())
			if c := meta.FindStatusCondition(decision.Status.Conditions, v1alpha1.ConditionApplied); c != nil {
				return string(c.Status) + "/" + c.Reason
			}
			return ""
		}).Should(Equal("True/Decided"))
	})
})

// toolledger runs kubectl toolledger in the test's process, as user ("" for
// the admin of env.AddKubeconfig), and returns its output.
func toolledger(user string, args ...string) (string, error) {
	var out bytes.Buffer
	streams := genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &out}
	prefix := []string{"--kubeconfig", env.Kubeconfig}
	if user != "" {
		prefix = append(prefix, "--as", user)
	}
	code := kubectlplugin.Run(context.Background(), streams, append(prefix, args...))
	if code != kubectlplugin.ExitOK {
		return out.String(), fmt.Errorf("kubectl toolledger %s: exit %d: %s", strings.Join(args, " "), code, out.String())
	}
	return out.String(), nil
}
