package controllers

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/chainstate"
	"github.com/toolledger/toolledger/internal/keyhistory"
	"github.com/toolledger/toolledger/internal/notify"
	"github.com/toolledger/toolledger/internal/printable"
	"github.com/toolledger/toolledger/internal/retention"
)

// commit is the one path by which the ToolAction controller's transitions
// reach the ledger, the claim included: the Ledger writes them, and commit
// schedules what follows a finished action (its compensation link and its
// retention), so that no branch forgets one. tool may be nil when it was
// not resolved: what follows a finished action is then left to the caller
// (a revisit, or the retention sweep).
func (r *ToolActionReconciler) commit(ctx context.Context, current *v1alpha1.ToolAction, tool *v1alpha1.Tool, t transition) (ctrl.Result, error) {
	_, result, err := r.commitRecorded(ctx, current, tool, t)
	return result, err
}

// commitRecorded is commit that also returns the action as recorded: nil when the
// record moved on without the transition.
func (r *ToolActionReconciler) commitRecorded(ctx context.Context, current *v1alpha1.ToolAction, tool *v1alpha1.Tool, t transition) (*v1alpha1.ToolAction, ctrl.Result, error) {
	recorded, err := r.Ledger.record(ctx, current, tool, t)
	switch {
	case err != nil || recorded == nil:
		return nil, ctrl.Result{}, err
	case recorded != current && recorded.Status.Phase.IsTerminal() && tool != nil:
		// Just finished (current back means nothing was written): the
		// action leaves the cache, and what follows is scheduled here, by
		// the executor that finished it.
		result, err := r.finish(ctx, recorded, tool)
		return recorded, result, err
	}
	return recorded, ctrl.Result{RequeueAfter: t.requeueAfter}, t.retry
}

// Ledger is the one writer of ToolAction records, built once where the
// manager is wired and handed to everything that changes an action: the
// ToolAction controller (its claim included) and the approval and
// resolution controllers hand it a transition the rules made; the notifier
// hands it what its deliveries settled. It writes the status, counts the
// change, emits the events, and answers a lost race one way: nil, when a
// newer version of the record won; its watch event brings the action back.
type Ledger struct {
	// client writes to the API server; reader reads it directly.
	client client.Client
	reader client.Reader
	// recorder emits the events; routine decides which of the happy path's
	// Normal ones.
	recorder events.EventRecorder
	routine  *RoutineEvents
	clock    clock.PassiveClock
	// executor names this process in the history and the logs.
	executor string
	// tools finds an action's tool for the metrics' labels when the
	// writer was not given it.
	tools *Tools
	// handBack gives a finished action recorded outside the ToolAction
	// controller to that controller's queue, which schedules what follows
	// (the compensation link, retention); it reads the action afresh.
	handBack func(types.NamespacedName)
	// notifier delivers the events a transition owes; nil without sinks.
	notifier *notify.Notifier
	// trustCallerTrace has the events carry the caller's trace context.
	trustCallerTrace bool
	// chains has the archived chains' checkpoints the events carry; nil
	// without an archive.
	chains *chainstate.Store
	// retention gives a tool that sets none the archive's retentions, by
	// which a finished action's keptUntil is stated.
	retention retention.Defaults
}

// Decisions is what the controllers of people's decisions about an action
// (ToolResolutions, ToolApprovals) share: they read the decision and the
// action, have the Ledger record the decision on the action, and then mark
// the decision's own status.
type Decisions struct {
	Client    client.Client
	APIReader client.Reader
	Recorder  events.EventRecorder
	Clock     clock.PassiveClock
	// Ledger records the decision, like every other transition of an
	// action.
	Ledger *Ledger
}

// action reads, from the API server, the action a decision names; nil
// when there is none.
func (d Decisions) action(ctx context.Context, namespace, name string) (*v1alpha1.ToolAction, error) {
	var action v1alpha1.ToolAction
	err := d.APIReader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &action)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("cannot get ToolAction %s: %w", name, err)
	}
	return &action, nil
}

// LedgerOptions is what the Ledger writes with.
type LedgerOptions struct {
	// Client writes to the API server; Reader reads it directly.
	Client client.Client
	Reader client.Reader
	// Recorder emits the events of the transitions; RoutineEvents decides
	// which of the happy path's Normal ones (nil tells every one).
	Recorder      events.EventRecorder
	RoutineEvents *RoutineEvents
	Clock         clock.PassiveClock
	// Executor names this process in the history and the logs.
	Executor string
	// Tools finds an action's tool for the metrics' labels.
	Tools *Tools
	// HandBack gives a finished action recorded outside the ToolAction
	// controller (a decision, the last acknowledged event) to that
	// controller's queue, which schedules what follows.
	HandBack func(types.NamespacedName)
	// Notifier delivers the events a transition owes; nil without sinks.
	Notifier *notify.Notifier
	// TrustCallerTraceContext has the events carry the caller's trace
	// context.
	TrustCallerTraceContext bool
	// Chains has the archived chains' checkpoints the events carry; nil
	// without an archive.
	Chains *chainstate.Store
	// Retention gives a tool that sets none the archive's retentions.
	Retention retention.Defaults
}

// NewLedger builds the manager's one writer of ToolAction records.
func NewLedger(o LedgerOptions) *Ledger {
	return &Ledger{client: o.Client, reader: o.Reader, recorder: o.Recorder, routine: o.RoutineEvents,
		clock: o.Clock, executor: o.Executor, tools: o.Tools, handBack: o.HandBack, notifier: o.Notifier,
		trustCallerTrace: o.TrustCallerTraceContext, chains: o.Chains, retention: o.Retention}
}

// rules are the state machine's decisions, at the clock's time, made by
// this executor.
func (l *Ledger) rules() rules { return rulesAt(l.clock, l.executor) }

// rulesAt are the rules at c's time, made by executor, with random jitter.
func rulesAt(c clock.PassiveClock, executor string) rules {
	return rules{now: c.Now(), by: executor, random: rand.Float64}
}

// recordDecision records a transition decided outside the ToolAction controller
// (an approval, a resolution) and hands a finished action back to that
// controller. It returns nil when a newer version of the record won.
func (l *Ledger) recordDecision(ctx context.Context, current *v1alpha1.ToolAction, t transition) (*v1alpha1.ToolAction, error) {
	recorded, err := l.record(withActionLog(ctx, current, l.executor), current, nil, t)
	if err != nil || recorded == nil {
		return recorded, err
	}
	l.follow(recorded)
	return recorded, nil
}

// follow hands a finished action back to the ToolAction controller, which
// links its compensation and schedules its retention.
func (l *Ledger) follow(action *v1alpha1.ToolAction) {
	if action.Status.Phase.IsTerminal() {
		l.handBack(client.ObjectKeyFromObject(action))
	}
}

// raceRetry is how soon a decision whose action changed while it was
// recorded is reconciled again.
const raceRetry = 100 * time.Millisecond

// lostRace is what a controller answers when a newer version of the action
// won over the transition it decided: another replica recorded it, or the
// action changed meanwhile; the next reconcile reads which.
func lostRace(ctx context.Context, action string) ctrl.Result {
	log.FromContext(ctx).V(1).Info("Action changed while a decision was recorded; reconciling again", "action", action)
	return ctrl.Result{RequeueAfter: raceRetry}
}

// record writes the transition, counts it and emits its events. A
// transition that changes nothing writes and reports nothing, and current
// itself is returned. Otherwise it returns the action as recorded, or nil
// when the record moved on without it. tool may be nil.
func (l *Ledger) record(ctx context.Context, current *v1alpha1.ToolAction, tool *v1alpha1.Tool, t transition) (*v1alpha1.ToolAction, error) {
	t.apply = l.statingKeyWindows(ctx, t.apply, tool)
	next := l.applied(ctx, current, t)
	if statusEqual(current, next) {
		return current, nil
	}
	recorded, err := l.write(ctx, current, next, t)
	if err != nil || recorded == nil {
		return nil, err
	}
	if recorded.Status.NotificationsPending {
		l.notifier.Owed(client.ObjectKeyFromObject(recorded))
	}
	l.observe(ctx, current, recorded, tool, t.tally)
	// The budget bounds the load on the API server: real time, like the Pacer's.
	for _, e := range l.routine.tell(recorded.UID, t.events, time.Now()) {
		l.recorder.Eventf(recorded, e.related, e.eventType, e.reason, e.verb, "%s", printable.Truncate(e.message, maxEventNote))
	}
	if recorded.Status.Phase.IsTerminal() {
		l.routine.finished(recorded.UID)
	}
	return recorded, nil
}

// statingKeyWindows is apply, which then states the key windows it
// opened: the downstream's once the first attempt started, the ledger's
// once the action finished. The action's answers (the SDK's outcome, the
// gateways') read them from the record. An action answered by its key's
// earlier record states that record's window, which its transition copied.
func (l *Ledger) statingKeyWindows(ctx context.Context, apply func(*v1alpha1.ToolAction), tool *v1alpha1.Tool) func(*v1alpha1.ToolAction) {
	return func(a *v1alpha1.ToolAction) {
		wasStarted, wasFinished := a.Status.StartTime != nil, a.Status.Phase.IsTerminal()
		apply(a)
		status := &a.Status
		started := !wasStarted && status.StartTime != nil
		finished := !wasFinished && status.Phase.IsTerminal() && status.KeptUntil == nil && !keyhistory.AnsweredByEarlierRecord(a)
		if !started && !finished {
			return
		}
		if tool == nil {
			found, err := l.tools.find(ctx, a)
			if err != nil {
				log.FromContext(ctx).V(1).Info("No key window stated: the tool cannot be read", "error", err.Error())
				return
			}
			tool = found
		}
		if d := tool.Spec.DownstreamKeyRetention; started && d != nil {
			status.DownstreamKeptUntil = metaTimePtr(status.StartTime.Add(d.Duration))
		}
		if finished {
			status.KeptUntil = retention.KeptUntil(a, l.retention.Of(&tool.Spec))
		}
	}
}

// applied is base with the transition applied, and the event it owes the
// notification sinks recorded with it (in the same write, so that nothing
// is lost between the transition and the event's delivery).
func (l *Ledger) applied(ctx context.Context, base *v1alpha1.ToolAction, t transition) *v1alpha1.ToolAction {
	next := base.DeepCopy()
	t.apply(next)
	sinks := l.notifier.SinkNames()
	chainHead := ""
	if len(sinks) > 0 {
		chainHead = l.chainHead(ctx, next.Namespace)
	}
	notify.Owe(owedEvent(base.Status.Phase, next), next, sinks, l.clock.Now(), l.eventTraceparent(next), chainHead)
	return next
}

// chainHead is the newest checkpoint of namespace's archived chain,
// SEQUENCE:HASH, which its events carry; "" without an archive or one.
func (l *Ledger) chainHead(ctx context.Context, namespace string) string {
	if l.chains == nil {
		return ""
	}
	state, err := l.chains.Read(ctx, namespace)
	if err != nil {
		log.FromContext(ctx).Error(err, "The event goes without the chain's checkpoint")
		return ""
	}
	if c := state.Latest(); c != nil {
		return fmt.Sprintf("%d:%s", c.Sequence, c.Hash)
	}
	return ""
}

// eventTraceparent is the trace context the events of action carry: the
// caller's where the platform trusts it, none otherwise, so that no
// consumer continues a trace a tenant named.
func (l *Ledger) eventTraceparent(action *v1alpha1.ToolAction) string {
	if !l.trustCallerTrace {
		return ""
	}
	return callerTraceparent(action)
}

// write stores next. A transition with reapplyWhile survives changes made
// to the record meanwhile; any other conflict means a newer version exists,
// whose watch event brings the action back. It returns nil when the record
// moved on without this transition.
func (l *Ledger) write(ctx context.Context, current, next *v1alpha1.ToolAction, t transition) (*v1alpha1.ToolAction, error) {
	if t.reapplyWhile == nil {
		written, err := l.updateStatus(ctx, next, nil)
		if apierrors.IsConflict(err) && t.race != "" {
			claimConflicts.WithLabelValues(t.race).Inc()
			log.FromContext(ctx).V(1).Info("Transition lost to a newer version", "race", t.race, "attempt", next.Status.Attempts)
		}
		if err != nil {
			return nil, ignoreConflict(err, "cannot record the transition of %s to %s", current.Name, next.Status.Phase)
		}
		return written, nil
	}
	written, err := l.updateStatus(ctx, next, func(latest *v1alpha1.ToolAction) *v1alpha1.ToolAction {
		if !t.reapplyWhile(latest) {
			return nil
		}
		return l.applied(ctx, latest, t)
	})
	if err != nil {
		// A claimed attempt that cannot record its outcome ends with its
		// lease: the action then becomes Unknown.
		return nil, fmt.Errorf("cannot record the transition of %s/%s (attempt %d): %w", current.Namespace, current.Name, current.Status.Attempts, err)
	}
	if written == nil {
		log.FromContext(ctx).V(1).Info("Transition not reapplied: the record changed and no longer takes it", "phase", current.Status.Phase)
	}
	return written, nil
}

// Acknowledge records what the notifier's deliveries settled on action. A
// transition recorded meanwhile is read and the same applied to it, so
// that nothing is delivered again; a finished action that owes nothing
// more is handed back, as its retention waited for its events.
func (l *Ledger) Acknowledge(ctx context.Context, action *v1alpha1.ToolAction, settled notify.Settled) error {
	settle := func(current *v1alpha1.ToolAction) *v1alpha1.ToolAction {
		next := current.DeepCopy()
		settled.Apply(&next.Status, metav1.NewTime(l.clock.Now()))
		if statusEqual(current, next) {
			return nil
		}
		return next
	}
	next := settle(action)
	if next == nil {
		return nil
	}
	written, err := l.updateStatus(ctx, next, settle)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("cannot record the delivered notifications: %w", err)
	}
	if written != nil && !written.Status.NotificationsPending {
		l.follow(written)
	}
	return nil
}

// updateStatus is the one write of a ToolAction's status. Without rebase a
// conflict is returned; with it, the record is read again and what rebase
// makes of it written, until a write lands, rebase returns nil (the record
// no longer takes the change) or the retries run out. It returns what was
// written, or nil.
func (l *Ledger) updateStatus(ctx context.Context, next *v1alpha1.ToolAction, rebase func(latest *v1alpha1.ToolAction) *v1alpha1.ToolAction) (*v1alpha1.ToolAction, error) {
	key := client.ObjectKeyFromObject(next)
	rebases := func(err error) bool { return rebase != nil && apierrors.IsConflict(err) }
	err := retry.OnError(retry.DefaultRetry, rebases, func() error {
		err := l.client.Status().Update(ctx, next)
		if !rebases(err) {
			return err
		}
		latest := &v1alpha1.ToolAction{}
		if getErr := l.reader.Get(ctx, key, latest); getErr != nil {
			return getErr
		}
		if next = rebase(latest); next == nil {
			return nil
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return next, nil
}

// holdsBack reports whether the record must stay until its events are
// delivered: it owes one to a configured sink.
func (l *Ledger) holdsBack(action *v1alpha1.ToolAction) bool {
	return l.notifier.Owes(action)
}

// finish does what follows a finished action: a succeeded compensation is
// linked to its original, and the tool's retentions are applied (expire;
// requeued until one is due). Without a tool there is no retention to apply.
func (r *ToolActionReconciler) finish(ctx context.Context, action *v1alpha1.ToolAction, tool *v1alpha1.Tool) (ctrl.Result, error) {
	if action.Status.Phase == v1alpha1.PhaseSucceeded {
		if err := r.linkCompensation(ctx, action); err != nil {
			return ctrl.Result{}, err
		}
	}
	if tool == nil {
		return ctrl.Result{}, nil
	}
	return r.expire(ctx, action, tool)
}
