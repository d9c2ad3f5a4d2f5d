package controllers

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/keyhistory"
	"github.com/toolledger/toolledger/internal/notify"
	"github.com/toolledger/toolledger/pkg/adapter"
)

// The decision tables below drive the state machine's rules with a fixed
// clock and no jitter, without an API server. Row names quote the failure
// table of docs/guarantees.md where a row stands for one of its faults.

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func atT0() rules {
	return rules{now: t0, by: "executor-a", random: func() float64 { return 0 }}
}

type actionOption func(*v1alpha1.ToolAction)

func newAction(phase v1alpha1.Phase, opts ...actionOption) *v1alpha1.ToolAction {
	a := &v1alpha1.ToolAction{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "order-1001-charge", Generation: 1},
		Spec:       v1alpha1.ToolActionSpec{ToolRef: v1alpha1.ToolReference{Name: "charge"}},
	}
	a.Status.Phase = phase
	if phase != "" {
		a.Status.Attempts = 1
		a.Status.IdempotencyKey = v1alpha1.IdempotencyKey(a.Namespace, a.Name)
	}
	for _, o := range opts {
		o(a)
	}
	return a
}

func attempts(n int32) actionOption { return func(a *v1alpha1.ToolAction) { a.Status.Attempts = n } }

func deleting(a *v1alpha1.ToolAction) {
	ts := metav1.NewTime(t0.Add(-time.Minute))
	a.DeletionTimestamp = &ts
}

func completedAgo(d time.Duration) actionOption {
	return func(a *v1alpha1.ToolAction) { a.Status.CompletionTime = metaTimePtr(t0.Add(-d)) }
}

// downstreamWindow is a tool of class whose downstream keeps keys for d.
func downstreamWindow(class v1alpha1.IdempotencyClass, d time.Duration, caps ...func(*adapter.Capabilities)) *resolvedTool {
	tool := withTool(class, caps...)
	tool.tool.Spec.DownstreamKeyRetention = &metav1.Duration{Duration: d}
	return tool
}

func startedAgo(d time.Duration) actionOption {
	return func(a *v1alpha1.ToolAction) { a.Status.StartTime = metaTimePtr(t0.Add(-d)) }
}

// keyRetention is a KeyProtected tool that keeps keys for d.
func keyRetention(d time.Duration) *resolvedTool {
	tool := withTool(v1alpha1.KeyProtected)
	tool.tool.Spec.KeyRetention = &metav1.Duration{Duration: d}
	return tool
}

func nextAttemptIn(d time.Duration) actionOption {
	return func(a *v1alpha1.ToolAction) { a.Status.NextAttemptTime = metaTimePtr(t0.Add(d)) }
}

func unknownSince(d time.Duration) actionOption {
	return func(a *v1alpha1.ToolAction) { a.Status.UnknownSince = metaTimePtr(t0.Add(-d)) }
}

func claimedBy(executor string, leaseLeft time.Duration) actionOption {
	return func(a *v1alpha1.ToolAction) {
		a.Status.Claim = &v1alpha1.ExecutorClaim{Executor: executor, Attempt: a.Status.Attempts, LeaseExpiry: metaTime(t0.Add(leaseLeft))}
	}
}

func wasUnknown(a *v1alpha1.ToolAction) {
	a.Status.History = append(a.Status.History, v1alpha1.Transition{From: v1alpha1.PhaseExecuting, To: v1alpha1.PhaseUnknown})
}

// provedAbsent: a lookup proved the key absent and the next attempt was claimed.
func provedAbsent(a *v1alpha1.ToolAction) {
	a.Status.History = append(a.Status.History, v1alpha1.Transition{From: v1alpha1.PhaseUnknown, To: v1alpha1.PhaseExecuting, Reason: ReasonAbsentByLookup})
}

// failedRetryably: an attempt definitely did not apply and the next was claimed.
func failedRetryably(a *v1alpha1.ToolAction) {
	a.Status.History = append(a.Status.History,
		v1alpha1.Transition{From: v1alpha1.PhaseExecuting, To: v1alpha1.PhaseRetryScheduled, Reason: ReasonRetryScheduled},
		v1alpha1.Transition{From: v1alpha1.PhaseRetryScheduled, To: v1alpha1.PhaseExecuting, Reason: ReasonExecuting})
}

// resolvedRetrySafe: a resolver found the unknown attempt did not apply.
func resolvedRetrySafe(a *v1alpha1.ToolAction) {
	a.Status.History = append(a.Status.History, v1alpha1.Transition{From: v1alpha1.PhaseEscalated, To: v1alpha1.PhaseRetryScheduled, Reason: ReasonResolved})
}

// historyDropped: older transitions fell off the bounded history.
func historyDropped(a *v1alpha1.ToolAction) { a.Status.DroppedTransitions = 4 }

// withTool is a resolved tool of the class: at most 3 attempts, 1s initial
// backoff, a 10-minute unknown deadline, and an adapter with a lookup and a
// 5s attempt timeout unless caps says otherwise.
func withTool(class v1alpha1.IdempotencyClass, caps ...func(*adapter.Capabilities)) *resolvedTool {
	tool := &v1alpha1.Tool{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "charge"},
		Spec: v1alpha1.ToolSpec{
			Operation: "payments.charge", Version: "v1", IdempotencyClass: class,
			Retry: v1alpha1.RetryPolicy{MaxAttempts: 3, InitialBackoff: &metav1.Duration{Duration: time.Second},
				MaxBackoff: &metav1.Duration{Duration: time.Minute}},
			UnknownOutcomeDeadline: &metav1.Duration{Duration: 10 * time.Minute},
		},
	}
	resolved := &resolvedTool{tool: tool, caps: adapter.Capabilities{Lookup: true, AttemptTimeout: 5 * time.Second, MaxKeyLength: 255}}
	for _, c := range caps {
		c(&resolved.caps)
	}
	return resolved
}

func noLookup(c *adapter.Capabilities) { c.Lookup = false }

// result is what a step amounts to, flattened for comparison: its kind and
// timing, and for a recorded transition the status it leaves and the
// events it reports.
type result struct {
	Kind        string
	After       time.Duration
	Reason      string
	Phase       v1alpha1.Phase
	Class       v1alpha1.ErrorClass
	ErrorReason string
	NextAttempt time.Duration
	ExternalRef string
	Replayed    bool
	Events      []string
	Requeue     time.Duration
	Reapplies   bool
	// Owes is the CloudEvent type the transition owes the sinks.
	Owes string
}

var kindNames = map[stepKind]string{
	stepWait: "wait", stepResolveTool: "resolveTool", stepFail: "fail", stepRelease: "release", stepBury: "bury",
	stepRecord: "record", stepFinish: "finish", stepLookup: "lookup", stepAttempt: "attempt",
}

func summarize(a *v1alpha1.ToolAction, s step) result {
	r := result{Kind: kindNames[s.kind], After: s.after, Reason: s.reason}
	if s.kind == stepRecord {
		r = summarizeTransition(a, s.record)
		r.Kind = "record"
	}
	return r
}

func summarizeTransition(a *v1alpha1.ToolAction, t transition) result {
	next := a.DeepCopy()
	t.apply(next)
	r := result{Phase: next.Status.Phase, ExternalRef: next.Status.ExternalRef, Replayed: next.Status.ReplayedByDownstream,
		Requeue: t.requeueAfter, Reapplies: t.reapplyWhile != nil, Owes: owedEvent(a.Status.Phase, next)}
	if e := next.Status.Error; e != nil {
		r.Class, r.ErrorReason = e.Class, e.Reason
	}
	if n := next.Status.NextAttemptTime; n != nil {
		r.NextAttempt = n.Sub(t0)
	}
	for _, e := range t.events {
		name := e.eventType + "/" + e.reason
		if e.routine {
			name += " (routine)"
		}
		r.Events = append(r.Events, name)
	}
	return r
}

func TestDecide(t *testing.T) {
	keyProtected := withTool(v1alpha1.KeyProtected)
	invalid := &resolvedTool{err: &invalidError{class: v1alpha1.ErrorClassInvalidInput, reason: ReasonToolNotFound, message: `tool "charge" not found`}}
	transient := &resolvedTool{err: errors.New("connection refused")}
	escalated := result{Kind: "record", Phase: v1alpha1.PhaseEscalated, Owes: notify.TypeEscalated, Class: v1alpha1.ErrorClassOutcomeUnknown,
		ErrorReason: ReasonOutcomeUnknown, Events: []string{"Warning/Escalated"}}
	redispatch := result{Kind: "attempt", Reason: ReasonRedispatch}
	tests := []struct {
		name   string
		action *v1alpha1.ToolAction
		tool   *resolvedTool
		want   result
	}{
		{"new action: the tool is resolved first", newAction(""), nil, result{Kind: "resolveTool"}},
		{"new action: first attempt", newAction(""), keyProtected, result{Kind: "attempt", Reason: ReasonExecuting}},
		{"new action: tool missing fails before dispatch", newAction(""), invalid, result{Kind: "record",
			Phase: v1alpha1.PhaseFailed, Owes: notify.TypeFailed, Class: v1alpha1.ErrorClassInvalidInput, ErrorReason: ReasonToolNotFound, Events: []string{"Warning/ToolNotFound"}}},
		{"new action: tool unreadable is retried", newAction(""), transient, result{Kind: "fail"}},
		{"retry scheduled after an unknown outcome, its tool gone: escalated, never failed (the unseen attempt may apply)",
			newAction(v1alpha1.PhaseRetryScheduled, attempts(2), wasUnknown, provedAbsent, failedRetryably), invalid, result{Kind: "record",
				Phase: v1alpha1.PhaseEscalated, Owes: notify.TypeEscalated, Class: v1alpha1.ErrorClassOutcomeUnknown, ErrorReason: ReasonToolNotFound, Events: []string{"Warning/Escalated"}}},
		{"retry scheduled after definite refusals only, its tool gone: failed",
			newAction(v1alpha1.PhaseRetryScheduled, attempts(2), failedRetryably), invalid, result{Kind: "record",
				Phase: v1alpha1.PhaseFailed, Owes: notify.TypeFailed, Class: v1alpha1.ErrorClassInvalidInput, ErrorReason: ReasonToolNotFound, Events: []string{"Warning/ToolNotFound"}}},
		{"new action: a key longer than the adapter sends fails before dispatch", newAction(""),
			withTool(v1alpha1.KeyProtected, func(c *adapter.Capabilities) { c.MaxKeyLength = 10 }), result{Kind: "record",
				Phase: v1alpha1.PhaseFailed, Owes: notify.TypeFailed, Class: v1alpha1.ErrorClassInvalidInput, ErrorReason: ReasonKeyTooLong, Events: []string{"Warning/KeyTooLong"}}},
		{"accepted action deleted: released", newAction(v1alpha1.PhaseAccepted, deleting), nil, result{Kind: "release"}},
		{"succeeded action answered by a tombstone, deleted: released", newAction(v1alpha1.PhaseSucceeded, deleting, attempts(0)), nil, result{Kind: "release"}},
		{"dispatched action deleted: the tool is resolved for its key retention", newAction(v1alpha1.PhaseSucceeded, deleting, attempts(1), completedAgo(time.Hour)), nil,
			result{Kind: "resolveTool"}},
		{"dispatched action deleted: a tombstone, then released", newAction(v1alpha1.PhaseSucceeded, deleting, attempts(1), completedAgo(time.Hour)), keyProtected,
			result{Kind: "bury"}},
		{"failed after a dispatch, deleted: a tombstone", newAction(v1alpha1.PhaseFailed, deleting, attempts(3), completedAgo(time.Hour)), keyProtected,
			result{Kind: "bury"}},
		{"dispatched action deleted, its tool gone: a tombstone all the same", newAction(v1alpha1.PhaseSucceeded, deleting, attempts(1), completedAgo(time.Hour)), invalid,
			result{Kind: "bury"}},
		{"dispatched action deleted, its tool unreadable: retried", newAction(v1alpha1.PhaseSucceeded, deleting, attempts(1), completedAgo(time.Hour)), transient,
			result{Kind: "fail"}},
		{"dispatched action deleted after its key retention: released without a tombstone",
			newAction(v1alpha1.PhaseSucceeded, deleting, attempts(1), completedAgo(2*time.Hour)), keyRetention(time.Hour), result{Kind: "release"}},
		{"retry scheduled (nothing applied), deleted: released", newAction(v1alpha1.PhaseRetryScheduled, deleting, attempts(1)), nil, result{Kind: "release"}},
		{"executing action deleted: its claim is waited out", newAction(v1alpha1.PhaseExecuting, deleting, claimedBy("executor-b", 20*time.Second)), nil,
			result{Kind: "wait", After: 20 * time.Second}},
		{"unknown action deleted: looked up, not released", newAction(v1alpha1.PhaseUnknown, deleting), keyProtected, result{Kind: "lookup"}},
		{"escalated: waits for a human", newAction(v1alpha1.PhaseEscalated), nil, result{Kind: "wait"}},
		{"same key, N concurrent callers: a live claim is not attempted again", newAction(v1alpha1.PhaseExecuting, claimedBy("executor-b", 30*time.Second)), nil,
			result{Kind: "wait", After: 30 * time.Second}},
		{"executor crashes before or after dispatch: the lapsed claim is Unknown, looked up at once",
			newAction(v1alpha1.PhaseExecuting, claimedBy("executor-b", -time.Second)), nil, result{Kind: "record",
				Phase: v1alpha1.PhaseUnknown, Class: v1alpha1.ErrorClassOutcomeUnknown, ErrorReason: ReasonLeaseExpired, Events: []string{"Warning/LeaseExpired"}}},
		{"retry scheduled: waits for its time", newAction(v1alpha1.PhaseRetryScheduled, nextAttemptIn(5*time.Second)), nil, result{Kind: "wait", After: 5 * time.Second}},
		{"retry due (also after an API server restart): attempted", newAction(v1alpha1.PhaseRetryScheduled, nextAttemptIn(-time.Second)), keyProtected,
			result{Kind: "attempt", Reason: ReasonExecuting}},
		{"succeeded: the tool is resolved for retention", newAction(v1alpha1.PhaseSucceeded), nil, result{Kind: "resolveTool"}},
		{"succeeded: finished", newAction(v1alpha1.PhaseSucceeded), keyProtected, result{Kind: "finish"}},
		{"failed without its tool: finished (links, no retention to apply)", newAction(v1alpha1.PhaseFailed), invalid, result{Kind: "finish"}},
		{"succeeded, tool unreadable: retried", newAction(v1alpha1.PhaseSucceeded), transient, result{Kind: "fail"}},
		{"retry due, but the key is now longer than the adapter sends: escalated, an attempt may have applied",
			newAction(v1alpha1.PhaseRetryScheduled, nextAttemptIn(-time.Second)), withTool(v1alpha1.KeyProtected, func(c *adapter.Capabilities) { c.MaxKeyLength = 10 }),
			result{Kind: "record", Phase: v1alpha1.PhaseEscalated, Owes: notify.TypeEscalated, Class: v1alpha1.ErrorClassOutcomeUnknown, ErrorReason: ReasonKeyTooLong, Events: []string{"Warning/Escalated"}}},
		{"unknown without its tool: escalated, nothing can look it up", newAction(v1alpha1.PhaseUnknown), invalid, result{Kind: "record",
			Phase: v1alpha1.PhaseEscalated, Owes: notify.TypeEscalated, Class: v1alpha1.ErrorClassOutcomeUnknown, ErrorReason: ReasonToolNotFound, Events: []string{"Warning/Escalated"}}},
		{"unknown, lookup not yet due: waits", newAction(v1alpha1.PhaseUnknown, nextAttemptIn(4*time.Second)), keyProtected, result{Kind: "wait", After: 4 * time.Second}},
	}
	for _, class := range []v1alpha1.IdempotencyClass{v1alpha1.ReadOnly, v1alpha1.NaturallyIdempotent, v1alpha1.KeyProtected, v1alpha1.Compensatable} {
		tests = append(tests, struct {
			name   string
			action *v1alpha1.ToolAction
			tool   *resolvedTool
			want   result
		}{"response lost after success, " + string(class) + " with a lookup: looked up", newAction(v1alpha1.PhaseUnknown), withTool(class), result{Kind: "lookup"}})
	}
	for _, class := range []v1alpha1.IdempotencyClass{v1alpha1.ReadOnly, v1alpha1.NaturallyIdempotent, v1alpha1.KeyProtected} {
		tests = append(tests, []struct {
			name   string
			action *v1alpha1.ToolAction
			tool   *resolvedTool
			want   result
		}{
			{"unknown, " + string(class) + " without a lookup: re-sent under the same key", newAction(v1alpha1.PhaseUnknown), withTool(class, noLookup), redispatch},
			{"unknown, " + string(class) + " without a lookup, attempts spent: escalated", newAction(v1alpha1.PhaseUnknown, attempts(3)), withTool(class, noLookup), escalated},
			{"unknown, " + string(class) + " without a lookup, deleting: escalated", newAction(v1alpha1.PhaseUnknown, deleting), withTool(class, noLookup), escalated},
		}...)
	}
	tests = append(tests, []struct {
		name   string
		action *v1alpha1.ToolAction
		tool   *resolvedTool
		want   result
	}{
		{"unknown, Compensatable without a lookup: escalated, never blind-repeated", newAction(v1alpha1.PhaseUnknown), withTool(v1alpha1.Compensatable, noLookup), escalated},
		{"unknown, NonRepeatable with a lookup: escalated at once", newAction(v1alpha1.PhaseUnknown, nextAttemptIn(time.Minute)), withTool(v1alpha1.NonRepeatable), escalated},
		{"unknown, NonRepeatable without a lookup: escalated at once", newAction(v1alpha1.PhaseUnknown), withTool(v1alpha1.NonRepeatable, noLookup), escalated},
	}...)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, summarize(tt.action, atT0().decide(tt.action, tt.tool))); diff != "" {
				t.Errorf("decide (-want +got):\n%s", diff)
			}
		})
	}
}

// A downstream that keeps its idempotency keys for a while (Stripe: 24h)
// deduplicates a re-send only within it: after, an attempt whose outcome
// is unknown is looked up, or goes to a human, never re-sent.
func TestDecideAfterTheDownstreamsKeyWindow(t *testing.T) {
	window := func(d time.Duration, caps ...func(*adapter.Capabilities)) *resolvedTool {
		return downstreamWindow(v1alpha1.KeyProtected, d, caps...)
	}
	stated := func(d time.Duration) actionOption {
		return func(a *v1alpha1.ToolAction) { a.Status.DownstreamKeptUntil = metaTimePtr(t0.Add(d)) }
	}
	wentUnknown := func(a *v1alpha1.ToolAction) {
		a.Status.History = []v1alpha1.Transition{{From: v1alpha1.PhaseExecuting, To: v1alpha1.PhaseUnknown, Reason: ReasonLeaseExpired}}
	}
	expired := result{Kind: "record", Phase: v1alpha1.PhaseEscalated, Owes: notify.TypeEscalated, Class: v1alpha1.ErrorClassOutcomeUnknown,
		ErrorReason: ReasonDownstreamKeyExpired, Events: []string{"Warning/Escalated"}}
	tests := []struct {
		name   string
		action *v1alpha1.ToolAction
		tool   *resolvedTool
		want   result
	}{
		{"unknown, no lookup, within the window: re-sent under the key", newAction(v1alpha1.PhaseUnknown, startedAgo(time.Hour)),
			window(24*time.Hour, noLookup), result{Kind: "attempt", Reason: ReasonRedispatch}},
		{"unknown, no lookup, after the window: escalated, never re-sent", newAction(v1alpha1.PhaseUnknown, startedAgo(25*time.Hour)),
			window(24*time.Hour, noLookup), expired},
		{"unknown, with a lookup, after the window: looked up", newAction(v1alpha1.PhaseUnknown, startedAgo(25*time.Hour)),
			window(24 * time.Hour), result{Kind: "lookup"}},
		{"a retry after an unknown outcome, after the window: escalated", newAction(v1alpha1.PhaseRetryScheduled, startedAgo(25*time.Hour), nextAttemptIn(-time.Second), wentUnknown),
			window(24*time.Hour, noLookup), expired},
		{"a retry of an attempt that definitely failed, after the window: attempted", newAction(v1alpha1.PhaseRetryScheduled, startedAgo(25*time.Hour), nextAttemptIn(-time.Second)),
			window(24*time.Hour, noLookup), result{Kind: "attempt", Reason: ReasonExecuting}},
		{"no window declared: re-sent under the key", newAction(v1alpha1.PhaseUnknown, startedAgo(25*time.Hour)),
			withTool(v1alpha1.KeyProtected, noLookup), result{Kind: "attempt", Reason: ReasonRedispatch}},
		{"ReadOnly after the window: re-sent, a repeat is harmless", newAction(v1alpha1.PhaseUnknown, startedAgo(25*time.Hour)),
			downstreamWindow(v1alpha1.ReadOnly, 24*time.Hour, noLookup), result{Kind: "attempt", Reason: ReasonRedispatch}},
		{"the stated window passed though the tool now declares a longer one: escalated", newAction(v1alpha1.PhaseUnknown, startedAgo(25*time.Hour), stated(-time.Hour)),
			window(48*time.Hour, noLookup), expired},
		{"the stated window passed and the tool declares none now: escalated", newAction(v1alpha1.PhaseUnknown, startedAgo(25*time.Hour), stated(-time.Hour)),
			withTool(v1alpha1.KeyProtected, noLookup), expired},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, summarize(tt.action, atT0().decide(tt.action, tt.tool))); diff != "" {
				t.Errorf("decide (-want +got):\n%s", diff)
			}
		})
	}
}

// With an archive every finished record is archived before it leaves etcd,
// whatever its key: the history keeps what the key check would not need.
func TestDecideDeletedWithAnArchive(t *testing.T) {
	archiving := atT0()
	archiving.keepsEveryRecord = true
	invalid := &resolvedTool{err: &invalidError{class: v1alpha1.ErrorClassInvalidInput, reason: ReasonToolNotFound, message: `tool "charge" not found`}}
	tests := []struct {
		name   string
		action *v1alpha1.ToolAction
		tool   *resolvedTool
		want   result
	}{
		{"accepted action deleted: released, nothing finished to keep", newAction(v1alpha1.PhaseAccepted, deleting), nil, result{Kind: "release"}},
		{"answered from the archive (never dispatched), deleted: archived too", newAction(v1alpha1.PhaseSucceeded, deleting, attempts(0)), nil,
			result{Kind: "resolveTool"}},
		{"dispatched action deleted: archived, then released", newAction(v1alpha1.PhaseSucceeded, deleting, attempts(1), completedAgo(time.Hour)),
			withTool(v1alpha1.KeyProtected), result{Kind: "bury"}},
		{"dispatched action deleted after its key retention: archived all the same",
			newAction(v1alpha1.PhaseSucceeded, deleting, attempts(1), completedAgo(2*time.Hour)), keyRetention(time.Hour), result{Kind: "bury"}},
		{"its tool is gone: archived", newAction(v1alpha1.PhaseFailed, deleting, attempts(0)), invalid, result{Kind: "bury"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, summarize(tt.action, archiving.decide(tt.action, tt.tool))); diff != "" {
				t.Errorf("decide (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAfterDispatch(t *testing.T) {
	tool := withTool(v1alpha1.KeyProtected)
	executing := func(n int32, opts ...actionOption) *v1alpha1.ToolAction {
		return newAction(v1alpha1.PhaseExecuting, append([]actionOption{attempts(n), claimedBy("executor-a", time.Minute)}, opts...)...)
	}
	tests := []struct {
		name    string
		claimed *v1alpha1.ToolAction
		outcome adapter.Outcome
		err     error
		want    result
	}{
		{"applied", executing(1), adapter.Outcome{ExternalRef: "ch_1"}, nil, result{Phase: v1alpha1.PhaseSucceeded, Owes: notify.TypeSucceeded, ExternalRef: "ch_1",
			Events: []string{"Normal/Succeeded (routine)"}, Reapplies: true}},
		{"applied with an incomplete response", executing(1), adapter.Outcome{Warnings: []string{"no /id in the response"}}, nil, result{Phase: v1alpha1.PhaseSucceeded, Owes: notify.TypeSucceeded,
			Events: []string{"Normal/Succeeded (routine)", "Warning/IncompleteResponse"}, Reapplies: true}},
		{"applied and replayed", executing(2), adapter.Outcome{ExternalRef: "ch_1", Replayed: true}, nil, result{Phase: v1alpha1.PhaseSucceeded, Owes: notify.TypeSucceeded, ExternalRef: "ch_1",
			Replayed: true, Events: []string{"Normal/Succeeded (routine)", "Normal/ReplayedByDownstream"}, Reapplies: true}},
		{"applied with an external reference longer than the API accepts: not stored, with a warning", executing(1),
			adapter.Outcome{ExternalRef: strings.Repeat("r", 600)}, nil, result{Phase: v1alpha1.PhaseSucceeded, Owes: notify.TypeSucceeded,
				Events: []string{"Normal/Succeeded (routine)", "Warning/IncompleteResponse"}, Reapplies: true}},
		{"invalid input", executing(1), adapter.Outcome{}, &adapter.PermanentError{Kind: adapter.InvalidInput, Reason: "HTTP400", Err: errors.New("bad amount")},
			result{Phase: v1alpha1.PhaseFailed, Owes: notify.TypeFailed, Class: v1alpha1.ErrorClassInvalidInput, ErrorReason: "HTTP400", Events: []string{"Warning/HTTP400"}, Reapplies: true}},
		{"denied", executing(1), adapter.Outcome{}, &adapter.PermanentError{Kind: adapter.Denied, Reason: "HTTP403", Err: errors.New("forbidden")},
			result{Phase: v1alpha1.PhaseFailed, Owes: notify.TypeFailed, Class: v1alpha1.ErrorClassDenied, ErrorReason: "HTTP403", Events: []string{"Warning/HTTP403"}, Reapplies: true}},
		{"definitely not applied: retried with backoff", executing(2), adapter.Outcome{}, &adapter.RetryableError{Reason: "HTTP503", Err: errors.New("busy")},
			result{Phase: v1alpha1.PhaseRetryScheduled, Class: v1alpha1.ErrorClassProviderUnavailable, ErrorReason: "HTTP503", NextAttempt: 2 * time.Second,
				Requeue: 2 * time.Second, Events: []string{"Warning/HTTP503"}, Reapplies: true}},
		{"429 with Retry-After: retried no sooner", executing(1), adapter.Outcome{}, &adapter.RetryableError{Reason: "HTTP429", RetryAfter: 30 * time.Second, Err: errors.New("slow down")},
			result{Phase: v1alpha1.PhaseRetryScheduled, Class: v1alpha1.ErrorClassProviderUnavailable, ErrorReason: "HTTP429", NextAttempt: 30 * time.Second,
				Requeue: 30 * time.Second, Events: []string{"Warning/HTTP429"}, Reapplies: true}},
		{"retries spent", executing(3), adapter.Outcome{}, &adapter.RetryableError{Reason: "HTTP503", Err: errors.New("busy")},
			result{Phase: v1alpha1.PhaseFailed, Owes: notify.TypeFailed, Class: v1alpha1.ErrorClassRetriesExhausted, ErrorReason: "HTTP503", Events: []string{"Warning/HTTP503"}, Reapplies: true}},
		{"retries spent after a resolver found the unknown outcome safe to retry: failed", executing(3, wasUnknown, resolvedRetrySafe, failedRetryably),
			adapter.Outcome{}, &adapter.RetryableError{Reason: "HTTP503", Err: errors.New("busy")},
			result{Phase: v1alpha1.PhaseFailed, Owes: notify.TypeFailed, Class: v1alpha1.ErrorClassRetriesExhausted, ErrorReason: "HTTP503", Events: []string{"Warning/HTTP503"}, Reapplies: true}},
		{"the claim's lease spent before the send: not sent, retried", executing(1), adapter.Outcome{},
			&adapter.RetryableError{Reason: ReasonLeaseSpent, Err: errors.New("not sent")},
			result{Phase: v1alpha1.PhaseRetryScheduled, Class: v1alpha1.ErrorClassProviderUnavailable, ErrorReason: ReasonLeaseSpent, NextAttempt: time.Second,
				Requeue: time.Second, Events: []string{"Warning/" + ReasonLeaseSpent}, Reapplies: true}},
		{"response lost after success: Unknown, first lookup after one attempt timeout", executing(1), adapter.Outcome{},
			&adapter.AmbiguousError{Reason: "Timeout", Err: errors.New("no answer")}, result{Phase: v1alpha1.PhaseUnknown, Class: v1alpha1.ErrorClassOutcomeUnknown,
				ErrorReason: "Timeout", NextAttempt: 5 * time.Second, Requeue: 5 * time.Second, Events: []string{"Warning/Timeout"}, Reapplies: true}},
		{"an error the adapter did not classify is unknown", executing(1), adapter.Outcome{}, errors.New("surprise"),
			result{Phase: v1alpha1.PhaseUnknown, Class: v1alpha1.ErrorClassOutcomeUnknown, ErrorReason: ReasonUnclassifiedError, NextAttempt: 5 * time.Second,
				Requeue: 5 * time.Second, Events: []string{"Warning/UnclassifiedError"}, Reapplies: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := summarizeTransition(tt.claimed, atT0().afterDispatch(tt.claimed, tool, tt.outcome, tt.err))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("afterDispatch (-want +got):\n%s", diff)
			}
		})
	}
}

// A denial of an action asked again after its target changed, with an
// earlier attempt's outcome unseen, escalates it: that attempt may apply.
func TestDeniedAfterAnUnseenAttemptIsEscalated(t *testing.T) {
	denial := &v1alpha1.ToolApproval{ObjectMeta: metav1.ObjectMeta{Name: "deny-1"}, Spec: v1alpha1.ToolApprovalSpec{Decision: v1alpha1.Denied, RequestDigest: "sha256:r", Reason: "no"}}
	for name, tc := range map[string]struct {
		action *v1alpha1.ToolAction
		want   v1alpha1.Phase
	}{
		"before any attempt: failed":         {newAction(v1alpha1.PhaseAwaitingApproval), v1alpha1.PhaseFailed},
		"after definite refusals: failed":    {newAction(v1alpha1.PhaseAwaitingApproval, attempts(1), failedRetryably), v1alpha1.PhaseFailed},
		"after an unseen attempt: escalated": {newAction(v1alpha1.PhaseAwaitingApproval, attempts(1), wasUnknown, provedAbsent), v1alpha1.PhaseEscalated},
	} {
		got := tc.action.DeepCopy()
		atT0().decided(denial, "carol").apply(got)
		if got.Status.Phase != tc.want {
			t.Errorf("%s: %s, want %s", name, got.Status.Phase, tc.want)
		}
	}
}

// TestFailedOnlyFromDefiniteAnswers: once an attempt's outcome went unseen
// (a timeout, a reset, a lapsed claim), no later refusal makes the action
// Failed, not even after a lookup found the key absent: the unseen request
// may be held downstream and commit later, answering every re-send under
// its key with 409 in progress meanwhile. A tool with a lookup call keeps
// looking the key up; any other is escalated.
func TestFailedOnlyFromDefiniteAnswers(t *testing.T) {
	executing := func(n int32, opts ...actionOption) *v1alpha1.ToolAction {
		return newAction(v1alpha1.PhaseExecuting, append([]actionOption{attempts(n), claimedBy("executor-a", time.Minute)}, opts...)...)
	}
	inProgress := &adapter.RetryableError{Reason: "HTTP409", Err: errors.New("downstream answered 409 (error code \"idempotency_key_in_use\")")}
	denied := &adapter.PermanentError{Kind: adapter.Denied, Reason: "HTTP403", Err: errors.New("forbidden")}
	lookedUp := func(reason string) result {
		return result{Phase: v1alpha1.PhaseUnknown, Class: v1alpha1.ErrorClassOutcomeUnknown, ErrorReason: reason, NextAttempt: 5 * time.Second,
			Requeue: 5 * time.Second, Events: []string{"Warning/" + reason}, Reapplies: true}
	}
	escalated := result{Phase: v1alpha1.PhaseEscalated, Owes: notify.TypeEscalated, Class: v1alpha1.ErrorClassOutcomeUnknown, ErrorReason: ReasonOutcomeUnknown,
		Events: []string{"Warning/OutcomeUnknown"}, Reapplies: true}
	tests := []struct {
		name    string
		claimed *v1alpha1.ToolAction
		tool    *resolvedTool
		err     error
		want    result
	}{
		{"409 in progress with every attempt spent after an unknown outcome, a tool with a lookup: looked up, not failed",
			executing(3, wasUnknown), withTool(v1alpha1.KeyProtected), inProgress, lookedUp("HTTP409")},
		{"the same after a lookup found the key absent: the held request may still commit",
			executing(3, wasUnknown, provedAbsent, failedRetryably), withTool(v1alpha1.KeyProtected), inProgress, lookedUp("HTTP409")},
		{"the same without a lookup: escalated",
			executing(3, wasUnknown), withTool(v1alpha1.KeyProtected, noLookup), inProgress, escalated},
		{"503s after an absence was proved, without a lookup: escalated",
			executing(3, wasUnknown, provedAbsent, failedRetryably), withTool(v1alpha1.KeyProtected, noLookup),
			&adapter.RetryableError{Reason: "HTTP503", Err: errors.New("busy")}, escalated},
		{"older history dropped and nothing kept settles it: escalated",
			executing(3, historyDropped, failedRetryably), withTool(v1alpha1.KeyProtected, noLookup),
			&adapter.RetryableError{Reason: "HTTP503", Err: errors.New("busy")}, escalated},
		{"a refusal after an unknown outcome, a tool with a lookup: looked up, not failed",
			executing(2, wasUnknown, provedAbsent), withTool(v1alpha1.KeyProtected), denied, lookedUp("HTTP403")},
		{"a refusal after an unknown outcome, without a lookup: escalated",
			executing(2, wasUnknown), withTool(v1alpha1.KeyProtected, noLookup), denied, escalated},
		{"409 with attempts left after an unknown outcome: retried under the same key", executing(2, wasUnknown), withTool(v1alpha1.KeyProtected), inProgress,
			result{Phase: v1alpha1.PhaseRetryScheduled, Class: v1alpha1.ErrorClassProviderUnavailable, ErrorReason: "HTTP409", NextAttempt: 2 * time.Second,
				Requeue: 2 * time.Second, Events: []string{"Warning/HTTP409"}, Reapplies: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := summarizeTransition(tt.claimed, atT0().afterDispatch(tt.claimed, tt.tool, adapter.Outcome{}, tt.err))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("afterDispatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAfterLookup(t *testing.T) {
	inconclusive := errors.New("HTTP502 from the lookup")
	tests := []struct {
		name    string
		action  *v1alpha1.ToolAction
		tool    *resolvedTool
		outcome adapter.Outcome
		err     error
		want    result
	}{
		{"response lost after success: found, with the original reference", newAction(v1alpha1.PhaseUnknown), withTool(v1alpha1.KeyProtected),
			adapter.Outcome{ExternalRef: "ch_1"}, nil, result{Kind: "record", Phase: v1alpha1.PhaseSucceeded, Owes: notify.TypeSucceeded, ExternalRef: "ch_1", Events: []string{"Normal/FoundByLookup"}}},
		{"absent: attempted again under the same key", newAction(v1alpha1.PhaseUnknown), withTool(v1alpha1.Compensatable), adapter.Outcome{}, adapter.ErrNotFound,
			result{Kind: "attempt", Reason: ReasonAbsentByLookup}},
		{"absent while deleting: released", newAction(v1alpha1.PhaseUnknown, deleting), withTool(v1alpha1.KeyProtected), adapter.Outcome{}, adapter.ErrNotFound,
			result{Kind: "release"}},
		{"absent with every attempt spent: looked up again, never failed (the unseen request may still commit)", newAction(v1alpha1.PhaseUnknown, attempts(3), unknownSince(time.Minute)),
			withTool(v1alpha1.KeyProtected), adapter.Outcome{}, adapter.ErrNotFound, result{Kind: "record", Phase: v1alpha1.PhaseUnknown, NextAttempt: time.Second, Requeue: time.Second}},
		{"absent with every attempt spent at the deadline: escalated", newAction(v1alpha1.PhaseUnknown, attempts(3), unknownSince(10*time.Minute)),
			withTool(v1alpha1.KeyProtected), adapter.Outcome{}, adapter.ErrNotFound, result{Kind: "record", Phase: v1alpha1.PhaseEscalated, Owes: notify.TypeEscalated,
				Class: v1alpha1.ErrorClassOutcomeUnknown, ErrorReason: ReasonOutcomeUnknown, Events: []string{"Warning/Escalated"}}},
		{"lookup unsupported, KeyProtected: re-sent under the same key", newAction(v1alpha1.PhaseUnknown), withTool(v1alpha1.KeyProtected), adapter.Outcome{},
			fmt.Errorf("wrapped: %w", adapter.ErrLookupUnsupported), result{Kind: "attempt", Reason: ReasonRedispatch}},
		{"lookup unsupported, Compensatable: escalated", newAction(v1alpha1.PhaseUnknown), withTool(v1alpha1.Compensatable), adapter.Outcome{},
			adapter.ErrLookupUnsupported, result{Kind: "record", Phase: v1alpha1.PhaseEscalated, Owes: notify.TypeEscalated, Class: v1alpha1.ErrorClassOutcomeUnknown,
				ErrorReason: ReasonOutcomeUnknown, Events: []string{"Warning/Escalated"}}},
		{"inconclusive: looked up again with backoff", newAction(v1alpha1.PhaseUnknown, unknownSince(time.Minute)), withTool(v1alpha1.KeyProtected),
			adapter.Outcome{}, inconclusive, result{Kind: "record", Phase: v1alpha1.PhaseUnknown, NextAttempt: time.Second, Requeue: time.Second}},
		{"inconclusive near the deadline: the next lookup is at the deadline, not after it",
			newAction(v1alpha1.PhaseUnknown, unknownSince(10*time.Minute-time.Second), func(a *v1alpha1.ToolAction) { a.Status.Lookups = 3 }),
			withTool(v1alpha1.KeyProtected), adapter.Outcome{}, inconclusive, result{Kind: "record", Phase: v1alpha1.PhaseUnknown,
				NextAttempt: time.Second, Requeue: time.Second}},
		{"replayed by the downstream: found, with the replay recorded and reported", newAction(v1alpha1.PhaseUnknown), withTool(v1alpha1.KeyProtected),
			adapter.Outcome{ExternalRef: "ch_1", Replayed: true}, nil, result{Kind: "record", Phase: v1alpha1.PhaseSucceeded, Owes: notify.TypeSucceeded, ExternalRef: "ch_1", Replayed: true,
				Events: []string{"Normal/FoundByLookup", "Normal/ReplayedByDownstream"}}},
		{"the provider's replay window closed: escalated at once, well before the deadline", newAction(v1alpha1.PhaseUnknown, unknownSince(time.Minute)),
			withTool(v1alpha1.KeyProtected), adapter.Outcome{}, fmt.Errorf("%w: after 24h", adapter.ErrLookupWindowClosed),
			result{Kind: "record", Phase: v1alpha1.PhaseEscalated, Owes: notify.TypeEscalated, Class: v1alpha1.ErrorClassOutcomeUnknown,
				ErrorReason: ReasonLookupWindowClosed, Events: []string{"Warning/Escalated"}}},
		{"absent after the downstream's key window: re-sent, the lookup proved it safe", newAction(v1alpha1.PhaseUnknown, startedAgo(25*time.Hour)),
			downstreamWindow(v1alpha1.KeyProtected, 24*time.Hour), adapter.Outcome{}, adapter.ErrNotFound, result{Kind: "attempt", Reason: ReasonAbsentByLookup}},
		{"lookup unsupported after the downstream's key window: escalated, never re-sent", newAction(v1alpha1.PhaseUnknown, startedAgo(25*time.Hour)),
			downstreamWindow(v1alpha1.KeyProtected, 24*time.Hour), adapter.Outcome{}, adapter.ErrLookupUnsupported, result{Kind: "record", Phase: v1alpha1.PhaseEscalated,
				Owes: notify.TypeEscalated, Class: v1alpha1.ErrorClassOutcomeUnknown, ErrorReason: ReasonDownstreamKeyExpired, Events: []string{"Warning/Escalated"}}},
		{"no proof by the deadline: escalated", newAction(v1alpha1.PhaseUnknown, unknownSince(10*time.Minute)), withTool(v1alpha1.KeyProtected),
			adapter.Outcome{}, inconclusive, result{Kind: "record", Phase: v1alpha1.PhaseEscalated, Owes: notify.TypeEscalated, Class: v1alpha1.ErrorClassOutcomeUnknown,
				ErrorReason: ReasonOutcomeUnknown, Events: []string{"Warning/Escalated"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// An Unknown action's error is OutcomeUnknown until a transition changes it.
			tt.action.Status.Error = &v1alpha1.ActionError{Class: v1alpha1.ErrorClassOutcomeUnknown, Reason: "Timeout"}
			got := summarize(tt.action, atT0().afterLookup(tt.action, tt.tool, tt.outcome, tt.err))
			if got.Phase == v1alpha1.PhaseUnknown {
				got.Class, got.ErrorReason = "", ""
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("afterLookup (-want +got):\n%s", diff)
			}
		})
	}
}

func TestVerifyRequest(t *testing.T) {
	tool := withTool(v1alpha1.KeyProtected).tool
	tool.Spec.ParametersSchema = &apiextensionsv1.JSON{Raw: []byte(`{"type":"object","required":["amount"],"properties":{"amount":{"type":"integer","minimum":1}}}`)}
	withParameters := func(params string) actionOption {
		return func(a *v1alpha1.ToolAction) {
			var p map[string]apiextensionsv1.JSON
			if err := json.Unmarshal([]byte(params), &p); err != nil {
				t.Fatal(err)
			}
			a.Spec.Parameters = p
		}
	}
	schema, err := toolContract(tool)
	if err != nil {
		t.Fatal(err)
	}
	valid := newAction("", withParameters(`{"amount": 1200}`))
	digest, _, err := verifyRequest(valid, tool, schema)
	if err != nil {
		t.Fatalf("verifyRequest of a valid request: %v", err)
	}
	tests := []struct {
		name   string
		action *v1alpha1.ToolAction
		want   *invalidError
	}{
		{"valid", valid, nil},
		{"the client's digest does not match", newAction("", withParameters(`{"amount": 1200}`), func(a *v1alpha1.ToolAction) { a.Spec.RequestDigest = "sha256:0" }),
			&invalidError{class: v1alpha1.ErrorClassInvalidInput, reason: ReasonRequestDigestMismatch}},
		{"same key, changed payload since the first attempt: a conflict, never executed", newAction(v1alpha1.PhaseRetryScheduled, withParameters(`{"amount": 1200}`),
			func(a *v1alpha1.ToolAction) { a.Status.RequestDigest = "sha256:other" }), &invalidError{class: v1alpha1.ErrorClassDuplicateConflict, reason: ReasonRequestChanged}},
		{"the parameters break the tool's schema", newAction("", withParameters(`{"amount": 0}`)),
			&invalidError{class: v1alpha1.ErrorClassInvalidInput, reason: ReasonInvalidParameters}},
		{"the recorded digest is the same: a retry", newAction(v1alpha1.PhaseRetryScheduled, withParameters(`{"amount": 1200}`),
			func(a *v1alpha1.ToolAction) { a.Status.RequestDigest = digest }), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := verifyRequest(tt.action, tool, schema)
			var got *invalidError
			if err != nil && !errors.As(err, &got) {
				t.Fatalf("verifyRequest returned %T %v, want an *invalidError", err, err)
			}
			if tt.want == nil || got == nil {
				if tt.want != got {
					t.Fatalf("verifyRequest = %v, want %v", got, tt.want)
				}
				return
			}
			if got.class != tt.want.class || got.reason != tt.want.reason {
				t.Errorf("verifyRequest = %s/%s (%s), want %s/%s", got.class, got.reason, got.message, tt.want.class, tt.want.reason)
			}
		})
	}
}

func TestClaimLeaseFollowsTheAdapterTimeout(t *testing.T) {
	if got := attemptTimeout(adapter.Capabilities{AttemptTimeout: 3 * time.Second}); got != 3*time.Second {
		t.Errorf("attemptTimeout = %s, want the adapter's 3s", got)
	}
	if got := attemptTimeout(adapter.Capabilities{}); got != defaultToolTimeout {
		t.Errorf("attemptTimeout without a figure = %s, want %s", got, defaultToolTimeout)
	}
}

func TestNeedsTombstone(t *testing.T) {
	tests := []struct {
		name   string
		action *v1alpha1.ToolAction
		want   bool
	}{
		{"succeeded after a dispatch", newAction(v1alpha1.PhaseSucceeded, attempts(1)), true},
		{"failed after dispatches", newAction(v1alpha1.PhaseFailed, attempts(3)), true},
		{"rejected before any dispatch", newAction(v1alpha1.PhaseFailed, attempts(0)), false},
		{"answered by a tombstone (never dispatched)", newAction(v1alpha1.PhaseSucceeded, attempts(0)), false},
		{"still in flight", newAction(v1alpha1.PhaseUnknown, attempts(1)), false},
	}
	for _, tt := range tests {
		if got := keyhistory.NeedsTombstone(tt.action); got != tt.want {
			t.Errorf("%s: needsTombstone = %t, want %t", tt.name, got, tt.want)
		}
	}
}

// TestLongAnswersStayWithinTheAPILimits: whatever a downstream answers, the
// status write stays within the CRD's limits, so it cannot fail forever.
func TestLongAnswersStayWithinTheAPILimits(t *testing.T) {
	long := strings.Repeat("é", 6000)
	a := newAction(v1alpha1.PhaseExecuting, attempts(1), claimedBy("executor-a", time.Minute))
	next := a.DeepCopy()
	atT0().afterDispatch(a, withTool(v1alpha1.KeyProtected), adapter.Outcome{},
		&adapter.PermanentError{Kind: adapter.InvalidInput, Reason: "HTTP400", Err: errors.New(long)}).apply(next)
	if n := len(next.Status.Error.Message); n > maxErrorMessage || !strings.HasSuffix(next.Status.Error.Message, "…") {
		t.Errorf("status.error.message has %d bytes (limit %d), ending %q", n, maxErrorMessage, next.Status.Error.Message[n-8:])
	}
	for _, c := range next.Status.Conditions {
		if len(c.Message) > maxConditionMessage {
			t.Errorf("condition %s message has %d bytes", c.Type, len(c.Message))
		}
	}
	for _, h := range next.Status.History {
		if len(h.Message) > maxHistoryMessage {
			t.Errorf("history message has %d bytes", len(h.Message))
		}
	}
}

// An approval is bound to the request and to the target its tool named,
// and a tool's approval requirement is sticky for the actions it held.
func TestApprovalGate(t *testing.T) {
	const request, target, elsewhere = "sha256:request", "sha256:target", "sha256:elsewhere"
	approved := func(requestDigest, targetDigest string) actionOption {
		return func(a *v1alpha1.ToolAction) {
			a.Status.Approval = &v1alpha1.ApprovalRecord{Name: "a-1", Decision: v1alpha1.Approved, DecidedBy: "bob",
				RequestDigest: requestDigest, TargetDigest: targetDigest}
		}
	}
	heldFor := func(required bool) actionOption {
		return func(a *v1alpha1.ToolAction) {
			a.Status.Target = &v1alpha1.TargetRecord{ApprovalRequired: required, Digest: target}
		}
	}
	tool := func(required bool) *v1alpha1.Tool {
		tl := withTool(v1alpha1.KeyProtected).tool
		tl.Spec.ApprovalRequired = required
		return tl
	}
	type gate struct {
		Held             bool
		Reason           string
		Phase            v1alpha1.Phase
		ApprovalKept     bool
		ApprovalRequired bool
	}
	tests := []struct {
		name   string
		action *v1alpha1.ToolAction
		tool   *v1alpha1.Tool
		digest string
		want   gate
	}{
		{"no approval required", newAction(v1alpha1.PhaseAccepted), tool(false), target, gate{}},
		{"required and none applied: held", newAction(v1alpha1.PhaseAccepted), tool(true), target,
			gate{Held: true, Reason: ReasonAwaitingApproval, Phase: v1alpha1.PhaseAwaitingApproval, ApprovalRequired: true}},
		{"approved for this request and target: dispatched", newAction(v1alpha1.PhaseAccepted, heldFor(true), approved(request, target)), tool(true), target, gate{}},
		{"the Tool is edited while an action awaits approval: it stays held (sticky requirement)",
			newAction(v1alpha1.PhaseAwaitingApproval, heldFor(true)), tool(false), target,
			gate{Held: true, Reason: ReasonAwaitingApproval, Phase: v1alpha1.PhaseAwaitingApproval, ApprovalRequired: true}},
		{"approved, then the tool stops requiring approvals: dispatched to the approved target",
			newAction(v1alpha1.PhaseAccepted, heldFor(true), approved(request, target)), tool(false), target, gate{}},
		{"approved, then the Tool's target changes: held for a new approval",
			newAction(v1alpha1.PhaseAccepted, heldFor(true), approved(request, target)), tool(true), elsewhere,
			gate{Held: true, Reason: ReasonTargetChanged, Phase: v1alpha1.PhaseAwaitingApproval, ApprovalRequired: true}},
		{"approved, then the target changes and approvals are switched off: still held",
			newAction(v1alpha1.PhaseAccepted, heldFor(true), approved(request, target)), tool(false), elsewhere,
			gate{Held: true, Reason: ReasonTargetChanged, Phase: v1alpha1.PhaseAwaitingApproval, ApprovalRequired: true}},
		{"approved before targets were recorded: held for a new approval",
			newAction(v1alpha1.PhaseAccepted, heldFor(true), approved(request, "")), tool(true), target,
			gate{Held: true, Reason: ReasonTargetChanged, Phase: v1alpha1.PhaseAwaitingApproval, ApprovalRequired: true}},
		{"approved for another request: held", newAction(v1alpha1.PhaseAccepted, heldFor(true), approved("sha256:other", target)), tool(true), target,
			gate{Held: true, Reason: ReasonAwaitingApproval, Phase: v1alpha1.PhaseAwaitingApproval, ApprovalRequired: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			current, err := targetOf(tt.action, tt.tool)
			if err != nil {
				t.Fatal(err)
			}
			current.Digest = tt.digest
			held := atT0().approvalGate(tt.action, current, request)
			got := gate{}
			if held != nil {
				next := tt.action.DeepCopy()
				held.apply(next)
				got = gate{Held: true, Reason: next.Status.Conditions[len(next.Status.Conditions)-1].Reason, Phase: next.Status.Phase,
					ApprovalKept: next.Status.Approval != nil, ApprovalRequired: next.Status.Target.ApprovalRequired}
				if approved := conditionReason(next, v1alpha1.ConditionApproved); approved != got.Reason {
					t.Errorf("Approved condition's reason = %q, want %q", approved, got.Reason)
				}
				if next.Status.Target.Digest != tt.digest {
					t.Errorf("recorded target %q, want the tool's current %q", next.Status.Target.Digest, tt.digest)
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("approvalGate (-want +got):\n%s", diff)
			}
		})
	}
}

func conditionReason(a *v1alpha1.ToolAction, conditionType string) string {
	for _, c := range a.Status.Conditions {
		if c.Type == conditionType {
			return c.Reason
		}
	}
	return ""
}

// The target digest covers where and how an action is sent, nothing else.
func TestTargetDigestCoversTheAdapter(t *testing.T) {
	base := withTool(v1alpha1.KeyProtected).tool.Spec
	base.HTTP = &v1alpha1.HTTPAdapter{URL: "https://payments.example/charges"}
	digestOf := func(spec v1alpha1.ToolSpec) string {
		d, err := targetDigest(&spec)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	same := base
	same.Retry.MaxAttempts = 9
	same.ApprovalRequired = true
	if digestOf(base) != digestOf(same) {
		t.Error("the digest changed with the retry policy or the approval requirement, which are not the target")
	}
	moved := base
	moved.HTTP = &v1alpha1.HTTPAdapter{URL: "https://elsewhere.example/charges"}
	if digestOf(base) == digestOf(moved) {
		t.Error("the digest did not change with the URL")
	}
}

// An attempt is sent only within its lease less the clock margin, and for
// at most the attempt timeout.
func TestSendBudget(t *testing.T) {
	caps := adapter.Capabilities{AttemptTimeout: 5 * time.Second}
	claim := func(left time.Duration) *v1alpha1.ExecutorClaim {
		return &v1alpha1.ExecutorClaim{Executor: "executor-a", Attempt: 1, LeaseExpiry: metaTime(t0.Add(left))}
	}
	for _, tt := range []struct {
		name  string
		claim *v1alpha1.ExecutorClaim
		want  time.Duration
	}{
		{"just claimed: the whole attempt timeout", claim(35 * time.Second), 5 * time.Second},
		{"paused since the claim: what is left of the lease less the margin", claim(8 * time.Second), 3 * time.Second},
		{"within the margin: not sent", claim(4 * time.Second), -time.Second},
		{"past the lease (a long pause): not sent", claim(-time.Minute), -65 * time.Second},
		{"no claim: not sent", nil, 0},
	} {
		if got := atT0().sendBudget(tt.claim, caps, 5*time.Second); got != tt.want {
			t.Errorf("%s: budget %s, want %s", tt.name, got, tt.want)
		}
	}
}

// A lease is stored in whole seconds: rounded up, never shorter than promised.
func TestLeaseIsRoundedUp(t *testing.T) {
	for in, want := range map[time.Time]time.Time{
		t0.Add(300 * time.Millisecond): t0.Add(time.Second),
		t0.Add(time.Second):            t0.Add(time.Second),
	} {
		if got := metaTimeUp(in); !got.Time.Equal(want) {
			t.Errorf("metaTimeUp(%s) = %s, want %s", in, got.Time, want)
		}
	}
}

// Every resolution names itself in the history, RetrySafe included, so a
// resolution whose Applied mark was lost is recognised as applied when it
// is reconciled again, rather than refused as not resolvable.
func TestResolvedIsRecognisedAsApplied(t *testing.T) {
	for _, outcome := range []v1alpha1.ResolutionOutcome{v1alpha1.ResolvedSucceeded, v1alpha1.ResolvedFailed, v1alpha1.ResolvedRetrySafe} {
		resolution := &v1alpha1.ToolResolution{
			ObjectMeta: metav1.ObjectMeta{Name: "checked"},
			Spec:       v1alpha1.ToolResolutionSpec{ActionName: "order-1001-charge", Attempt: 1, Outcome: outcome, ExternalRef: "ch_1", Reason: "seen"},
		}
		p := atT0()
		p.by = resolutionActor(resolution)
		next := newAction(v1alpha1.PhaseEscalated)
		p.resolved(resolution).apply(next)
		if !appliedTo(next, p.by) {
			t.Errorf("%s: history %+v does not show the resolution applied", outcome, next.Status.History)
		}
	}
}

// A transition into AwaitingApproval, Escalated, Succeeded or Failed owes
// the sinks one event; a write within the phase, any other arrival, and a
// record answered by its key's Tombstone or archived record owe none.
func TestOwedEvent(t *testing.T) {
	settled := func(reason string) actionOption {
		return func(a *v1alpha1.ToolAction) {
			meta.SetStatusCondition(&a.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionSucceeded, Status: metav1.ConditionTrue, Reason: reason})
		}
	}
	for _, tc := range []struct {
		from v1alpha1.Phase
		next *v1alpha1.ToolAction
		want string
	}{
		{v1alpha1.PhaseAccepted, newAction(v1alpha1.PhaseAwaitingApproval), notify.TypeAwaitingApproval},
		{v1alpha1.PhaseUnknown, newAction(v1alpha1.PhaseEscalated), notify.TypeEscalated},
		{v1alpha1.PhaseExecuting, newAction(v1alpha1.PhaseSucceeded, settled("Succeeded")), notify.TypeSucceeded},
		{v1alpha1.PhaseUnknown, newAction(v1alpha1.PhaseSucceeded, settled(v1alpha1.ReasonFoundByLookup)), notify.TypeSucceeded},
		{v1alpha1.PhaseExecuting, newAction(v1alpha1.PhaseFailed), notify.TypeFailed},
		{"", newAction(v1alpha1.PhaseSucceeded, settled(v1alpha1.ReasonSettledByTombstone)), ""},
		{"", newAction(v1alpha1.PhaseSucceeded, settled(v1alpha1.ReasonSettledByArchive)), ""},
		{v1alpha1.PhaseAccepted, newAction(v1alpha1.PhaseExecuting), ""},
		{v1alpha1.PhaseExecuting, newAction(v1alpha1.PhaseUnknown), ""},
		{v1alpha1.PhaseSucceeded, newAction(v1alpha1.PhaseSucceeded), ""},
		{v1alpha1.PhaseEscalated, newAction(v1alpha1.PhaseEscalated), ""},
	} {
		if got := owedEvent(tc.from, tc.next); got != tc.want {
			t.Errorf("%s → %s (%v): owes %q, want %q", tc.from, tc.next.Status.Phase, tc.next.Status.Conditions, got, tc.want)
		}
	}
}
