// Package requeue is the one way back into the ToolAction controller's work
// queue. Beside the informer's events, which controller-runtime queues
// itself, every source hands keys to a Queue: the deletion watch, the
// dispatcher's grants, the Ledger handing back an action it finished, the
// retention sweep, a change of shard members, and a downstream call's
// result.
//
// A Queue also keeps each key to one piece of work at a time in the
// process. The work queue never gives a key to two workers at once; a
// downstream call made off the workers carries its reconcile's hold on the
// key until the call's outcome is recorded, and a reconcile of that key
// meanwhile is turned away and owed another once the hold is released.
package requeue

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// Queue hands keys to a controller's work queue and holds each key for one
// piece of work at a time. The zero value is not usable: call New.
type Queue struct {
	queue atomic.Pointer[workqueue.TypedRateLimitingInterface[reconcile.Request]]
	// reconciled is when a reconcile last returned (Unix nanoseconds).
	reconciled atomic.Int64

	mu sync.Mutex
	// held are the keys being worked: by a reconcile, or by a call it
	// carried off the workers.
	held map[types.NamespacedName]*hold
	// fresh are the keys whose next reconcile must read the API server:
	// the cache may still hold the version before the change that queued
	// them.
	fresh map[types.NamespacedName]bool
	// early are the keys handed over before the controller started the
	// source: a finished action being deleted is not in the cache, so the
	// controller's first list would not bring it.
	early map[types.NamespacedName]bool
	// listed are finished records the retention sweep read from the API
	// server a moment before it handed them over: the key's next reconcile
	// works from that version instead of reading it again. A key handed
	// over by anything else drops it, as it may have changed since.
	listed map[types.NamespacedName]client.Object
}

// hold is one key's piece of work: a reconcile, and the calls it carried
// off the workers. It ends when all of them have.
type hold struct {
	key types.NamespacedName
	// parts counts what still holds the key: the reconcile until it
	// returns, and each call it carried until that call ends.
	parts int
	// owed: a reconcile was turned away while the key was held.
	owed bool
}

// New returns a Queue; what it is handed before a controller starts its
// Source is queued then.
func New() *Queue {
	return &Queue{held: map[types.NamespacedName]*hold{}, fresh: map[types.NamespacedName]bool{}, early: map[types.NamespacedName]bool{},
		listed: map[types.NamespacedName]client.Object{}}
}

// Source is the controller source through which the Queue reaches the
// controller's work queue; starting, it queues the keys handed over before.
func (q *Queue) Source() source.Source {
	return source.Func(func(_ context.Context, wq workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		q.mu.Lock()
		q.queue.Store(&wq)
		early := q.early
		q.early = nil
		q.mu.Unlock()
		for key := range early {
			wq.Add(reconcile.Request{NamespacedName: key})
		}
		return nil
	})
}

// Started reports whether the controller started the Queue's source: until
// then nothing needs queueing, as the controller's first list reconciles
// every object.
func (q *Queue) Started() bool { return q.queue.Load() != nil }

// Add has key reconciled.
func (q *Queue) Add(key types.NamespacedName) {
	q.mu.Lock()
	delete(q.listed, key)
	q.mu.Unlock()
	q.add(key)
}

// AddListed has obj's key reconciled from obj, a version just read from
// the API server: the sweep's list, which saves the reconcile a read of a
// record the cache of active actions does not hold. The writes that follow
// are guarded by its resourceVersion, so a version changed since costs a
// conflict, not a wrong write. obj must not be shared.
func (q *Queue) AddListed(obj client.Object) {
	key := client.ObjectKeyFromObject(obj)
	q.mu.Lock()
	q.listed[key] = obj
	q.mu.Unlock()
	q.add(key)
}

// TakeListed returns the version AddListed handed over for key, if no
// other hand-over followed it, and clears it.
func (q *Queue) TakeListed(key types.NamespacedName) client.Object {
	q.mu.Lock()
	defer q.mu.Unlock()
	obj := q.listed[key]
	delete(q.listed, key)
	return obj
}

func (q *Queue) add(key types.NamespacedName) {
	wq := q.queue.Load()
	if wq == nil {
		q.mu.Lock()
		if wq = q.queue.Load(); wq == nil {
			q.early[key] = true
		}
		q.mu.Unlock()
	}
	if wq != nil {
		(*wq).Add(reconcile.Request{NamespacedName: key})
	}
}

// Revisit has key reconciled from a read of the API server: an action that
// left the cache, or whose cached version predates the change that made
// the revisit.
func (q *Queue) Revisit(key types.NamespacedName) {
	q.mu.Lock()
	q.fresh[key] = true
	q.mu.Unlock()
	q.Add(key)
}

// TakeFresh reports whether key's reconcile must read the API server, and
// clears that.
func (q *Queue) TakeFresh(key types.NamespacedName) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	fresh := q.fresh[key]
	delete(q.fresh, key)
	return fresh
}

// Result hands what work done off the workers returned to the work queue,
// as the controller does with a reconcile's result.
func (q *Queue) Result(ctx context.Context, key types.NamespacedName, result ctrl.Result, err error) {
	wq := q.queue.Load()
	if wq == nil {
		return
	}
	req := reconcile.Request{NamespacedName: key}
	switch {
	case err != nil:
		log.FromContext(ctx).Error(err, "Work off the workers failed; reconciled again with backoff")
		(*wq).AddRateLimited(req)
	case result.RequeueAfter > 0:
		(*wq).Forget(req)
		(*wq).AddAfter(req, result.RequeueAfter)
	default:
		(*wq).Forget(req)
	}
}

type holdKey struct{}

// Serialize is inner, holding each key for the reconcile: a reconcile of a
// key still held by a call off the workers returns at once, and the key is
// queued again when the call releases it.
func (q *Queue) Serialize(inner reconcile.Reconciler) reconcile.Reconciler {
	return reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		defer func() { q.reconciled.Store(time.Now().UnixNano()) }()
		h := q.enter(req.NamespacedName)
		if h == nil {
			return reconcile.Result{}, nil
		}
		defer q.done(h)
		return inner.Reconcile(context.WithValue(ctx, holdKey{}, h), req)
	})
}

// Carry hands the hold of the reconcile running in ctx to work that goes on
// off the workers; that work calls the returned release once it is done.
// Outside a reconcile there is nothing to carry, and release does nothing.
func (q *Queue) Carry(ctx context.Context) (release func()) {
	h, ok := ctx.Value(holdKey{}).(*hold)
	if !ok {
		return func() {}
	}
	q.mu.Lock()
	h.parts++
	q.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { q.done(h) }) }
}

// enter holds key for a reconcile; nil when it is held already, and then
// the holder owes the key a reconcile.
func (q *Queue) enter(key types.NamespacedName) *hold {
	q.mu.Lock()
	defer q.mu.Unlock()
	if h, busy := q.held[key]; busy {
		h.owed = true
		return nil
	}
	h := &hold{key: key, parts: 1}
	q.held[key] = h
	return h
}

// done ends one part of h: its reconcile, or a call it carried. The last
// frees the key, and queues it again if a reconcile was turned away
// meanwhile.
func (q *Queue) done(h *hold) {
	q.mu.Lock()
	if h.parts--; h.parts > 0 {
		q.mu.Unlock()
		return
	}
	delete(q.held, h.key)
	owed := h.owed
	q.mu.Unlock()
	if owed {
		q.Add(h.key)
	}
}

// Progressing reports whether the workers keep up: nothing is queued, or a
// reconcile returned within the last period. Until the first returns (the
// cache may take long to sync) they are taken to.
func (q *Queue) Progressing(period time.Duration) bool {
	wq, last := q.queue.Load(), q.reconciled.Load()
	if wq == nil || last == 0 || (*wq).Len() == 0 {
		return true
	}
	return time.Since(time.Unix(0, last)) < period
}
