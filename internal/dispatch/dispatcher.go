// Package dispatch bounds and orders the downstream calls of attempts and
// lookups: per tool, per namespace and per process, fairly across tools and
// tenants.
package dispatch

import (
	"context"
	"slices"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/types"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

// grantTTL is how long a slot is held for a woken action before it passes
// to the next one waiting: the woken reconcile may find the action claimed
// elsewhere, deleted, or no longer due.
const grantTTL = 10 * time.Second

// Dispatcher runs the downstream calls of attempts and lookups outside the
// reconcile workers, so that a slow or hung tool holds none of them, within
// three bounds: the tool's spec.limits (calls in flight, calls started a
// second), the calls of one namespace, and the calls of the process.
//
// A reconcile that finds no room parks the action and returns; when room
// frees, the dispatcher holds a slot for the next action waiting (a grant)
// and has it reconciled again. Waiting actions are served round-robin
// across tools, then across the namespaces waiting on one tool, each
// namespace in arrival order, so that one tenant's backlog delays another's
// first call by a few calls at most. Nothing about waiting is written to
// the API server: a parked action is still Accepted (or due), and a replica
// that restarts finds it there.
type Dispatcher struct {
	maxInFlight, maxPerNamespace int

	mu       sync.Mutex
	stopping bool
	inFlight int
	// namespaces counts the slots held per action namespace.
	namespaces map[string]int
	lanes      map[Lane]*lane
	// grants are the slots held for woken actions.
	grants map[types.NamespacedName]grant
	// ring is the order in which lanes with waiting actions are served; a
	// lane served goes to its back.
	ring []Lane
	// pending is the timer that serves a rate-limited lane when its next
	// token is due, at pendingAt; nil when none is set.
	pending   *time.Timer
	pendingAt time.Time
	// slots counts the slots held (granted or running), and calls the calls
	// running until they recorded their outcome (a call may give its slot
	// back before), so that a shutdown waits for both.
	slots, calls sync.WaitGroup
	// wake has an action reconciled again.
	wake func(types.NamespacedName)
	// reserving is the action whose reserve call is serving the lanes: a
	// slot granted to it is taken at once, without a wake.
	reserving *types.NamespacedName
	now       func() time.Time
}

// New allows maxInFlight downstream calls at once in this process, at most
// maxPerNamespace of them for the actions of one namespace; wake has an
// action reconciled again once a slot is held for it.
func New(maxInFlight, maxPerNamespace int, wake func(types.NamespacedName)) *Dispatcher {
	return &Dispatcher{
		maxInFlight: max(maxInFlight, 1), maxPerNamespace: max(min(maxPerNamespace, maxInFlight), 1),
		namespaces: map[string]int{}, lanes: map[Lane]*lane{}, grants: map[types.NamespacedName]grant{},
		wake: wake, now: time.Now,
	}
}

// Lane names a tool: limits are the tool's, whoever calls it.
type Lane struct {
	kind, namespace, name string
}

func (k Lane) String() string {
	if k.namespace == "" {
		return k.kind + "/" + k.name
	}
	return k.namespace + "/" + k.name
}

// Limits are a tool's spec.limits, defaults applied.
type Limits struct {
	maxInFlight int
	perSecond   float64
}

// LimitsOf are tool's limits.
func LimitsOf(tool *v1alpha1.Tool) Limits {
	l := tool.Spec.Limits.WithDefaults()
	return Limits{maxInFlight: int(l.MaxInFlight), perSecond: float64(l.RequestsPerSecond)}
}

// LaneOf is the lane of an action's tool. A ClusterTool resolves to a Tool
// in the operator's namespace, so the reference's kind tells them apart.
func LaneOf(action *v1alpha1.ToolAction, tool *v1alpha1.Tool) Lane {
	kind := action.Spec.ToolRef.KindOrDefault()
	if kind == v1alpha1.KindClusterTool {
		return Lane{kind: kind, name: tool.Name}
	}
	return Lane{kind: kind, namespace: tool.Namespace, name: tool.Name}
}

// lane is one tool's share of the dispatcher.
type lane struct {
	key     Lane
	limits  Limits
	limiter *rate.Limiter
	// held counts the tool's slots, granted or running.
	held int
	// waiting holds the parked actions per namespace, in arrival order;
	// order is the round-robin of namespaces with waiting actions.
	waiting map[string][]types.NamespacedName
	order   []string
	parked  map[types.NamespacedName]bool
}

// grant is a slot held for a woken action since at; unused, it passes on
// when its timer fires.
type grant struct {
	lane  Lane
	at    time.Time
	timer *time.Timer
}

func newLane(key Lane, limits Limits) *lane {
	return &lane{key: key, limits: limits, limiter: rate.NewLimiter(rate.Limit(limits.perSecond), limits.maxInFlight),
		waiting: map[string][]types.NamespacedName{}, parked: map[types.NamespacedName]bool{}}
}

// Slot is the right to make one downstream call; it is released exactly once.
type Slot struct {
	d        *Dispatcher
	lane     Lane
	action   types.NamespacedName
	released bool
}

// Reserve returns a slot for a call of action's tool, or nil when the
// action must wait: it is then parked, and reconciled again once a slot is
// held for it. The caller makes one call per action at a time (the
// requeue.Queue holds the action's key until its call ends).
func (d *Dispatcher) Reserve(key Lane, limits Limits, action types.NamespacedName) *Slot {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopping {
		return nil
	}
	l := d.lane(key, limits)
	if s := d.takeGrantLocked(key, action); s != nil {
		return s
	}
	if len(l.parked) == 0 && d.roomLocked(l, action.Namespace) && l.limiter.AllowN(d.now(), 1) {
		d.holdLocked(l, action.Namespace)
		return &Slot{d: d, lane: key, action: action}
	}
	if !l.parked[action] {
		l.parked[action] = true
		if len(l.waiting[action.Namespace]) == 0 {
			l.order = append(l.order, action.Namespace)
		}
		l.waiting[action.Namespace] = append(l.waiting[action.Namespace], action)
		if !slices.Contains(d.ring, key) {
			d.ring = append(d.ring, key)
		}
		dispatchWaiting.WithLabelValues(key.kind, key.namespace, key.name).Inc()
	}
	d.reserving = &action
	d.serveLocked()
	d.reserving = nil
	return d.takeGrantLocked(key, action)
}

// takeGrantLocked turns the slot held for action on lane key into its
// call's slot; nil when none is held.
func (d *Dispatcher) takeGrantLocked(key Lane, action types.NamespacedName) *Slot {
	g, ok := d.grants[action]
	if !ok || g.lane != key {
		return nil
	}
	g.timer.Stop()
	delete(d.grants, action)
	return &Slot{d: d, lane: key, action: action}
}

// Forget gives back a slot held for action since before began that the
// action's reconcile, begun then, did not use. A slot held later is for the
// reconcile the wake queued.
func (d *Dispatcher) Forget(action types.NamespacedName, began time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	g, ok := d.grants[action]
	if !ok || g.at.After(began) {
		return
	}
	g.timer.Stop()
	delete(d.grants, action)
	if l, ok := d.lanes[g.lane]; ok {
		d.freeLocked(l, action.Namespace)
	}
	d.serveLocked()
}

// Run makes the call in its own goroutine and releases the slot after it,
// unless the call released it sooner: once the downstream answered, what
// is left (recording the outcome) needs no slot.
func (s *Slot) Run(call func()) {
	s.d.calls.Add(1)
	go func() {
		defer s.d.calls.Done()
		defer s.Release()
		call()
	}()
}

// Release gives the slot back; a slot that made no call is released too.
func (s *Slot) Release() {
	d := s.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if s.released {
		return
	}
	s.released = true
	if l, ok := d.lanes[s.lane]; ok {
		d.freeLocked(l, s.action.Namespace)
	}
	d.serveLocked()
}

// lane returns key's lane, with limits as the tool states them now.
func (d *Dispatcher) lane(key Lane, limits Limits) *lane {
	l, ok := d.lanes[key]
	switch {
	case !ok:
		l = newLane(key, limits)
		d.lanes[key] = l
	case l.limits != limits:
		l.limits = limits
		l.limiter.SetLimit(rate.Limit(limits.perSecond))
		l.limiter.SetBurst(limits.maxInFlight)
	default:
		return l
	}
	dispatchLimit.WithLabelValues(key.kind, key.namespace, key.name, "in_flight").Set(float64(limits.maxInFlight))
	dispatchLimit.WithLabelValues(key.kind, key.namespace, key.name, "per_second").Set(limits.perSecond)
	return l
}

func (d *Dispatcher) roomLocked(l *lane, namespace string) bool {
	return l.held < l.limits.maxInFlight && d.namespaces[namespace] < d.maxPerNamespace && d.inFlight < d.maxInFlight
}

func (d *Dispatcher) holdLocked(l *lane, namespace string) {
	l.held++
	d.namespaces[namespace]++
	d.inFlight++
	d.slots.Add(1)
	dispatchInFlight.WithLabelValues(l.key.kind, l.key.namespace, l.key.name).Set(float64(l.held))
}

func (d *Dispatcher) freeLocked(l *lane, namespace string) {
	l.held--
	d.inFlight--
	if d.namespaces[namespace]--; d.namespaces[namespace] <= 0 {
		delete(d.namespaces, namespace)
	}
	d.slots.Done()
	dispatchInFlight.WithLabelValues(l.key.kind, l.key.namespace, l.key.name).Set(float64(l.held))
	// An idle lane whose limiter has refilled holds nothing worth keeping.
	if l.held == 0 && len(l.parked) == 0 && l.limiter.TokensAt(d.now()) >= float64(l.limits.maxInFlight) {
		delete(d.lanes, l.key)
		for _, m := range []interface{ DeleteLabelValues(...string) bool }{dispatchInFlight, dispatchWaiting} {
			m.DeleteLabelValues(l.key.kind, l.key.namespace, l.key.name)
		}
		for _, limit := range []string{"in_flight", "per_second"} {
			dispatchLimit.DeleteLabelValues(l.key.kind, l.key.namespace, l.key.name, limit)
		}
	}
}

// serveLocked grants slots to waiting actions while there is room: one per
// lane per round, in the ring's order, and within a lane one per namespace
// in turn. A lane out of tokens is served again when its
// next token is due.
func (d *Dispatcher) serveLocked() {
	if d.stopping {
		return
	}
	var due time.Duration
	for {
		granted := false
		for _, key := range slices.Clone(d.ring) {
			l := d.lanes[key]
			if l == nil || len(l.parked) == 0 || l.held >= l.limits.maxInFlight || d.inFlight >= d.maxInFlight {
				continue
			}
			now := d.now()
			if tokens := l.limiter.TokensAt(now); tokens < 1 {
				wait := time.Duration((1-tokens)/float64(l.limiter.Limit())*float64(time.Second)) + time.Millisecond
				if due == 0 || wait < due {
					due = wait
				}
				continue
			}
			action, ok := d.pickLocked(l)
			if !ok {
				continue
			}
			l.limiter.AllowN(now, 1)
			d.grantLocked(l, action)
			granted = true
			d.ring = append(slices.DeleteFunc(d.ring, func(k Lane) bool { return k == key }), key)
		}
		d.ring = slices.DeleteFunc(d.ring, func(k Lane) bool { l := d.lanes[k]; return l == nil || len(l.parked) == 0 })
		if !granted || d.inFlight >= d.maxInFlight {
			break
		}
	}
	if due > 0 {
		at := d.now().Add(due)
		if d.pending == nil || at.Before(d.pendingAt) {
			if d.pending != nil {
				d.pending.Stop()
			}
			d.pending, d.pendingAt = time.AfterFunc(due, d.serveDue), at
		}
	}
}

// serveDue serves the lanes whose next token is due.
func (d *Dispatcher) serveDue() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.pending = nil
	d.serveLocked()
}

// pickLocked takes the next waiting action of lane l that has room: the
// first of the next namespace in turn that is below its bound.
func (d *Dispatcher) pickLocked(l *lane) (types.NamespacedName, bool) {
	if l.held >= l.limits.maxInFlight || d.inFlight >= d.maxInFlight {
		return types.NamespacedName{}, false
	}
	for i, ns := range l.order {
		if d.namespaces[ns] >= d.maxPerNamespace {
			continue
		}
		queue := l.waiting[ns]
		action := queue[0]
		if len(queue) == 1 {
			delete(l.waiting, ns)
			l.order = append(l.order[:i:i], l.order[i+1:]...)
		} else {
			l.waiting[ns] = queue[1:]
			l.order = append(append(l.order[:i:i], l.order[i+1:]...), ns)
		}
		delete(l.parked, action)
		dispatchWaiting.WithLabelValues(l.key.kind, l.key.namespace, l.key.name).Dec()
		return action, true
	}
	return types.NamespacedName{}, false
}

// grantLocked holds a slot for action and has it reconciled; unused, the
// slot passes on after grantTTL.
func (d *Dispatcher) grantLocked(l *lane, action types.NamespacedName) {
	d.holdLocked(l, action.Namespace)
	now := d.now()
	d.grants[action] = grant{lane: l.key, at: now, timer: time.AfterFunc(grantTTL, func() { d.Forget(action, now) })}
	if d.wake != nil && (d.reserving == nil || *d.reserving != action) {
		d.wake(action)
	}
}

// Start waits for the manager to stop, then refuses new calls and waits for
// those in flight to record their outcome: the manager's graceful shutdown
// timeout bounds the wait.
func (d *Dispatcher) Start(ctx context.Context) error {
	<-ctx.Done()
	d.mu.Lock()
	d.stopping = true
	if d.pending != nil {
		d.pending.Stop()
	}
	for action, g := range d.grants {
		g.timer.Stop()
		delete(d.grants, action)
		if l, ok := d.lanes[g.lane]; ok {
			d.freeLocked(l, action.Namespace)
		}
	}
	d.mu.Unlock()
	// Every running call was added before its slot was released.
	d.slots.Wait()
	d.calls.Wait()
	return nil
}
