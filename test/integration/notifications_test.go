package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

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

// One event that can never be delivered, beside another tenant's: the
// event is dead-lettered, visibly, and the sink they share never backs off
// for it, so that the other tenant's events arrive on time.
var _ = Describe("Notifications: one event that cannot be delivered", func() {
	const poisoned = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-a\nb"
	var (
		ctx              context.Context
		tenant, neighbor string
		receiver         *testenv.CloudEventsReceiver
	)

	BeforeEach(func() {
		ctx = context.Background()
		tenant, neighbor = env.NewTenant(), env.NewTenant()
		for _, ns := range []string{tenant, neighbor} {
			env.CreateTool(ns, "charge", testenv.WithTimeout(10*time.Second), testenv.WithKeyLookup())
		}
		var err error
		receiver, err = testenv.StartCloudEventsReceiver()
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(receiver.Close)
	})

	start := func() {
		startManagerWith(app.Options{ExecutorID: "notifier", LeaseGrace: time.Second, MemberLeaseDuration: 3 * time.Second,
			NotificationSinks: []notify.Sink{{Name: "audit", URL: receiver.URL}}, NotificationSweep: 2 * time.Second}, nil)
	}

	// expectOnTime creates n actions in the neighbor's namespace and waits
	// until the sink acknowledged each one's event within 4 s of its
	// transition (whose time the status keeps to the second).
	expectOnTime := func(n int) {
		GinkgoHelper()
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("order-%03d", i)
			Expect(k8s.Create(ctx, action(neighbor, names[i], 100+i))).To(Succeed())
		}
		for _, name := range names {
			var owed v1alpha1.Notification
			Eventually(func(g Gomega) {
				a := env.Get(neighbor, name)
				g.Expect(a.Status.Notifications).To(HaveLen(1))
				owed = a.Status.Notifications[0]
				g.Expect(receiver.ByID()).To(HaveKey(owed.ID))
			}).Should(Succeed())
			for _, rec := range receiver.Received() {
				if rec.Event.ID() == owed.ID {
					Expect(rec.At.Sub(owed.Time.Time)).To(BeNumerically("<", 4*time.Second),
						"the event of %s/%s, owed at %s, arrived at %s", neighbor, name, owed.Time.Format(time.RFC3339Nano), rec.At.Format(time.RFC3339Nano))
					break
				}
			}
		}
	}

	It("dead-letters at once an event no request can carry, a traceparent an older manager stored with a line break", func() {
		// A record as an older manager left it, which took the annotation's
		// traceparent whole; no manager runs yet, so nothing races the write.
		a := action(tenant, "order-poisoned", 100)
		Expect(k8s.Create(ctx, a)).To(Succeed())
		DeferCleanup(k8s.Delete, ctx, a)
		id := notify.ID(tenant, a.Name, a.UID, notify.TypeSucceeded, 0)
		a.Status.Phase = v1alpha1.PhaseSucceeded
		a.Status.Notifications = []v1alpha1.Notification{{ID: id, Type: notify.TypeSucceeded, Time: metav1.Now(), Pending: []string{"audit"}, Traceparent: poisoned}}
		a.Status.NotificationsPending = true
		Expect(k8s.Status().Update(ctx, a)).To(Succeed())

		deadLettered := auditNotifications("dead_lettered")
		start()
		// Long enough for a notifier that charges the event to the sink to
		// back the sink off for several seconds.
		time.Sleep(8 * time.Second)
		expectOnTime(5)

		Eventually(func(g Gomega) {
			done := env.Get(tenant, a.Name)
			g.Expect(done.Status.NotificationsPending).To(BeFalse(), "the record no longer owes the event: its retention may proceed")
			g.Expect(done.Status.Notifications).To(HaveExactElements(And(HaveField("ID", id), HaveField("Pending", BeEmpty()),
				HaveField("DeliveredTime", BeNil()),
				HaveField("DeadLetters", HaveExactElements(And(HaveField("Sink", "audit"), HaveField("Reason", v1alpha1.DeadLetterMalformed),
					HaveField("Message", "no request can carry the event: its Ce-Traceparent header would hold a character HTTP does not allow")))))))
		}).Should(Succeed())
		Expect(receiver.RequestsFor(id)).To(BeZero(), "no sink is sent an event no request can carry")
		Expect(auditNotifications("dead_lettered") - deadLettered).To(Equal(1.0))
	})

	It("dead-letters an event the sink keeps refusing after a few tries, and backs the sink off for none of them", func() {
		const refusedKey = "order-refused"
		receiver.Refuse(func(ev cloudevents.Event) int {
			if ev.Subject() == refusedKey {
				return http.StatusUnprocessableEntity
			}
			return 0
		})
		refusals, deadLettered, failed := auditNotifications("refused"), auditNotifications("dead_lettered"), auditNotifications("failed")
		start()
		a := action(tenant, refusedKey, 100)
		Expect(k8s.Create(ctx, a)).To(Succeed())
		var id string
		Eventually(func(g Gomega) {
			refused := env.Get(tenant, refusedKey)
			g.Expect(refused.Status.Notifications).To(HaveLen(1))
			id = refused.Status.Notifications[0].ID
			// Refused five times: a notifier that charges each refusal to
			// the sink backs it off for 8 s now.
			g.Expect(receiver.RequestsFor(id)).To(BeNumerically(">=", 5))
		}).Should(Succeed())
		expectOnTime(5)

		Eventually(func(g Gomega) {
			done := env.Get(tenant, refusedKey)
			g.Expect(done.Status.NotificationsPending).To(BeFalse())
			g.Expect(done.Status.Notifications).To(HaveExactElements(And(HaveField("ID", id), HaveField("Pending", BeEmpty()),
				HaveField("DeadLetters", HaveExactElements(And(HaveField("Sink", "audit"), HaveField("Reason", v1alpha1.DeadLetterRefused),
					HaveField("Message", "sink audit refused event "+id+": 422 Unprocessable Entity: the sink refused the event")))))))
		}).Should(Succeed())
		Expect(receiver.ByID()).NotTo(HaveKey(id))
		Expect(receiver.RequestsFor(id)).To(Equal(5), "tried five times, then given up")
		Expect(auditNotifications("refused") - refusals).To(Equal(4.0))
		Expect(auditNotifications("dead_lettered") - deadLettered).To(Equal(1.0))
		Expect(auditNotifications("failed")-failed).To(BeZero(), "the sink failed no send")
	})
})

// Notifications a replica owed when it stopped: another replica finds
// them on the change of members, and, should every sink back off then, as
// soon as a sink is back, not at its next periodic sweep.
var _ = Describe("Notifications owed by a replica that stopped", func() {
	It("are delivered within seconds of the sink's return, though the sweep comes every minute", func() {
		ctx := context.Background()
		ns := env.NewTenant()
		env.CreateTool(ns, "charge", testenv.WithTimeout(10*time.Second), testenv.WithKeyLookup())
		receiver, err := testenv.StartCloudEventsReceiver()
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(receiver.Close)
		Expect(receiver.Down()).To(Succeed())
		replica := func(executor string) app.Options {
			return app.Options{ExecutorID: executor, LeaseGrace: time.Second, MemberLeaseDuration: 3 * time.Second,
				NotificationSinks: []notify.Sink{{Name: "audit", URL: receiver.URL}}, NotificationSweep: time.Minute}
		}
		stopA := startManagerWith(replica("notifier-a"), nil)
		startManagerWith(replica("notifier-b"), nil)
		waitForMembers(2, 3*time.Second)

		names := make([]string, 10)
		for i := range names {
			names[i] = fmt.Sprintf("order-%03d", i)
			Expect(k8s.Create(ctx, action(ns, names[i], 100+i))).To(Succeed())
		}
		ids := map[string]bool{}
		Eventually(func(g Gomega) {
			for _, name := range names {
				a := env.Get(ns, name)
				g.Expect(a.Status.Notifications).To(HaveLen(1), "action %s", name)
				ids[a.Status.Notifications[0].ID] = true
			}
		}).Should(Succeed())
		// A stops owing its share; B takes the share over while every sink
		// backs off for it, B's own events having failed for seconds.
		stopA()
		waitForMembers(1, 3*time.Second)
		time.Sleep(3 * time.Second)

		Expect(receiver.Up()).To(Succeed())
		Eventually(func(g Gomega) {
			got := receiver.ByID()
			for id := range ids {
				g.Expect(got).To(HaveKey(id))
			}
		}, 30*time.Second).Should(Succeed(), "every event delivered well before B's next periodic sweep")
		var first, last time.Time
		for _, rec := range receiver.Received() {
			if !ids[rec.Event.ID()] {
				continue
			}
			if first.IsZero() || rec.At.Before(first) {
				first = rec.At
			}
			if rec.At.After(last) {
				last = rec.At
			}
		}
		Expect(last.Sub(first)).To(BeNumerically("<", 5*time.Second),
			"the sink's first acknowledgement after its return (the backoff's end) at %s, the last event at %s", first.Format(time.RFC3339Nano), last.Format(time.RFC3339Nano))
	})
})

// auditNotifications reads toolledger_notifications_total of the sink
// audit, which every spec's manager names, and a result, from the process's
// metrics registry, which every in-process manager shares.
func auditNotifications(result string) float64 {
	families, err := metrics.Registry.Gather()
	Expect(err).NotTo(HaveOccurred())
	for _, f := range families {
		if f.GetName() != "toolledger_notifications_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["sink"] == "audit" && labels["result"] == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
