package integration

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/cmd/manager/app"
	"github.com/toolledger/toolledger/internal/archivebinding"
	"github.com/toolledger/toolledger/internal/chainstate"
	"github.com/toolledger/toolledger/internal/testenv"
)

// An archive restored from a backup keeps its identity (it replicates with
// the data) and lacks the records kept since. Their keys lived in the
// archive alone: applied again, each would be dispatched a second time.
// The cluster's mark of each namespace's chain, moved forward before every
// etcd delete, is what the restored archive does not hold: the managers
// hold the namespace's new actions (ArchiveBehind), keep none of its
// records, and record the finding, until an operator acknowledges the loss.
var _ = Describe("An archive restored behind the records that left etcd", func() {
	It("holds every key of the namespace, refuses to move a checkpoint back, and serves again once the loss is acknowledged, saying what was lost", func() {
		ctx := context.Background()
		ns, ledger := env.NewTenant(), env.NewOperatorNamespace()
		server, err := testenv.StartPostgres(ctx, "")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(server.Stop)
		live, err := server.Database(ctx, "ledger")
		Expect(err).NotTo(HaveOccurred())
		clock := clocktesting.NewFakeClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
		env.CreateTool(ns, "charge", testenv.WithClass(v1alpha1.NonRepeatable), testenv.WithRecordRetention(time.Hour),
			testenv.WithKeyRetention(24*time.Hour))
		env.AddKubeconfig()
		removeIdentity, err := testenv.InstallIdentityPolicy(ctx, env.Config, k8s, ns, "archive-behind")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(removeIdentity)
		start := func(dsn string) func() {
			GinkgoHelper()
			stop, err := testenv.StartManager(testenv.AsManager(env.Config), app.Options{ExecutorID: "behind", LeaseGrace: time.Second,
				Clock: clock, RetentionSweep: 200 * time.Millisecond, ArchiveDSN: dsn, ArchiveRecordRetention: 10 * time.Minute,
				Namespace: ledger, ArchiveBindingSettle: time.Millisecond, ArchiveCheckpointInterval: time.Millisecond,
				ArchiveCompareInterval: 200 * time.Millisecond})
			Expect(err).NotTo(HaveOccurred())
			stopped := false
			DeferCleanup(func() {
				if !stopped {
					_ = stop()
				}
			})
			return func() { stopped = true; Expect(stop()).To(Succeed()) }
		}
		key := func(name string) string { return ns + "/" + name }
		names := func(from, to int) []string {
			var out []string
			for i := from; i <= to; i++ {
				out = append(out, fmt.Sprintf("order-%d-charge", 8000+i))
			}
			return out
		}
		refs := map[string]string{}
		retire := func(keys []string) {
			GinkgoHelper()
			for _, k := range keys {
				Expect(k8s.Create(ctx, chargeAction(ns, k, 1200))).To(Succeed())
			}
			for _, k := range keys {
				done := env.WaitForPhase(ns, k, v1alpha1.PhaseSucceeded)
				refs[k] = done.Status.ExternalRef
			}
			clock.Step(90 * time.Minute)
			for _, k := range keys {
				Eventually(func() bool { return gone(chargeAction(ns, k, 0))() }).Should(BeTrue(), k)
			}
		}
		mark := func() int64 {
			p, err := chainstate.ReadMark(ctx, k8s, ledger, ns)
			Expect(err).NotTo(HaveOccurred())
			return p.Sequence
		}

		By("three records retire into the archive, and its backup is taken")
		stop := start(live)
		retire(names(1, 3))
		Expect(mark()).To(Equal(int64(3)), "the mark covers every record that left etcd")
		stop()
		backup := copyDatabase(ctx, server.DSN, "ledger", "backup")

		By("three more retire after the backup")
		stop = start(live)
		retire(names(4, 6))
		Expect(mark()).To(Equal(int64(6)))
		Eventually(func() int64 {
			state, err := chainstate.Read(ctx, k8s, ledger, ns)
			Expect(err).NotTo(HaveOccurred())
			if state.Latest() == nil {
				return 0
			}
			return state.Latest().Sequence
		}).Should(Equal(int64(6)), "a checkpoint of the head")
		stop()

		By("the archive restored from the backup: the managers find it behind, and hold every key of the namespace")
		start(backup)
		all := names(1, 6)
		for _, k := range all {
			Expect(k8s.Create(ctx, chargeAction(ns, k, 1200))).To(Succeed())
		}
		for _, k := range all {
			Eventually(func(g Gomega) {
				a := env.Get(ns, k)
				g.Expect(a.Status.Phase).To(Equal(v1alpha1.PhaseAccepted))
				held := conditionWithReason(a, v1alpha1.ReasonArchiveBehind)
				g.Expect(held).NotTo(BeNil(), "conditions: %+v", a.Status.Conditions)
				g.Expect(held.Message).To(ContainSubstring("ends at record 3, but records up to 6 left etcd for it"))
			}).Should(Succeed())
		}
		Consistently(func() int {
			n := 0
			for _, k := range all {
				n += downstream.Requests(key(k))
			}
			return n
		}, 2*time.Second).Should(Equal(6), "no key is dispatched a second time")
		var finding string
		Eventually(func(g Gomega) {
			b, err := archivebinding.Read(ctx, k8s, ledger)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(b.Behind).NotTo(BeNil())
			g.Expect(b.Behind.Summary()).To(Equal(ns + " (records 4 to 6)"))
			finding = b.Behind.Digest
		}).Should(Succeed())
		Consistently(func() int64 {
			state, err := chainstate.Read(ctx, k8s, ledger, ns)
			Expect(err).NotTo(HaveOccurred())
			return state.Latest().Sequence
		}, time.Second).Should(Equal(int64(6)), "a checkpoint never moves back to the restored head")
		Expect(mark()).To(Equal(int64(6)))

		By("the operator reads the finding and acknowledges the loss with kubectl toolledger")
		status, err := toolledger("", "archive", "status", "--operator-namespace", ledger)
		Expect(err).NotTo(HaveOccurred(), status)
		Expect(status).To(ContainSubstring("Behind:   yes"))
		Expect(status).To(ContainSubstring(finding))
		Expect(status).To(MatchRegexp(`%s\s+6\s+3\s+records 4 to 6`, ns))
		out, err := toolledger("", "archive", "acknowledge", "--operator-namespace", ledger, "--finding", finding,
			"--reason", "restored to the backup; the records after it are lost", "--wait")
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(ContainSubstring("Applied=True (LossAcknowledged)"))
		Expect(out).To(ContainSubstring("Lost: namespace %s, records 4 to 6", ns))
		var acks v1alpha1.ArchiveAcknowledgementList
		Expect(k8s.List(ctx, &acks)).To(Succeed())
		var ack *v1alpha1.ArchiveAcknowledgement
		for i := range acks.Items {
			if acks.Items[i].Spec.Finding == finding {
				ack = &acks.Items[i]
			}
		}
		Expect(ack).NotTo(BeNil())
		Expect(ack.Status.Lost).To(HaveLen(1))
		Expect(ack.Status.Lost[0].FromSequence).To(Equal(int64(4)))
		Expect(ack.Status.Lost[0].ToSequence).To(Equal(int64(6)))

		By("the ledger serves again: the keys the archive holds are answered from it, and the lost ones are new intents")
		for _, k := range names(1, 3) {
			settled := env.WaitForPhase(ns, k, v1alpha1.PhaseSucceeded)
			Expect(settled.Status.Attempts).To(BeZero())
			Expect(settled.Status.ExternalRef).To(Equal(refs[k]))
		}
		for _, k := range names(4, 6) {
			again := env.WaitForPhase(ns, k, v1alpha1.PhaseSucceeded)
			Expect(again.Status.Attempts).To(Equal(int32(1)), "a lost key is dispatched again, as acknowledged")
		}
		Expect(mark()).To(BeNumerically(">=", int64(3)))
		state, err := chainstate.Read(ctx, k8s, ledger, ns)
		Expect(err).NotTo(HaveOccurred())
		Expect(state.Losses).To(HaveLen(1))
		Expect(state.Losses[0].AcknowledgedBy).To(Equal("suite-admin"), "the API server stamped who acknowledged, and the loss records it")
		Expect(ack.Annotations).To(HaveKeyWithValue("toolledger.dev/acknowledged-by", "suite-admin"))
		for _, c := range state.Checkpoints {
			Expect(c.Sequence).To(BeNumerically("<=", 3), "the checkpoints past the restored head were set aside with the loss")
		}
		Eventually(func() string {
			b, err := archivebinding.Read(ctx, k8s, ledger)
			Expect(err).NotTo(HaveOccurred())
			if b.Behind != nil {
				return b.Behind.Digest
			}
			return ""
		}).Should(BeEmpty())
		verified, err := toolledger("", "archive", "status", "--operator-namespace", ledger)
		Expect(err).NotTo(HaveOccurred(), verified)
		Expect(verified).To(ContainSubstring("Behind:   no"))
		Expect(verified).To(MatchRegexp(`%s\s+True \(LossAcknowledged\)\s+%s 4-6`, ack.Name, ns))
		c := meta.FindStatusCondition(ack.Status.Conditions, v1alpha1.ConditionApplied)
		Expect(c.Message).To(ContainSubstring("records 4 to 6 of namespace " + ns))
	})
})

// copyDatabase copies the database name of the server at admin into a new
// database copy, as a backup of it taken now would be restored: every row,
// the archive's identity included. No session may use name meanwhile.
func copyDatabase(ctx context.Context, admin, name, copy string) string {
	GinkgoHelper()
	conn, err := pgx.Connect(ctx, admin)
	Expect(err).NotTo(HaveOccurred())
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, fmt.Sprintf(`CREATE DATABASE %s TEMPLATE %s`, pgx.Identifier{copy}.Sanitize(), pgx.Identifier{name}.Sanitize()))
	Expect(err).NotTo(HaveOccurred())
	return strings.Replace(admin, "/postgres?", "/"+copy+"?", 1)
}
