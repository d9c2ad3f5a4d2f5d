package notify

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/pager"
	"github.com/toolledger/toolledger/internal/printable"
	"github.com/toolledger/toolledger/internal/shard"
	"github.com/toolledger/toolledger/internal/wake"
)

// Notifier delivers the CloudEvents the actions owe (status.notifications)
// to the configured sinks, apart from the reconcile workers: a sink that is
// slow or down delays its own deliveries, never the ledger. An action is
// queued by the Ledger when a transition records an event, and by a sweep
// of the records whose status.notificationsPending is true, at start (what
// a stopped manager owed) and every Every. Each delivery retries with
// backoff until every sink acknowledged the event, then the action's
// status says so; delivery is at least once, and the event's id is the
// same every time.
type Notifier struct {
	// Ledger records what the deliveries settled.
	Ledger Ledger
	// Reader reads the actions from the API server: finished ones are not
	// in the cache.
	Reader client.Reader
	Sinks  []Sink
	Sender *Sender
	// Shards: a sweep queues the keys this replica owns; a replica that
	// recorded a transition delivers its events itself.
	Shards  *shard.Members
	Clock   clock.PassiveClock
	Every   time.Duration
	Workers int

	once    sync.Once
	queue   workqueue.TypedRateLimitingInterface[types.NamespacedName]
	early   wake.Early
	backoff *sinkBackoff
	// names are the sinks' names, sorted, as an owed event lists them;
	// byName the sinks by name.
	names  []string
	byName map[string]Sink
	// refusals count, by action, the refusals in a row of each of its
	// events by each sink (keyed id/sink).
	refusalsMu sync.Mutex
	refusals   map[types.NamespacedName]map[string]int
}

// Ledger is the one writer of ToolAction records, which records on an
// action what its deliveries settled, as it records every other change.
type Ledger interface {
	// Acknowledge records settled on action, and on any newer version of
	// it, so that nothing settled is delivered again.
	Acknowledge(ctx context.Context, action *v1alpha1.ToolAction, settled Settled) error
}

// The backoff of a delivery that a sink did not acknowledge.
const (
	notifyRetryMin = 500 * time.Millisecond
	notifyRetryMax = 30 * time.Second
)

func (n *Notifier) work() workqueue.TypedRateLimitingInterface[types.NamespacedName] {
	n.once.Do(func() {
		n.names = Names(n.Sinks)
		n.byName = map[string]Sink{}
		for _, s := range n.Sinks {
			n.byName[s.Name] = s
		}
		n.backoff = newSinkBackoff(n.names)
		n.refusals = map[types.NamespacedName]map[string]int{}
		n.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[types.NamespacedName](notifyRetryMin, notifyRetryMax),
			workqueue.TypedRateLimitingQueueConfig[types.NamespacedName]{Name: "notifier"})
	})
	return n.queue
}

// SinkNames are the sinks an event is owed to; none when n is nil. Every
// transition asks: they are derived once.
func (n *Notifier) SinkNames() []string {
	if n == nil {
		return nil
	}
	n.work()
	return n.names
}

// Owes reports whether the action owes a configured sink an event: a sink
// no longer configured is owed nothing, and holds no record back.
func (n *Notifier) Owes(action *v1alpha1.ToolAction) bool {
	if n == nil || !action.Status.NotificationsPending {
		return false
	}
	n.work()
	for _, owed := range action.Status.Notifications {
		for _, name := range owed.Pending {
			if _, configured := n.byName[name]; configured {
				return true
			}
		}
	}
	return false
}

// Owed queues an action whose recorded transition owes events.
func (n *Notifier) Owed(key types.NamespacedName) {
	if n != nil {
		n.work().Add(key)
	}
}

// Poke asks for a sweep now: a change of shard members may have handed
// this replica the keys of one that stopped owing events.
func (n *Notifier) Poke() {
	if n != nil {
		n.early.Wake()
	}
}

// NeedLeaderElection is true: under leader election the leader, which
// records the transitions, delivers their events; without it every replica
// runs, delivering its own share of the keys.
func (n *Notifier) NeedLeaderElection() bool { return true }

// Start runs the workers and the sweep until ctx ends.
func (n *Notifier) Start(ctx context.Context) error {
	queue := n.work()
	logger := log.FromContext(ctx).WithName("notifier")
	var wg sync.WaitGroup
	for range max(n.Workers, 1) {
		wg.Go(func() {
			for n.next(log.IntoContext(ctx, logger), queue) {
			}
		})
	}
	deferred := false
	for {
		next := n.Every
		// While every sink backs off, listing what they are owed is no use;
		// the sweep is owed, and runs once a sink may be tried again, so
		// that what it would have found (the keys of a replica that
		// stopped) is not left to the next period.
		if wait := n.sinks().wait(time.Now()); wait > 0 {
			if !deferred {
				logger.V(1).Info("Every sink backs off; the sweep waits until one may be tried", "after", wait)
			}
			deferred, next = true, min(wait, n.Every)
		} else {
			deferred = false
			if err := n.sweep(ctx); err != nil && ctx.Err() == nil {
				logger.Error(err, "Cannot sweep; retrying", "after", n.Every)
			}
		}
		if !n.early.Sleep(ctx, next) {
			queue.ShutDown()
			wg.Wait()
			return nil
		}
	}
}

// sweep queues the records, of the keys this replica owns, that still owe
// a sink an event.
func (n *Notifier) sweep(ctx context.Context) error {
	opts := []client.ListOption{client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("status.notificationsPending", "true")}}
	actions := func(l *v1alpha1.ToolActionList) []v1alpha1.ToolAction { return l.Items }
	return pager.Each(ctx, n.Reader, "the actions with undelivered notifications", actions, opts, func(action *v1alpha1.ToolAction) error {
		if key := client.ObjectKeyFromObject(action); n.Shards.Owns(key) {
			n.work().Add(key)
		}
		return nil
	})
}

func (n *Notifier) next(ctx context.Context, queue workqueue.TypedRateLimitingInterface[types.NamespacedName]) bool {
	key, shutdown := queue.Get()
	if shutdown {
		return false
	}
	defer queue.Done(key)
	// While every sink backs off, the action waits without a read.
	if wait := n.sinks().wait(time.Now()); wait > 0 {
		queue.AddAfter(key, wait)
		return true
	}
	err := n.deliver(ctx, key)
	switch {
	case err == nil:
		queue.Forget(key)
	case ctx.Err() == nil:
		log.FromContext(ctx).Info("Notifications not delivered yet; retrying", "namespace", key.Namespace, "key", key.Name,
			"retries", queue.NumRequeues(key), "error", err.Error())
		queue.AddRateLimited(key)
	}
	return true
}

// sinkBackoff spaces the attempts at a sink that did not acknowledge, from
// notifyRetryMin doubling to notifyRetryMax: while it backs off nothing is
// sent to it, and once the backoff ends one send probes it while the others
// wait for its answer. While every sink backs off, the actions that owe
// events wait without reading the API server, so that a sink down for an
// hour costs a probe every notifyRetryMax, not a read and a send per action.
type sinkBackoff struct {
	mu    sync.Mutex
	names []string
	// delays counts each sink's failures since its last acknowledgement
	// and gives its next backoff.
	delays  workqueue.TypedRateLimiter[string]
	until   map[string]time.Time
	probing map[string]bool
}

func newSinkBackoff(names []string) *sinkBackoff {
	return &sinkBackoff{names: names, until: map[string]time.Time{}, probing: map[string]bool{},
		delays: workqueue.NewTypedItemExponentialFailureRateLimiter[string](notifyRetryMin, notifyRetryMax)}
}

// take reports whether an event may be sent to sink at now; the first send
// after a backoff is the probe, and the caller must report its answer
// (failed or succeeded).
func (b *sinkBackoff) take(sink string, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.probing[sink] || now.Before(b.until[sink]) {
		return false
	}
	if b.delays.NumRequeues(sink) > 0 {
		b.probing[sink] = true
	}
	return true
}

// failed backs sink off once more.
func (b *sinkBackoff) failed(sink string, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.probing, sink)
	b.until[sink] = now.Add(b.delays.When(sink))
}

// succeeded ends sink's backoff.
func (b *sinkBackoff) succeeded(sink string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.probing, sink)
	delete(b.until, sink)
	b.delays.Forget(sink)
}

// wait is how long until some sink may be tried again: 0 when one may now.
func (b *sinkBackoff) wait(now time.Time) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	var soonest time.Duration
	for _, name := range b.names {
		left := b.until[name].Sub(now)
		if b.probing[name] {
			left = notifyRetryMin
		}
		if left <= 0 {
			return 0
		}
		if soonest == 0 || left < soonest {
			soonest = left
		}
	}
	return soonest
}

func (n *Notifier) sinks() *sinkBackoff {
	n.work()
	return n.backoff
}

// maxRefusals is how many times a sink may refuse an event (while it
// works) before the event is given up for it: a refusal may be passing (a
// sink that validates against something a deploy fixes), a repeated one is
// not.
const maxRefusals = 5

// Settled is what one pass over an action's owed events settled, by event
// id: the sinks owed it no more (acknowledged, or no longer configured),
// and those it was given up for.
type Settled struct {
	done map[string][]string
	dead map[string][]v1alpha1.NotificationDeadLetter
}

func newSettled() Settled {
	return Settled{done: map[string][]string{}, dead: map[string][]v1alpha1.NotificationDeadLetter{}}
}

func (s *Settled) any() bool { return len(s.done) > 0 || len(s.dead) > 0 }

func (s *Settled) giveUp(id, sink string, reason v1alpha1.DeadLetterReason, err error, at metav1.Time) {
	s.dead[id] = append(s.dead[id], v1alpha1.NotificationDeadLetter{Sink: sink, Reason: reason, Message: printable.Truncate(err.Error(), maxDeadLetterMessage), Time: at})
}

// Apply removes from their pending lists the sinks that acknowledged an
// event, or that it was given up for, and keeps the latter's dead letters;
// an event no sink is owed any more was delivered at now, if any sink
// acknowledged it.
func (s Settled) Apply(status *v1alpha1.ToolActionStatus, now metav1.Time) {
	for i := range status.Notifications {
		owed := &status.Notifications[i]
		acked, dead := s.done[owed.ID], s.dead[owed.ID]
		if len(owed.Pending) == 0 || len(acked)+len(dead) == 0 {
			continue
		}
		owed.Pending = slices.DeleteFunc(owed.Pending, func(name string) bool {
			return slices.Contains(acked, name) || slices.ContainsFunc(dead, func(d v1alpha1.NotificationDeadLetter) bool { return d.Sink == name })
		})
		for _, d := range dead {
			owed.DeadLetters = append(slices.DeleteFunc(owed.DeadLetters, func(old v1alpha1.NotificationDeadLetter) bool { return old.Sink == d.Sink }), d)
		}
		if len(owed.Pending) == 0 && len(acked) > 0 {
			owed.DeliveredTime = &now
		}
	}
	status.NotificationsPending = Pending(status)
}

// maxDeadLetterMessage is the longest message a dead letter keeps, as the
// CRD bounds it.
const maxDeadLetterMessage = 512

// deliver sends every event the action owes to each sink that has not
// acknowledged it, and records the acknowledgements and the events given
// up. An error means something is left to deliver (or to record), and the
// action is retried.
//
// A sink's failure (no answer, a 5xx, 408, 429, or an answer that says the
// sink is configured wrongly) backs the sink off, holding every event owed
// to it; a failure of the event alone never does: an event no request can
// carry is given up at once, one the sink refuses after maxRefusals tries,
// spaced by the action's own backoff.
func (n *Notifier) deliver(ctx context.Context, key types.NamespacedName) error {
	var action v1alpha1.ToolAction
	if err := n.Reader.Get(ctx, key, &action); err != nil {
		if apierrors.IsNotFound(err) {
			n.forgetRefusals(key)
		}
		return client.IgnoreNotFound(err)
	}
	if !Pending(&action.Status) {
		n.forgetRefusals(key)
		return nil
	}
	logger := log.FromContext(ctx).WithValues("namespace", key.Namespace, "key", key.Name)
	now := metav1.NewTime(n.Clock.Now())
	out := newSettled()
	var errs []error
	for _, owed := range action.Status.Notifications {
		if len(owed.Pending) == 0 {
			continue
		}
		delivery, err := encode(&action, owed)
		if err != nil {
			for _, name := range owed.Pending {
				logger.Error(err, "Notification dead-lettered: no request can carry it", "sink", name, "id", owed.ID)
				notificationsDelivered.WithLabelValues(name, "dead_lettered").Inc()
				out.giveUp(owed.ID, name, v1alpha1.DeadLetterMalformed, err, now)
			}
			continue
		}
		for _, name := range owed.Pending {
			sink, configured := n.byName[name]
			if !configured {
				// A sink removed from the configuration is owed nothing.
				logger.Info("Notification dropped: its sink is no longer configured", "sink", name, "id", owed.ID)
				notificationsDelivered.WithLabelValues(name, "dropped").Inc()
				out.done[owed.ID] = append(out.done[owed.ID], name)
				continue
			}
			if !n.sinks().take(name, time.Now()) {
				errs = append(errs, fmt.Errorf("sink %s backs off after failing to acknowledge", name))
				continue
			}
			err := n.Sender.Send(ctx, sink, delivery)
			switch {
			case err == nil:
				n.sinks().succeeded(name)
				n.forgetRefusal(key, owed.ID, name)
				notificationsDelivered.WithLabelValues(name, "delivered").Inc()
				notificationDelay.WithLabelValues(name).Observe(n.Clock.Since(owed.Time.Time).Seconds())
				out.done[owed.ID] = append(out.done[owed.ID], name)
			case errors.Is(err, ErrRefused):
				// The sink answered: it works, whatever it thinks of this event.
				n.sinks().succeeded(name)
				if n.refusedAgain(key, owed.ID, name) < maxRefusals {
					notificationsDelivered.WithLabelValues(name, "refused").Inc()
					errs = append(errs, err)
					continue
				}
				n.forgetRefusal(key, owed.ID, name)
				logger.Error(err, "Notification dead-lettered: the sink refused it every time", "sink", name, "id", owed.ID, "tries", maxRefusals)
				notificationsDelivered.WithLabelValues(name, "dead_lettered").Inc()
				out.giveUp(owed.ID, name, v1alpha1.DeadLetterRefused, err, now)
			default:
				n.sinks().failed(name, time.Now())
				notificationsDelivered.WithLabelValues(name, "failed").Inc()
				errs = append(errs, err)
			}
		}
	}
	if out.any() {
		errs = append(errs, n.Ledger.Acknowledge(ctx, &action, out))
	}
	return errors.Join(errs...)
}

// encode is the delivery of notification owed of action; an error means
// no request can carry it, for any sink.
func encode(action *v1alpha1.ToolAction, owed v1alpha1.Notification) (Delivery, error) {
	ev, err := Event(action, owed)
	if err != nil {
		return Delivery{}, err
	}
	return Encode(ev)
}

// refusedAgain counts one more refusal of event id by sink, and returns
// how many there were in a row. The counts live in this notifier: a
// replica that takes the key over counts afresh.
func (n *Notifier) refusedAgain(key types.NamespacedName, id, sink string) int {
	n.refusalsMu.Lock()
	defer n.refusalsMu.Unlock()
	if n.refusals[key] == nil {
		n.refusals[key] = map[string]int{}
	}
	n.refusals[key][id+"/"+sink]++
	return n.refusals[key][id+"/"+sink]
}

func (n *Notifier) forgetRefusal(key types.NamespacedName, id, sink string) {
	n.refusalsMu.Lock()
	defer n.refusalsMu.Unlock()
	delete(n.refusals[key], id+"/"+sink)
	if len(n.refusals[key]) == 0 {
		delete(n.refusals, key)
	}
}

// forgetRefusals forgets the counts of an action that owes nothing more.
func (n *Notifier) forgetRefusals(key types.NamespacedName) {
	n.refusalsMu.Lock()
	defer n.refusalsMu.Unlock()
	delete(n.refusals, key)
}

// Metrics are the notifier's collectors, which the manager registers.
func Metrics() []prometheus.Collector {
	return []prometheus.Collector{notificationsDelivered, notificationDelay}
}

var (
	notificationsDelivered = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolledger_notifications_total",
		Help: "CloudEvents sent to notification sinks, by sink and result: delivered (acknowledged), failed (the sink failed: retried once its backoff ends), refused (the sink refused this event alone: retried), dead_lettered (given up: no request can carry it, or the sink refused it every time), dropped (the sink is no longer configured).",
	}, []string{"sink", "result"})
	notificationDelay = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "toolledger_notification_delay_seconds",
		Help:    "Time from an action's transition to a sink's acknowledgement of its event.",
		Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600},
	}, []string{"sink"})
)
