package integration

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/cmd/manager/app"
	"github.com/toolledger/toolledger/internal/archivebinding"
	"github.com/toolledger/toolledger/internal/testenv"
)

// A ledger that kept keys in an archive never runs without it unnoticed:
// with an archive no Tombstone is written, so a manager without it (a
// rollback, an upgrade without the archive's values) or with another
// database would find no trace of an archived key and dispatch it again.
// The binding the cluster keeps holds such a manager; decommissioning the
// archive writes its keys back as Tombstones first.
var _ = Describe("The archive binding", func() {
	var (
		ctx    context.Context
		ns     string
		ledger string
		clock  *clocktesting.FakeClock
		server *testenv.Postgres
	)

	BeforeEach(func() {
		ctx = context.Background()
		ns, ledger = env.NewTenant(), env.NewOperatorNamespace()
		var err error
		server, err = testenv.StartPostgres(ctx, "")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(server.Stop)
		clock = clocktesting.NewFakeClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
		env.CreateTool(ns, "charge", testenv.WithClass(v1alpha1.NonRepeatable),
			testenv.WithRecordRetention(time.Hour), testenv.WithKeyRetention(24*time.Hour))
	})

	// start runs a manager of the spec's ledger, with the archive at dsn or
	// without one; the returned func stops it.
	start := func(executor, dsn string) func() {
		GinkgoHelper()
		stop, err := testenv.StartManager(testenv.AsManager(env.Config), app.Options{ExecutorID: executor, LeaseGrace: time.Second,
			Clock: clock, RetentionSweep: 200 * time.Millisecond, ArchiveDSN: dsn, ArchiveRecordRetention: 10 * time.Minute,
			Namespace: ledger, ArchiveBindingSettle: time.Millisecond})
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

	// retireIntoTheArchive has a manager with the archive succeed an action
	// and retire its record into the archive, leaving no Tombstone.
	retireIntoTheArchive := func(name string) *v1alpha1.ToolAction {
		GinkgoHelper()
		stop := start("with-archive", server.DSN)
		Expect(k8s.Create(ctx, chargeAction(ns, name, 1200))).To(Succeed())
		first := env.WaitForPhase(ns, name, v1alpha1.PhaseSucceeded)
		Expect(downstream.Requests(key(name))).To(Equal(1))
		clock.Step(90 * time.Minute)
		Eventually(gone(first.DeepCopy())).Should(BeTrue())
		Expect(apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &v1alpha1.Tombstone{}))).To(BeTrue(),
			"with an archive no Tombstone is written")
		stop()
		return first
	}

	// waitsRefused expects the re-created action to wait, undispatched, and
	// say why.
	waitsRefused := func(name string, why ...string) {
		GinkgoHelper()
		Eventually(func(g Gomega) {
			a := env.Get(ns, name)
			g.Expect(a.Status.Phase).To(Equal(v1alpha1.PhaseAccepted))
			g.Expect(conditionWithReason(a, "ArchiveRequired")).NotTo(BeNil(), "conditions: %+v", a.Status.Conditions)
			for _, w := range why {
				g.Expect(conditionWithReason(a, "ArchiveRequired").Message).To(ContainSubstring(w))
			}
		}).Should(Succeed())
		Consistently(func() int { return downstream.Requests(key(name)) }, 2*time.Second).Should(Equal(1),
			"an archived key must not be dispatched again")
	}

	It("holds a re-created archived key when the ledger runs without its archive, and says why", func() {
		retireIntoTheArchive("order-5001-charge")
		var cm corev1.ConfigMap
		Expect(k8s.Get(ctx, archivebinding.Key(ledger), &cm)).To(Succeed())
		Expect(cm.Finalizers).To(ContainElement(archivebinding.Finalizer))

		By("the ledger started again without the archive, as after a rollback")
		stopBare := start("without-archive", "")
		Expect(k8s.Create(ctx, chargeAction(ns, "order-5001-charge", 1200))).To(Succeed())
		waitsRefused("order-5001-charge", "keeps its keys in archive "+cm.Data["archive"], "runs without an archive")

		By("rolled forward with the archive: the waiting key is answered from it")
		stopBare()
		start("with-archive-again", server.DSN)
		settled := env.WaitForPhase(ns, "order-5001-charge", v1alpha1.PhaseSucceeded)
		Expect(settled.Status.History[len(settled.Status.History)-1].Reason).To(Equal(v1alpha1.ReasonSettledByArchive))
		Expect(downstream.Requests(key("order-5001-charge"))).To(Equal(1))
	})

	It("holds it as well when the ledger runs with another database", func() {
		retireIntoTheArchive("order-5002-charge")
		other, err := server.Database(ctx, "another_archive")
		Expect(err).NotTo(HaveOccurred())
		start("another-archive", other)
		Expect(k8s.Create(ctx, chargeAction(ns, "order-5002-charge", 1200))).To(Succeed())
		waitsRefused("order-5002-charge", "another database")
	})

	It("holds a manager without the archive when the binding is gone, its finalizer stripped, from a ledger whose keys the archive keeps", func() {
		retireIntoTheArchive("order-5006-charge")
		var marks corev1.ConfigMapList
		Expect(k8s.List(ctx, &marks, client.InNamespace(ledger), client.HasLabels{"toolledger.dev/archive-mark"})).To(Succeed())
		Expect(marks.Items).NotTo(BeEmpty(), "the archived chain's mark")

		By("someone strips the binding's finalizer and deletes it, as to unstick a namespace being deleted")
		var cm corev1.ConfigMap
		Expect(k8s.Get(ctx, archivebinding.Key(ledger), &cm)).To(Succeed())
		cm.Finalizers = nil
		Expect(k8s.Update(ctx, &cm)).To(Succeed())
		Expect(k8s.Delete(ctx, &cm)).To(Succeed())
		Eventually(gone(&cm)).Should(BeTrue())

		By("a manager without the archive dispatches no archived key, and says why")
		start("without-archive", "")
		Expect(k8s.Create(ctx, chargeAction(ns, "order-5006-charge", 1200))).To(Succeed())
		waitsRefused("order-5006-charge", "the archive binding (ConfigMap toolledger-archive) is gone", marks.Items[0].Name)
	})

	It("lets a manager without the archive answer from Tombstones once the archive is decommissioned", func() {
		first := retireIntoTheArchive("order-5003-charge")

		// The archive manager also moved the suite's earlier Tombstones
		// into its archive: each goes back.
		report, err := app.DecommissionArchive(ctx, testenv.AsManager(env.Config), server.DSN, ledger)
		Expect(err).NotTo(HaveOccurred())
		Expect(report.Written).To(BeNumerically(">=", 1))
		Expect(report.Present + report.Gone).To(BeZero())
		var tomb v1alpha1.Tombstone
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "order-5003-charge"}, &tomb)).To(Succeed())
		Expect(tomb.Record.ExternalRef).To(Equal(first.Status.ExternalRef))
		Expect(tomb.Labels).To(HaveKeyWithValue(v1alpha1.LabelTool, "charge"))
		var cm corev1.ConfigMap
		Expect(k8s.Get(ctx, archivebinding.Key(ledger), &cm)).To(Succeed())
		Expect(cm.Data).To(HaveKeyWithValue("state", "Decommissioned"))
		Expect(cm.Finalizers).To(BeEmpty())
		var marks corev1.ConfigMapList
		Expect(k8s.List(ctx, &marks, client.InNamespace(ledger), client.HasLabels{"toolledger.dev/archive-mark"})).To(Succeed())
		Expect(marks.Items).To(BeEmpty(), "decommissioned, the archive has no chain to mark")

		By("a second run writes nothing new")
		again, err := app.DecommissionArchive(ctx, testenv.AsManager(env.Config), server.DSN, ledger)
		Expect(err).NotTo(HaveOccurred())
		Expect(again).To(Equal(archivebinding.Report{Present: report.Written}))

		start("without-archive", "")
		Expect(k8s.Create(ctx, chargeAction(ns, "order-5003-charge", 1200))).To(Succeed())
		settled := env.WaitForPhase(ns, "order-5003-charge", v1alpha1.PhaseSucceeded)
		Expect(settled.Status.ExternalRef).To(Equal(first.Status.ExternalRef))
		Expect(settled.Status.History[0].Reason).To(Equal("SettledByTombstone"))
		Expect(downstream.Requests(key("order-5003-charge"))).To(Equal(1))
	})

	It("keeps a manager without the archive from retiring a record into a Tombstone: the record waits for one with it", func() {
		stop := start("with-archive", server.DSN)
		Expect(k8s.Create(ctx, chargeAction(ns, "order-5005-charge", 1200))).To(Succeed())
		first := env.WaitForPhase(ns, "order-5005-charge", v1alpha1.PhaseSucceeded)
		stop()

		By("a manager without the archive that reconciles every key (no shards) is past the record's recordRetention")
		stopWithout, err := testenv.StartManager(testenv.AsManager(env.Config), app.Options{ExecutorID: "without-archive", LeaseGrace: time.Second,
			Clock: clock, RetentionSweep: 200 * time.Millisecond, Namespace: ledger, NoSharding: true})
		Expect(err).NotTo(HaveOccurred())
		stopped := false
		DeferCleanup(func() {
			if !stopped {
				_ = stopWithout()
			}
		})
		clock.Step(90 * time.Minute)
		Consistently(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(first), &v1alpha1.ToolAction{})).To(Succeed())
			g.Expect(apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(first), &v1alpha1.Tombstone{}))).To(BeTrue(),
				"a Tombstone written while the ledger is bound to the archive")
		}, 3*time.Second).Should(Succeed())
		stopped = true
		Expect(stopWithout()).To(Succeed())

		By("a manager with the archive retires it there")
		start("with-archive", server.DSN)
		Eventually(gone(first.DeepCopy())).Should(BeTrue())
		Expect(archivedKeys(ctx, server.DSN)).To(ContainElement("order-5005-charge"))
		Expect(apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(first), &v1alpha1.Tombstone{}))).To(BeTrue())
	})

	It("keeps a record retired after decommissioning in a Tombstone, by a manager that still has the archive", func() {
		stop := start("with-archive", server.DSN)
		Expect(k8s.Create(ctx, chargeAction(ns, "order-5004-charge", 1200))).To(Succeed())
		first := env.WaitForPhase(ns, "order-5004-charge", v1alpha1.PhaseSucceeded)
		_, err := app.DecommissionArchive(ctx, testenv.AsManager(env.Config), server.DSN, ledger)
		Expect(err).NotTo(HaveOccurred())

		clock.Step(90 * time.Minute)
		Eventually(gone(first.DeepCopy())).Should(BeTrue())
		var tomb v1alpha1.Tombstone
		Expect(k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "order-5004-charge"}, &tomb)).To(Succeed())
		Expect(tomb.Record.ActionUID).To(Equal(first.UID))
		stop()
		Expect(archivedKeys(ctx, server.DSN)).NotTo(ContainElement("order-5004-charge"), "nothing is archived once the archive is decommissioned")
	})
})

// Once every Tombstone is in the archive, none is written until the archive
// is decommissioned, so a new key's check reads PostgreSQL alone: no
// request to the API server. Decommissioning writes Tombstones again; the
// archive says so with each key, and the check reads them again, even
// while the binding (not yet released: an interrupted decommissioning)
// still records that every Tombstone moved.
var _ = Describe("The key check with every Tombstone in the archive", func() {
	It("reads no Tombstone, until the archive is decommissioned", func() {
		ctx := context.Background()
		ns, ledger := env.NewTenant(), env.NewOperatorNamespace()
		server, err := testenv.StartPostgres(ctx, "")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(server.Stop)
		clock := clocktesting.NewFakeClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
		env.CreateTool(ns, "charge", testenv.WithClass(v1alpha1.NonRepeatable),
			testenv.WithRecordRetention(time.Hour), testenv.WithKeyRetention(24*time.Hour))
		key := func(name string) string { return ns + "/" + name }

		By("no Tombstone is left in the cluster: the earlier specs' keys are theirs alone, and they have ended")
		asManager, err := client.New(testenv.AsManager(env.Config), client.Options{Scheme: k8s.Scheme()})
		Expect(err).NotTo(HaveOccurred())
		var tombstones v1alpha1.TombstoneList
		Expect(k8s.List(ctx, &tombstones)).To(Succeed())
		for i := range tombstones.Items {
			Expect(asManager.Delete(ctx, &tombstones.Items[i])).To(Succeed())
		}

		By("a manager with the archive records it in the binding")
		reads := &atomic.Int64{}
		cfg := testenv.AsManager(env.Config)
		cfg.Wrap(func(next http.RoundTripper) http.RoundTripper { return &tombstoneReads{next: next, n: reads} })
		stop, err := testenv.StartManager(cfg, app.Options{ExecutorID: "moved", LeaseGrace: time.Second,
			Clock: clock, RetentionSweep: 200 * time.Millisecond, ArchiveDSN: server.DSN, ArchiveRecordRetention: 10 * time.Minute,
			Namespace: ledger, ArchiveBindingSettle: time.Millisecond})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { _ = stop() })
		Eventually(func(g Gomega) {
			var binding corev1.ConfigMap
			g.Expect(k8s.Get(ctx, archivebinding.Key(ledger), &binding)).To(Succeed())
			g.Expect(binding.Data).To(HaveKey("tombstonesMoved"))
		}).Should(Succeed())

		By("a new key, and the same key again once its record is archived: no Tombstone read")
		before := reads.Load()
		Expect(k8s.Create(ctx, chargeAction(ns, "order-6001-charge", 1200))).To(Succeed())
		first := env.WaitForPhase(ns, "order-6001-charge", v1alpha1.PhaseSucceeded)
		clock.Step(90 * time.Minute)
		Eventually(gone(first.DeepCopy())).Should(BeTrue())
		Expect(k8s.Create(ctx, chargeAction(ns, "order-6001-charge", 1200))).To(Succeed())
		again := env.WaitForPhase(ns, "order-6001-charge", v1alpha1.PhaseSucceeded)
		Expect(again.Status.History[0].Reason).To(Equal(v1alpha1.ReasonSettledByArchive))
		Expect(downstream.Requests(key("order-6001-charge"))).To(Equal(1))
		Expect(reads.Load()).To(Equal(before), "GETs of Tombstones by the key checks")

		By("the archive is decommissioned, and the binding not yet released: a retired record goes to a Tombstone")
		conn, err := pgx.Connect(ctx, server.DSN)
		Expect(err).NotTo(HaveOccurred())
		_, err = conn.Exec(ctx, `UPDATE toolledger_archive SET decommissioned_at = now()`)
		Expect(err).NotTo(HaveOccurred())
		Expect(conn.Close(ctx)).To(Succeed())
		Expect(k8s.Create(ctx, chargeAction(ns, "order-6002-charge", 1200))).To(Succeed())
		second := env.WaitForPhase(ns, "order-6002-charge", v1alpha1.PhaseSucceeded)
		clock.Step(90 * time.Minute)
		Eventually(gone(second.DeepCopy())).Should(BeTrue())
		Expect(k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "order-6002-charge"}, &v1alpha1.Tombstone{})).To(Succeed())
		var binding corev1.ConfigMap
		Expect(k8s.Get(ctx, archivebinding.Key(ledger), &binding)).To(Succeed())
		Expect(binding.Data).To(HaveKeyWithValue("state", "InUse"))
		Expect(binding.Data).To(HaveKey("tombstonesMoved"))

		By("its key again: answered from the Tombstone, never sent")
		Expect(k8s.Create(ctx, chargeAction(ns, "order-6002-charge", 1200))).To(Succeed())
		settled := env.WaitForPhase(ns, "order-6002-charge", v1alpha1.PhaseSucceeded)
		Expect(settled.Status.History[0].Reason).To(Equal(v1alpha1.ReasonSettledByTombstone))
		Expect(downstream.Requests(key("order-6002-charge"))).To(Equal(1))
		Expect(reads.Load()).To(BeNumerically(">", before))
	})
})

// tombstoneReads counts in n the GETs of single Tombstones a client sends.
type tombstoneReads struct {
	next http.RoundTripper
	n    *atomic.Int64
}

func (t *tombstoneReads) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/tombstones/") {
		t.n.Add(1)
	}
	return t.next.RoundTrip(r)
}

// conditionWithReason is the action's condition with reason, or nil.
func conditionWithReason(a *v1alpha1.ToolAction, reason string) *metav1.Condition {
	for i := range a.Status.Conditions {
		if a.Status.Conditions[i].Reason == reason {
			return &a.Status.Conditions[i]
		}
	}
	return nil
}

// archivedKeys are the keys of the archive's rows at dsn.
func archivedKeys(ctx context.Context, dsn string) []string {
	GinkgoHelper()
	conn, err := pgx.Connect(ctx, dsn)
	Expect(err).NotTo(HaveOccurred())
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT key FROM toolledger_records ORDER BY key`)
	Expect(err).NotTo(HaveOccurred())
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	Expect(err).NotTo(HaveOccurred())
	return keys
}
