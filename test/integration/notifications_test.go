package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/cmd/manager/app"
	"github.com/toolledger/toolledger/internal/notify"
	"github.com/toolledger/toolledger/internal/testenv"
)

// Notifications: a manager with a sink delivers a CloudEvent for every
// terminal outcome, at least once, with an id derived from the key and the
// transition, to a real HTTP receiver that counts them; a sink that is
// down neither loses events nor delays the ledger.
var _ = Describe("Notifications", func() {
	var (
		ctx      context.Context
		ns       string
		receiver *testenv.CloudEventsReceiver
	)

	BeforeEach(func() {
		ctx = context.Background()
		ns = env.NewTenant()
		env.CreateTool(ns, "charge", testenv.WithTimeout(10*time.Second), testenv.WithKeyLookup())
		var err error
		receiver, err = testenv.StartCloudEventsReceiver()
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(receiver.Close)
		startManagerWith(app.Options{ExecutorID: "notifier", LeaseGrace: time.Second, MemberLeaseDuration: 3 * time.Second,
			NotificationSinks: []notify.Sink{{Name: "audit", URL: receiver.URL}}, NotificationSweep: 2 * time.Second}, nil)
	})

	// create applies n actions, every failEvery-th of which the downstream
	// refuses (a lowercase currency), and returns their names.
	create := func(prefix string, n, failEvery int) []string {
		names := make([]string, n)
		for i := range n {
			names[i] = fmt.Sprintf("%s-%03d", prefix, i)
			a := action(ns, names[i], 100+i)
			if failEvery > 0 && i%failEvery == 0 {
				a.Spec.Parameters["currency"] = apiextensionsv1.JSON{Raw: []byte(`"eur"`)}
			}
			Expect(k8s.Create(ctx, a)).To(Succeed())
		}
		return names
	}

	// settled waits for the actions to finish and returns them by name.
	settled := func(names []string, within time.Duration) map[string]*v1alpha1.ToolAction {
		byName := map[string]*v1alpha1.ToolAction{}
		Eventually(func(g Gomega) {
			var list v1alpha1.ToolActionList
			g.Expect(k8s.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
			for i := range list.Items {
				a := &list.Items[i]
				g.Expect(a.Status.Phase.IsTerminal()).To(BeTrue(), "action %s is %s", a.Name, a.Status.Phase)
				byName[a.Name] = a
			}
			g.Expect(byName).To(HaveLen(len(names)))
		}, within).Should(Succeed())
		return byName
	}

	// expectDelivered waits until the receiver acknowledged exactly the
	// events the actions owe, each of them at least once, and the actions'
	// status records every delivery.
	expectDelivered := func(names []string, within time.Duration) map[string]int {
		var counts map[string]int
		Eventually(func(g Gomega) {
			var list v1alpha1.ToolActionList
			g.Expect(k8s.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
			want := map[string]bool{}
			for _, a := range list.Items {
				g.Expect(a.Status.Notifications).To(HaveLen(1), "action %s", a.Name)
				owed := a.Status.Notifications[0]
				g.Expect(owed.ID).To(Equal(notify.ID(ns, a.Name, a.UID, owed.Type, 0)))
				g.Expect(owed.Pending).To(BeEmpty(), "action %s", a.Name)
				g.Expect(owed.DeliveredTime).NotTo(BeNil())
				g.Expect(a.Status.NotificationsPending).To(BeFalse())
				want[owed.ID] = true
			}
			g.Expect(want).To(HaveLen(len(names)))
			counts = map[string]int{}
			for _, rec := range receiver.Received() {
				if rec.Event.Source() == notify.Source(ns) {
					counts[rec.Event.ID()]++
				}
			}
			g.Expect(counts).To(HaveLen(len(want)), "no event the actions do not owe")
			for id := range want {
				g.Expect(counts).To(HaveKey(id))
			}
		}, within).Should(Succeed())
		return counts
	}

	It("delivers every terminal outcome of a 200-action run at least once, each transition once by id", func() {
		names := create("order", 200, 4)
		actions := settled(names, 3*time.Minute)
		counts := expectDelivered(names, time.Minute)

		byType := map[string]int{}
		for _, rec := range receiver.Received() {
			e := rec.Event
			if e.Source() != notify.Source(ns) {
				continue
			}
			Expect(rec.Binary).To(BeTrue(), "event %s in binary mode", e.ID())
			a := actions[e.Subject()]
			Expect(a).NotTo(BeNil(), "event %s names an action of the run", e.ID())
			var data notify.Data
			Expect(json.Unmarshal(e.Data(), &data)).To(Succeed())
			Expect(data.Key).To(Equal(a.Name))
			Expect(data.Phase).To(Equal(a.Status.Phase))
			Expect(e.Type()).To(Equal(map[v1alpha1.Phase]string{v1alpha1.PhaseSucceeded: notify.TypeSucceeded, v1alpha1.PhaseFailed: notify.TypeFailed}[a.Status.Phase]))
			byType[e.Type()]++
		}
		repeated := 0
		for _, n := range counts {
			repeated += n - 1
		}
		Expect(byType[notify.TypeFailed]).To(BeNumerically(">=", 50))
		AddReportEntry("200 actions, one sink", fmt.Sprintf("%d distinct events (%d succeeded, %d failed deliveries), %d repeated deliveries",
			len(counts), byType[notify.TypeSucceeded], byType[notify.TypeFailed], repeated))
	})

	It("tells an action awaiting approval, then its outcome, as two events", func() {
		remove, err := testenv.InstallIdentityPolicy(ctx, env.Config, k8s, "default", "integration")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(remove)
		env.CreateTool(ns, "approved-charge", testenv.WithTimeout(10*time.Second), testenv.WithKeyLookup(),
			testenv.WithApprovalRequired(), testenv.WithSelfApprovalAllowed())
		a := action(ns, "order-approved", 300)
		a.Spec.ToolRef.Name = "approved-charge"
		Expect(k8s.Create(ctx, a)).To(Succeed())
		waiting := env.WaitForPhase(ns, a.Name, v1alpha1.PhaseAwaitingApproval)
		awaiting := notify.ID(ns, a.Name, waiting.UID, notify.TypeAwaitingApproval, 0)
		Eventually(receiver.ByID).Should(HaveKey(awaiting))

		Expect(k8s.Create(ctx, &v1alpha1.ToolApproval{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: a.Name + "-yes"},
			Spec:       v1alpha1.ToolApprovalSpec{ActionName: a.Name, RequestDigest: waiting.Status.RequestDigest, Decision: v1alpha1.Approved, Reason: "checked"},
		})).To(Succeed())
		env.WaitForPhase(ns, a.Name, v1alpha1.PhaseSucceeded)
		succeeded := notify.ID(ns, a.Name, waiting.UID, notify.TypeSucceeded, 0)
		Eventually(receiver.ByID).Should(And(HaveKey(awaiting), HaveKey(succeeded), HaveLen(2)))
		Eventually(func(g Gomega) {
			done := env.Get(ns, a.Name)
			g.Expect(done.Status.NotificationsPending).To(BeFalse())
			g.Expect(done.Status.Notifications).To(HaveExactElements(
				And(HaveField("ID", awaiting), HaveField("Type", notify.TypeAwaitingApproval), HaveField("Pending", BeEmpty())),
				And(HaveField("ID", succeeded), HaveField("Type", notify.TypeSucceeded), HaveField("Pending", BeEmpty()))))
		}).Should(Succeed())
		for _, rec := range receiver.Received() {
			if rec.Event.ID() == awaiting {
				var data notify.Data
				Expect(json.Unmarshal(rec.Event.Data(), &data)).To(Succeed())
				Expect(data.Phase).To(Equal(v1alpha1.PhaseAwaitingApproval))
				Expect(data.RequestDigest).To(Equal(waiting.Status.RequestDigest), "what an approver approves")
			}
		}
	})

	It("delivers what a sink down for 30 s missed once it is back, and the ledger does not wait for it", func() {
		Expect(receiver.Down()).To(Succeed())
		down := time.Now()
		names := create("while-down", 20, 0)
		// The ledger goes on: every action settles while the sink is down,
		// owing its event.
		settled(names, 20*time.Second)
		Expect(time.Since(down)).To(BeNumerically("<", 30*time.Second), "the actions settled while the sink was down")
		var list v1alpha1.ToolActionList
		Expect(k8s.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
		for _, a := range list.Items {
			Expect(a.Status.NotificationsPending).To(BeTrue(), "action %s", a.Name)
			Expect(a.Status.Notifications).To(ConsistOf(HaveField("Pending", Equal([]string{"audit"}))))
		}
		Expect(receiver.Received()).To(BeEmpty())

		time.Sleep(30*time.Second - time.Since(down))
		Expect(receiver.Up()).To(Succeed())
		expectDelivered(names, time.Minute)
	})
})
