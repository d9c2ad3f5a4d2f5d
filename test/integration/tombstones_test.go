package integration

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/cmd/manager/app"
	"github.com/toolledger/toolledger/internal/testenv"
	"github.com/toolledger/toolledger/internal/testenv/specenv"
	"github.com/toolledger/toolledger/pkg/sdk"
)

// The retentions are hours long and pass on an injected clock: the manager
// reads time only from it, and its retention sweep runs every 200ms.
var _ = Describe("Tombstones", func() {
	var (
		ctx   context.Context
		ns    string
		clock *clocktesting.FakeClock
	)

	BeforeEach(func() {
		ctx = context.Background()
		ns = env.NewTenant()
		clock = clocktesting.NewFakeClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
		stop, err := testenv.StartManager(testenv.AsManager(env.Config), app.Options{ExecutorID: "tombstones", LeaseGrace: time.Second,
			Clock: clock, RetentionSweep: 200 * time.Millisecond})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { _ = stop() })
		env.CreateTool(ns, "charge", testenv.WithClass(v1alpha1.NonRepeatable),
			testenv.WithRecordRetention(time.Hour), testenv.WithKeyRetention(24*time.Hour))
	})

	charge := func(name string, amount int64) *v1alpha1.ToolAction { return chargeAction(ns, name, amount) }
	tombstone := func(name string) func() (*v1alpha1.Tombstone, error) {
		return func() (*v1alpha1.Tombstone, error) {
			var t v1alpha1.Tombstone
			err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &t)
			return &t, err
		}
	}

	It("outlives the record and answers its key until keyRetention passes, without a request downstream", func() {
		key := ns + "/order-1001-charge"
		Expect(k8s.Create(ctx, charge("order-1001-charge", 1200))).To(Succeed())
		first := env.WaitForPhase(ns, "order-1001-charge", v1alpha1.PhaseSucceeded)
		Expect(first.Status.ExternalRef).NotTo(BeEmpty())
		Expect(downstream.Requests(key)).To(Equal(1))
		keptUntil := metav1.NewTime(first.Status.CompletionTime.Add(24 * time.Hour))
		Expect(first.Status.KeptUntil).To(Equal(&keptUntil), "keptUntil: completion + the tool's keyRetention")
		Expect(first.Status.DownstreamKeptUntil).To(BeNil(), "the tool declares no downstreamKeyRetention")

		By("recordRetention passes: the record is gone, its tombstone there")
		clock.Step(90 * time.Minute)
		Eventually(gone(first.DeepCopy())).Should(BeTrue())
		tomb, err := tombstone("order-1001-charge")()
		Expect(err).NotTo(HaveOccurred())
		Expect(tomb.Record).To(Equal(v1alpha1.TombstoneRecord{
			ActionUID: first.UID, RequestDigest: first.Status.RequestDigest, Phase: v1alpha1.PhaseSucceeded,
			ExternalRef: first.Status.ExternalRef, Attempts: 1, CompletionTime: *first.Status.CompletionTime,
			ToolRef: v1alpha1.ToolReference{Kind: v1alpha1.KindTool, Name: "charge"}, IdempotencyClass: v1alpha1.NonRepeatable,
			Cause: v1alpha1.TombstoneCauseRecordRetention, DeletedBy: "toolledger (tombstones)", DeletionTime: tomb.Record.DeletionTime,
			KeptUntil: &keptUntil,
		}))
		Expect(tomb.Labels).To(HaveKeyWithValue(v1alpha1.LabelTool, "charge"))

		By("the same manifest applied again: the original outcome, no request")
		Expect(k8s.Create(ctx, charge("order-1001-charge", 1200))).To(Succeed())
		again := env.WaitForPhase(ns, "order-1001-charge", v1alpha1.PhaseSucceeded)
		Expect(again.Status.ExternalRef).To(Equal(first.Status.ExternalRef))
		Expect(again.Status.Attempts).To(BeZero())
		Expect(again.Status.KeptUntil).To(Equal(&keptUntil), "the answer states the Tombstone's keptUntil, not its own completion's")
		Expect(specenv.Reasons(again)).To(ContainElement(v1alpha1.ReasonSettledByTombstone))
		Expect(meta.FindStatusCondition(again.Status.Conditions, v1alpha1.ConditionSucceeded).Message).To(And(
			ContainSubstring("Tombstone order-1001-charge"), ContainSubstring(first.Status.ExternalRef)))
		Expect(downstream.Requests(key)).To(Equal(1))

		By("the SDK reports the answer as deduplicated")
		recreate(again)
		invoker, err := sdk.NewClient(env.Config)
		Expect(err).NotTo(HaveOccurred())
		outcome, err := invoker.Invoke(ctx, sdk.Request{Namespace: ns, Key: "order-1001-charge", Tool: "charge",
			Parameters: map[string]any{"amount": 1200, "currency": "EUR", "customer": "cus_1"}})
		Expect(err).NotTo(HaveOccurred())
		Expect(outcome.Phase).To(Equal(v1alpha1.PhaseSucceeded))
		Expect(outcome.Deduplicated).To(BeTrue())
		Expect(outcome.ExternalRef).To(Equal(first.Status.ExternalRef))
		Expect(outcome.KeptUntil).To(BeTemporally("==", keptUntil.Time))
		Expect(downstream.Requests(key)).To(Equal(1))

		By("different parameters under the key: DuplicateConflict, no request")
		recreate(env.Get(ns, "order-1001-charge"))
		conflict := refusedThenGone(charge("order-1001-charge", 9900))
		Expect(conflict.Status.Error.Class).To(Equal(v1alpha1.ErrorClassDuplicateConflict))
		Expect(conflict.Status.Error.Reason).To(Equal(v1alpha1.ReasonTombstoneConflict))
		Expect(conflict.Status.Error.Message).To(And(ContainSubstring(tomb.Record.RequestDigest),
			ContainSubstring(tomb.Record.CompletionTime.UTC().Format(time.RFC3339)), ContainSubstring("Tombstone order-1001-charge")))
		Expect(conflict.Status.Attempts).To(BeZero())
		Expect(conflict.Status.KeptUntil).To(Equal(&keptUntil), "a refused request learns until when the key stays taken")
		Expect(downstream.Requests(key)).To(Equal(1))

		By("the SDK reports a different request under the key as a DuplicateConflictError")
		outcome, err = invoker.Invoke(ctx, sdk.Request{Namespace: ns, Key: "order-1001-charge", Tool: "charge",
			Parameters: map[string]any{"amount": 9900, "currency": "EUR", "customer": "cus_1"}})
		Expect(errors.Is(err, sdk.ErrDuplicateConflict)).To(BeTrue(), "Invoke: %v", err)
		Expect(err.Error()).To(ContainSubstring(tomb.Record.RequestDigest))
		Expect(outcome.Phase).To(Equal(v1alpha1.PhaseFailed))
		Expect(downstream.Requests(key)).To(Equal(1))

		By("the original request right after the refused one, through the SDK and as a manifest: the original outcome from the tombstone")
		originalAfterRefused(invoker, ns, "order-1001-charge", 1200, 9900, first.Status.ExternalRef)
		Expect(downstream.Requests(key)).To(Equal(1))
		recreate(env.Get(ns, "order-1001-charge"))

		By("keyRetention passes: the tombstone goes and the key executes as a new intent")
		clock.Step(24 * time.Hour)
		Eventually(func() bool { _, err := tombstone("order-1001-charge")(); return apierrors.IsNotFound(err) }).Should(BeTrue())
		// The first request again: the demo downstream would refuse another
		// body under a key it remembers, as Stripe does within its window.
		Expect(k8s.Create(ctx, charge("order-1001-charge", 1200))).To(Succeed())
		fresh := env.WaitForPhase(ns, "order-1001-charge", v1alpha1.PhaseSucceeded)
		Expect(fresh.Status.Attempts).To(Equal(int32(1)))
		Expect(specenv.Reasons(fresh)).NotTo(ContainElement(v1alpha1.ReasonSettledByTombstone))
		Expect(downstream.Requests(key)).To(Equal(2))
	})

	It("keeps a key until the keptUntil its answers stated, though the tool's keyRetention is shortened after", func() {
		key := ns + "/order-4001-charge"
		Expect(k8s.Create(ctx, charge("order-4001-charge", 700))).To(Succeed())
		first := env.WaitForPhase(ns, "order-4001-charge", v1alpha1.PhaseSucceeded)
		Expect(first.Status.KeptUntil).NotTo(BeNil())
		promised := first.Status.KeptUntil.Time
		Expect(promised).To(BeTemporally("==", first.Status.CompletionTime.Add(24*time.Hour)))

		By("the tool's keyRetention shortened to 1h, and 2h pass: the record goes to its tombstone, which stays")
		var tool v1alpha1.Tool
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "charge"}, &tool)).To(Succeed())
		tool.Spec.KeyRetention = &metav1.Duration{Duration: time.Hour}
		Expect(k8s.Update(ctx, &tool)).To(Succeed())
		clock.Step(2 * time.Hour)
		Eventually(gone(first.DeepCopy())).Should(BeTrue())
		tomb, err := tombstone("order-4001-charge")()
		Expect(err).NotTo(HaveOccurred())
		Expect(tomb.Record.KeptUntil.Time).To(BeTemporally("==", promised))
		// Ten sweeps: without the promise, the first would free the key.
		Consistently(func() error { _, err := tombstone("order-4001-charge")(); return err }, 2*time.Second, 200*time.Millisecond).Should(Succeed())

		By("a retry under the key before the promise: the original outcome, no request")
		Expect(k8s.Create(ctx, charge("order-4001-charge", 700))).To(Succeed())
		again := env.WaitForPhase(ns, "order-4001-charge", v1alpha1.PhaseSucceeded)
		Expect(specenv.Reasons(again)).To(ContainElement(v1alpha1.ReasonSettledByTombstone))
		Expect(again.Status.KeptUntil.Time).To(BeTemporally("==", promised))
		Expect(downstream.Requests(key)).To(Equal(1))

		By("the promise passes: the tombstone goes")
		clock.Step(23 * time.Hour)
		Eventually(func() bool { _, err := tombstone("order-4001-charge")(); return apierrors.IsNotFound(err) }).Should(BeTrue())
	})

	It("is written when a user deletes a dispatched record, and not for one that dispatched nothing", func() {
		Expect(k8s.Create(ctx, charge("order-2001-charge", 500))).To(Succeed())
		done := env.WaitForPhase(ns, "order-2001-charge", v1alpha1.PhaseSucceeded)
		recreate(done)
		tomb, err := tombstone("order-2001-charge")()
		Expect(err).NotTo(HaveOccurred())
		Expect(tomb.Record.Cause).To(Equal(v1alpha1.TombstoneCauseDeleted))
		Expect(tomb.Record.DeletedBy).To(BeEmpty())
		Expect(tomb.Record.ExternalRef).To(Equal(done.Status.ExternalRef))

		By("a record rejected before dispatch leaves none")
		rejected := charge("order-2002-charge", 500)
		rejected.Spec.ToolRef.Name = "no-such-tool"
		Expect(k8s.Create(ctx, rejected)).To(Succeed())
		env.WaitForPhase(ns, "order-2002-charge", v1alpha1.PhaseFailed)
		recreate(rejected)
		_, err = tombstone("order-2002-charge")()
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "tombstone of a never-dispatched action: %v", err)
	})

	It("lets a dispatched record go without one when its namespace is being deleted", func() {
		Expect(k8s.Create(ctx, charge("order-3001-charge", 500))).To(Succeed())
		done := env.WaitForPhase(ns, "order-3001-charge", v1alpha1.PhaseSucceeded)
		// envtest runs no namespace controller: the namespace stays
		// Terminating, refusing creates, and the test deletes its content.
		Expect(k8s.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
		Expect(k8s.Delete(ctx, done)).To(Succeed())
		Eventually(gone(done)).Should(BeTrue())
		_, err := tombstone("order-3001-charge")()
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "tombstone in a terminating namespace: %v", err)
	})
})

// The sweep hands the controller each record with the version its list
// read, so retiring one reads nothing more from the API server; a record
// changed between the list and its turn costs a conflict and a read, and
// is retired all the same. At two retirements a second, the fourth
// record's turn comes a second and a half after the first's.
var _ = Describe("The retention sweep", func() {
	It("retires the records it listed without reading them again, and one changed since after a read", func() {
		ctx := context.Background()
		ns := env.NewTenant()
		clock := clocktesting.NewFakeClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
		reads := &actionReads{n: map[string]int{}}
		cfg := testenv.AsManager(env.Config)
		cfg.Wrap(func(next http.RoundTripper) http.RoundTripper { reads.next = next; return reads })
		stop, err := testenv.StartManager(cfg, app.Options{ExecutorID: "listed", LeaseGrace: time.Second,
			Clock: clock, RetentionSweep: 200 * time.Millisecond, RetentionRate: 2})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { _ = stop() })
		env.CreateTool(ns, "charge", testenv.WithClass(v1alpha1.NonRepeatable),
			testenv.WithRecordRetention(time.Hour), testenv.WithKeyRetention(24*time.Hour))

		names := []string{"order-7001-charge", "order-7002-charge", "order-7003-charge", "order-7004-charge"}
		var finished []*v1alpha1.ToolAction
		for _, name := range names {
			Expect(k8s.Create(ctx, chargeAction(ns, name, 1200))).To(Succeed())
		}
		for _, name := range names {
			finished = append(finished, env.WaitForPhase(ns, name, v1alpha1.PhaseSucceeded))
		}
		// The reconcile that follows each finish reads the record, which
		// has left the cache of active actions: once the counts hold still,
		// those are over.
		var before []int
		Eventually(func() bool {
			now := reads.counts(ns, names)
			still := slices.Equal(now, before)
			before = now
			return still
		}).WithPolling(time.Second).Should(BeTrue())

		By("their recordRetention passes; once the first is retired, the last is changed before its turn")
		clock.Step(90 * time.Minute)
		Eventually(gone(finished[0].DeepCopy())).Should(BeTrue())
		last := finished[3].DeepCopy()
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(last), last)).To(Succeed())
		patch := client.MergeFrom(last.DeepCopy())
		last.Labels = map[string]string{"example.com/reviewed": "yes"}
		Expect(k8s.Patch(ctx, last, patch)).To(Succeed())

		for _, action := range finished {
			Eventually(gone(action.DeepCopy())).Should(BeTrue())
			var tomb v1alpha1.Tombstone
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(action), &tomb)).To(Succeed())
			Expect(tomb.Record.ActionUID).To(Equal(action.UID))
			Expect(tomb.Record.Cause).To(Equal(v1alpha1.TombstoneCauseRecordRetention))
		}
		after := reads.counts(ns, names)
		for i := range names[:3] {
			Expect(after[i]-before[i]).To(BeZero(), "the manager's GETs of %s while the sweep retired it", names[i])
		}
		Expect(after[3]-before[3]).To(BeNumerically(">", 0), "the changed record is read again")
	})
})

// actionReads counts the GETs of single ToolActions a client sends, by
// namespace and name.
type actionReads struct {
	next http.RoundTripper
	mu   sync.Mutex
	n    map[string]int
}

func (a *actionReads) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodGet {
		if _, rest, ok := strings.Cut(r.URL.Path, "/namespaces/"); ok {
			if ns, name, ok := strings.Cut(rest, "/toolactions/"); ok && !strings.Contains(name, "/") {
				a.mu.Lock()
				a.n[ns+"/"+name]++
				a.mu.Unlock()
			}
		}
	}
	return a.next.RoundTrip(r)
}

func (a *actionReads) counts(ns string, names []string) []int {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []int
	for _, name := range names {
		out = append(out, a.n[ns+"/"+name])
	}
	return out
}

// chargeAction is a ToolAction of the tool "charge" in ns, for amount EUR
// cents to customer cus_1.
func chargeAction(ns, name string, amount int64) *v1alpha1.ToolAction {
	return &v1alpha1.ToolAction{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.ToolActionSpec{ToolRef: v1alpha1.ToolReference{Name: "charge"}, Parameters: map[string]apiextensionsv1.JSON{
			"amount": {Raw: []byte(fmt.Sprint(amount))}, "currency": {Raw: []byte(`"EUR"`)}, "customer": {Raw: []byte(`"cus_1"`)}}},
	}
}

// gone reports, when called, whether obj has left the API server.
func gone(obj client.Object) func() bool {
	return func() bool {
		return apierrors.IsNotFound(k8s.Get(context.Background(), client.ObjectKeyFromObject(obj), obj))
	}
}

// refusedThenGone creates a, which its key's Tombstone or archived record
// refuses (another request), and follows it until it leaves etcd, which it
// does at once; it returns the last version, as its deletion showed it.
func refusedThenGone(a *v1alpha1.ToolAction) *v1alpha1.ToolAction {
	GinkgoHelper()
	ctx := context.Background()
	watcher, err := client.NewWithWatch(env.Config, client.Options{Scheme: k8s.Scheme()})
	Expect(err).NotTo(HaveOccurred())
	events, err := watcher.Watch(ctx, &v1alpha1.ToolActionList{}, client.InNamespace(a.Namespace), client.MatchingFields{"metadata.name": a.Name})
	Expect(err).NotTo(HaveOccurred())
	defer events.Stop()
	Expect(k8s.Create(ctx, a)).To(Succeed())
	timeout := time.After(30 * time.Second)
	for {
		select {
		case e, ok := <-events.ResultChan():
			Expect(ok).To(BeTrue(), "the watch of %s ended", a.Name)
			if e.Type == watch.Deleted {
				last := e.Object.(*v1alpha1.ToolAction)
				Expect(last.Status.RefusedByEarlierRecord()).To(BeTrue(), "deleted as %+v", last.Status)
				return last
			}
		case <-timeout:
			Fail(fmt.Sprintf("%s did not leave etcd within 30s: %+v", a.Name, env.Get(a.Namespace, a.Name).Status))
		}
	}
}

// originalAfterRefused shows the original request of an action whose
// record left etcd (for its Tombstone or the archive) answered with its
// outcome right after another request under the key was refused: through
// the SDK, and created again as a manifest would be after the changed
// manifest's record left. It leaves the answered record in etcd.
func originalAfterRefused(invoker *sdk.Client, ns, name string, amount, changed int64, externalRef string) {
	GinkgoHelper()
	ctx := context.Background()
	outcome, err := invoker.Invoke(ctx, sdk.Request{Namespace: ns, Key: name, Tool: "charge",
		Parameters: map[string]any{"amount": amount, "currency": "EUR", "customer": "cus_1"}})
	Expect(err).NotTo(HaveOccurred())
	Expect(outcome.Deduplicated).To(BeTrue())
	Expect(outcome.ExternalRef).To(Equal(externalRef))
	recreate(env.Get(ns, name))
	refusedThenGone(chargeAction(ns, name, changed))
	Expect(k8s.Create(ctx, chargeAction(ns, name, amount))).To(Succeed())
	Expect(env.WaitForPhase(ns, name, v1alpha1.PhaseSucceeded).Status.ExternalRef).To(Equal(externalRef))
}

// recreate deletes obj and waits until it is gone, so that its name can be
// created again.
func recreate(obj *v1alpha1.ToolAction) {
	GinkgoHelper()
	Expect(k8s.Delete(context.Background(), obj)).To(Succeed())
	Eventually(gone(obj)).Should(BeTrue())
}
