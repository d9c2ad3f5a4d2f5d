package requeue

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// probe is a reconciler that records, per key, whether a piece of work (a
// reconcile and the call it carried off the workers) began while another
// was under way, and which request each reconcile was the answer to.
type probe struct {
	t     *testing.T
	queue *Queue
	mu    sync.Mutex
	// busy are the keys whose piece of work is under way.
	busy map[types.NamespacedName]bool
	// overlaps counts the pieces of work that began on a busy key.
	overlaps atomic.Int64
	// parallel is the most keys seen busy at once.
	parallel atomic.Int64
	// requested counts the requeues sent; seen is the count a reconcile
	// last began after.
	requested, seen, reconciles atomic.Int64
	// carryEvery makes every n-th reconcile carry a call off the workers.
	carryEvery int64
	calls      sync.WaitGroup
}

func (p *probe) begin(key types.NamespacedName) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.busy[key] {
		p.overlaps.Add(1)
	}
	p.busy[key] = true
	if n := int64(len(p.busy)); n > p.parallel.Load() {
		p.parallel.Store(n)
	}
}

func (p *probe) end(key types.NamespacedName) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.busy, key)
}

func (p *probe) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	p.seen.Store(p.requested.Load())
	p.begin(req.NamespacedName)
	n := p.reconciles.Add(1)
	time.Sleep(time.Millisecond)
	if p.carryEvery > 0 && n%p.carryEvery == 0 {
		release := p.queue.Carry(ctx)
		p.calls.Add(1)
		go func() {
			defer p.calls.Done()
			time.Sleep(3 * time.Millisecond)
			p.end(req.NamespacedName)
			release()
			p.queue.Result(ctx, req.NamespacedName, reconcile.Result{}, nil)
		}()
		return reconcile.Result{}, nil
	}
	p.end(req.NamespacedName)
	return reconcile.Result{}, nil
}

// startController runs a controller-runtime controller with 8 workers over
// the probe, fed by the Queue and by a channel that stands for the
// informer, a source the Queue does not see.
func startController(t *testing.T, p *probe) chan<- event.GenericEvent {
	t.Helper()
	informer := make(chan event.GenericEvent)
	c, err := controller.NewUnmanaged("probe", controller.Options{
		Reconciler:              p.queue.Serialize(p),
		MaxConcurrentReconciles: 8,
		SkipNameValidation:      ptr.To(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, src := range []source.Source{p.queue.Source(), source.Channel(informer, &handler.EnqueueRequestForObject{})} {
		if err := c.Watch(src); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		if err := c.Start(ctx); err != nil {
			t.Error(err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-stopped
		p.calls.Wait()
	})
	eventually(t, "the controller started the Queue's source", func() bool { return p.queue.queue.Load() != nil })
	return informer
}

func newProbe(t *testing.T, carryEvery int64) *probe {
	return &probe{t: t, queue: New(), busy: map[types.NamespacedName]bool{}, carryEvery: carryEvery}
}

// eventually waits until cond holds, for at most 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10s: %s", what)
		}
	}
}

func TestTwoSourcesRequeueingOneKeyLeadToOneReconcileAtATime(t *testing.T) {
	p := newProbe(t, 3)
	informer := startController(t, p)
	keys := make([]types.NamespacedName, 4)
	for i := range keys {
		keys[i] = types.NamespacedName{Namespace: "shop", Name: fmt.Sprintf("order-%d", i)}
	}
	// Each key is requeued at once through the Queue (Add and Revisit, as
	// the dispatcher, the deletion watch and the Ledger do) and by the
	// informer, 200 times a source.
	var sources sync.WaitGroup
	send := func(requeue func(types.NamespacedName)) {
		defer sources.Done()
		for i := range 200 {
			p.requested.Add(1)
			requeue(keys[i%len(keys)])
			time.Sleep(100 * time.Microsecond)
		}
	}
	sources.Add(3)
	go send(p.queue.Add)
	go send(p.queue.Revisit)
	go send(func(key types.NamespacedName) {
		informer <- event.GenericEvent{Object: &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}}
	})
	sources.Wait()
	// Every requeue is answered: a reconcile begins after the last one.
	eventually(t, "a reconcile after the last requeue", func() bool { return p.seen.Load() == p.requested.Load() })

	if n := p.overlaps.Load(); n != 0 {
		t.Errorf("%d pieces of work began on a key whose reconcile or call was under way", n)
	}
	if n := p.reconciles.Load(); n < 3*int64(len(keys)) {
		t.Errorf("only %d reconciles for %d keys requeued 600 times", n, len(keys))
	}
	// One key at a time, not one at a time overall.
	if n := p.parallel.Load(); n < 2 {
		t.Errorf("at most %d keys were worked at once, with 8 workers and 4 keys", n)
	}
}

func TestAReconcileTurnedAwayByACallIsOwedOne(t *testing.T) {
	p := newProbe(t, 0)
	startController(t, p)
	key := types.NamespacedName{Namespace: "shop", Name: "order-1"}
	// A call off the workers holds the key, as callIn does.
	h := p.queue.enter(key)
	release := p.queue.Carry(context.WithValue(context.Background(), holdKey{}, h))
	p.queue.done(h)

	p.queue.Add(key)
	eventually(t, "the reconcile was turned away", func() bool {
		p.queue.mu.Lock()
		defer p.queue.mu.Unlock()
		return h.owed
	})
	if n := p.reconciles.Load(); n != 0 {
		t.Fatalf("%d reconciles ran while a call held the key", n)
	}
	release()
	eventually(t, "the owed reconcile", func() bool { return p.reconciles.Load() == 1 })
	release() // a second release frees nothing and owes nothing
	time.Sleep(50 * time.Millisecond)
	if n := p.reconciles.Load(); n != 1 {
		t.Fatalf("%d reconciles, want the one owed", n)
	}
}

func TestProgressingWhenNothingWaitsOrAReconcileReturnedLately(t *testing.T) {
	q := New()
	if !q.Progressing(time.Second) || q.Started() {
		t.Fatalf("a controller not started: Progressing %t (want true), Started %t (want false)", q.Progressing(time.Second), q.Started())
	}
	wq := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer wq.ShutDown()
	q.queue.Store(&wq)
	if !q.Started() {
		t.Fatal("a Queue whose source started is not Started")
	}
	q.Add(types.NamespacedName{Namespace: "shop", Name: "order-1"})
	if !q.Progressing(time.Second) {
		t.Fatal("before the first reconcile returns, the workers are taken to progress")
	}
	q.reconciled.Store(time.Now().Add(-2 * time.Second).UnixNano())
	if q.Progressing(time.Second) {
		t.Fatal("work queued and no reconcile for 2s is progress over a 1s period")
	}
	q.reconciled.Store(time.Now().UnixNano())
	if !q.Progressing(time.Second) {
		t.Fatal("a reconcile that just returned is progress")
	}
}

// A finished action being deleted is not in the cache: a deletion the
// watch hands over before the controller starts must not be dropped.
func TestKeysHandedOverBeforeTheStartAreQueuedThen(t *testing.T) {
	p := newProbe(t, 0)
	key := types.NamespacedName{Namespace: "shop", Name: "order-1"}
	p.queue.Add(key)
	startController(t, p)
	eventually(t, "the reconcile of the key handed over before the start", func() bool { return p.reconciles.Load() == 1 })
}

// A listed version is the key's next reconcile's only while nothing else
// handed the key over since: another hand-over may follow a change.
func TestListedVersionGoesWithTheNextHandOverOnly(t *testing.T) {
	q := New()
	listed := func(name string) *metav1.PartialObjectMetadata {
		return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: name, ResourceVersion: "7"}}
	}
	key := func(name string) types.NamespacedName { return types.NamespacedName{Namespace: "tenant", Name: name} }

	q.AddListed(listed("kept"))
	if got := q.TakeListed(key("kept")); got == nil || got.GetResourceVersion() != "7" {
		t.Fatalf("TakeListed after AddListed = %v, want the listed version", got)
	}
	if got := q.TakeListed(key("kept")); got != nil {
		t.Fatalf("a second TakeListed = %v, want nothing: the version is taken once", got)
	}

	q.AddListed(listed("added"))
	q.Add(key("added"))
	if got := q.TakeListed(key("added")); got != nil {
		t.Fatalf("TakeListed after a plain Add = %v, want nothing", got)
	}

	q.AddListed(listed("revisited"))
	q.Revisit(key("revisited"))
	if got := q.TakeListed(key("revisited")); got != nil || !q.TakeFresh(key("revisited")) {
		t.Fatalf("after a Revisit, TakeListed = %v and the key must be read fresh", got)
	}
}
