package controllers

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/notify"
	"github.com/toolledger/toolledger/internal/printable"
	"github.com/toolledger/toolledger/pkg/adapter"
)

// transition is one recorded change of an action: what it does to the
// status and what is reported once it is written. The Ledger (ledger.go)
// is its only writer.
type transition struct {
	apply  func(*v1alpha1.ToolAction)
	events []report
	// requeueAfter brings the action back, as a lookup or retry scheduled.
	requeueAfter time.Duration
	// reapplyWhile, when set, makes the transition survive changes made to
	// the record meanwhile (labels, annotations): on a conflict the record is
	// read again and the transition reapplied while reapplyWhile holds for it.
	reapplyWhile func(latest *v1alpha1.ToolAction) bool
	// retry is returned once the transition is written, so that the action
	// comes back with backoff (it waits for something outside the ledger).
	retry error
	// tally is what the metrics count of it beyond the change of phase.
	tally tally
	// race names the transition in toolledger_claim_conflicts_total when a
	// newer version of the record wins over it (the claim); others lose
	// their races uncounted.
	race string
}

// report is an event of a transition.
type report struct {
	eventType, reason, verb, message string
	// related is the object that caused the transition, if not the action.
	related runtime.Object
	// routine: a Normal event of the happy path, emitted as RoutineEvents
	// decides; opensStory marks the one that begins an action's story (its
	// first claim).
	routine, opensStory bool
}

// owedEvent is the CloudEvent type a transition from the phase from to
// next owes the notification sinks: an arrival at a phase that someone
// waits on (AwaitingApproval, Escalated, Succeeded, Failed) owes one; a
// write within a phase owes none, and neither does a record made again
// under a deleted key and answered by its Tombstone or archived record,
// whose outcome was told when the original reached it (that record was
// kept until its events were delivered).
func owedEvent(from v1alpha1.Phase, next *v1alpha1.ToolAction) string {
	if next.Status.Phase == from || next.Status.SettledByEarlierRecord() {
		return ""
	}
	return notify.TypeOf(next.Status.Phase)
}

func warning(reason, verb, message string) report {
	return report{eventType: corev1.EventTypeWarning, reason: reason, verb: verb, message: message}
}

// claimed: this executor claims the action's next attempt, for lease, with
// the request and the target it will send to. The lease is stored rounded
// up: what every replica, this one included, judges must not be shorter
// than promised.
func (p rules) claimed(a *v1alpha1.ToolAction, lease time.Duration, reason, requestDigest string, target v1alpha1.TargetRecord) transition {
	attempt := a.Status.Attempts + 1
	message := fmt.Sprintf("attempt %d claimed by %s", attempt, p.by)
	return transition{
		apply: func(a *v1alpha1.ToolAction) {
			a.Status.Attempts = attempt
			a.Status.RequestDigest = requestDigest
			a.Status.IdempotencyKey = v1alpha1.IdempotencyKey(a.Namespace, a.Name)
			a.Status.Target = &target
			a.Status.Claim = &v1alpha1.ExecutorClaim{Executor: p.by, Attempt: attempt, LeaseExpiry: metaTimeUp(p.now.Add(lease))}
			if a.Status.StartTime == nil {
				a.Status.StartTime = metaTimePtr(p.now)
			}
			setExecuting(a, p.now, p.by, reason, message)
		},
		// A later attempt follows a warning: its claim is always told.
		events: []report{{eventType: corev1.EventTypeNormal, reason: ReasonExecuting, verb: "Dispatch", message: message,
			routine: attempt == 1, opensStory: attempt == 1}},
		race: "claim",
	}
}

// lapse: a claim's lease ended before its executor recorded an outcome.
func (p rules) lapse(claim *v1alpha1.ExecutorClaim) transition {
	msg := "the executor's claim lapsed before it recorded an outcome; the request may have been sent"
	if claim != nil {
		msg = fmt.Sprintf("executor %s's claim on attempt %d lapsed at %s before it recorded an outcome; the request may have been sent",
			claim.Executor, claim.Attempt, claim.LeaseExpiry.UTC().Format(time.RFC3339))
	}
	// The lapsed attempt had its whole lease to be processed downstream, so
	// the first lookup may run at once.
	return transition{
		apply:  func(a *v1alpha1.ToolAction) { setUnknown(a, p.now, p.by, ReasonLeaseExpired, msg) },
		events: []report{warning(ReasonLeaseExpired, "Reconcile", msg)},
	}
}

// escalation hands an action to a human: Stalled=True, phase Escalated, an
// event, and a place in the queue of actions awaiting a ToolResolution.
func (p rules) escalation(reason, message string) transition {
	return transition{
		apply:  func(a *v1alpha1.ToolAction) { setEscalated(a, p.now, p.by, reason, message) },
		events: []report{warning(ReasonEscalated, "Reconcile", message)},
	}
}

// rejection is a final failure found before anything was dispatched.
func (p rules) rejection(invalid *invalidError) transition {
	return transition{
		apply: func(a *v1alpha1.ToolAction) {
			setRejected(a, p.now, p.by, invalid.class, invalid.reason, invalid.message)
		},
		events: []report{warning(invalid.reason, "Validate", invalid.message)},
	}
}

// refusal fails an action the ledger refuses (its tool or request became
// invalid), unless an earlier attempt's outcome went unseen: that attempt
// may have applied, so the action is escalated, never Failed.
func (p rules) refusal(a *v1alpha1.ToolAction, invalid *invalidError) transition {
	if mayStillApply(a) {
		return p.escalation(invalid.reason, invalid.message+mayStillApplyNote)
	}
	return p.rejection(invalid)
}

// mayStillApply reports an action with an attempt whose outcome went
// unseen and nothing settled: a refusal of it now is no definite answer.
func mayStillApply(a *v1alpha1.ToolAction) bool {
	return a.Status.Attempts > 0 && unsettledUnknown(a, false)
}

// mayStillApplyNote ends the message of an action escalated instead of
// failed because mayStillApply.
const mayStillApplyNote = "; an earlier attempt's outcome is unknown and may have applied: resolve it with a ToolResolution"

// waiting: accepted, but not dispatchable yet (a missing Secret, a
// compensation whose original is still in flight). It comes back with backoff.
func (p rules) waiting(requestDigest, reason, message string) transition {
	return transition{
		apply:  func(a *v1alpha1.ToolAction) { setWaiting(a, p.now, requestDigest, reason, message) },
		events: []report{warning(reason, "Wait", message)},
		retry:  errors.New(message),
	}
}

// awaitingApproval holds an action whose tool requires an approval, or
// required one when the action was accepted.
func (p rules) awaitingApproval(a *v1alpha1.ToolAction, requestDigest string, target v1alpha1.TargetRecord) transition {
	message := fmt.Sprintf("tool %q requires an approval of request %s before it is dispatched (a ToolApproval of this key and digest)",
		a.Spec.ToolRef.Name, requestDigest)
	return transition{
		apply: func(a *v1alpha1.ToolAction) {
			reason, message := ReasonAwaitingApproval, message
			// An action that lost its approval to a change of target says so
			// until a new approval comes.
			if c := meta.FindStatusCondition(a.Status.Conditions, v1alpha1.ConditionApproved); a.Status.Phase == v1alpha1.PhaseAwaitingApproval &&
				c != nil && c.Reason == ReasonTargetChanged {
				reason, message = c.Reason, c.Message
			}
			setAwaitingApproval(a, p.now, requestDigest, target, reason, message)
		},
		events: []report{{eventType: corev1.EventTypeNormal, reason: ReasonAwaitingApproval, verb: "Approve", message: message}},
	}
}

// targetChanged holds an approved action whose tool now names another
// target than the one it was approved for: nobody approved sending it there.
func (p rules) targetChanged(a *v1alpha1.ToolAction, requestDigest string, target v1alpha1.TargetRecord) transition {
	approval := a.Status.Approval
	message := fmt.Sprintf("tool %q changed its target (adapter configuration %s, approved for %s) since request %s was approved by %s (ToolApproval %s); "+
		"it is not dispatched to a target nobody approved: a new ToolApproval is needed",
		a.Spec.ToolRef.Name, target.Digest, cmp.Or(approval.TargetDigest, "no recorded target"), requestDigest, approval.DecidedBy, approval.Name)
	return transition{
		apply: func(a *v1alpha1.ToolAction) {
			setAwaitingApproval(a, p.now, requestDigest, target, ReasonTargetChanged, message)
		},
		events: []report{warning(ReasonTargetChanged, "Approve", message)},
	}
}

// decided applies an approver's decision; p.by names the approval.
func (p rules) decided(approval *v1alpha1.ToolApproval, approver string) transition {
	record := v1alpha1.ApprovalRecord{
		Name: approval.Name, Decision: approval.Spec.Decision, DecidedBy: approver,
		RequestDigest: approval.Spec.RequestDigest, Time: metaTime(p.now),
	}
	reason := ReasonApproved
	if approval.Spec.Decision == v1alpha1.Denied {
		reason = ReasonApprovalDenied
	}
	message := fmt.Sprintf("request %s %s by %s (ToolApproval %s): %s",
		approval.Spec.RequestDigest, decisionVerb(approval.Spec.Decision), approver, approval.Name, approval.Spec.Reason)
	return transition{
		apply: func(a *v1alpha1.ToolAction) {
			if a.Status.Target != nil {
				record.TargetDigest = a.Status.Target.Digest
			}
			switch {
			case approval.Spec.Decision == v1alpha1.Denied && mayStillApply(a):
				// Asked again after its target changed, with an earlier
				// attempt's outcome unseen: that attempt may still apply.
				setEscalated(a, p.now, p.by, ReasonApprovalDenied, message+mayStillApplyNote)
				return
			case approval.Spec.Decision == v1alpha1.Denied:
				setDenied(a, p.now, p.by, record, message)
				return
			}
			setApproved(a, p.now, p.by, record, message)
		},
		events: []report{{eventType: corev1.EventTypeNormal, reason: reason, verb: "Approve", message: message, related: approval}},
	}
}

// found: a lookup shows the request applied.
func (p rules) found(a *v1alpha1.ToolAction, outcome adapter.Outcome) transition {
	events := []report{{eventType: corev1.EventTypeNormal, reason: ReasonFoundByLookup, verb: "Lookup",
		message: fmt.Sprintf("the downstream has the request of key %s: external reference %s", idempotencyKey(a), outcome.ExternalRef)}}
	return transition{
		apply:  func(a *v1alpha1.ToolAction) { setSucceeded(a, p.now, p.by, ReasonFoundByLookup, outcome) },
		events: append(events, outcomeNotes(a, "Lookup", outcome)...),
		tally:  replayTally(outcome),
	}
}

// outcomeNotes are the events of what an answer says beside the effect:
// that the downstream replayed a stored response, and the warnings.
func outcomeNotes(a *v1alpha1.ToolAction, verb string, outcome adapter.Outcome) []report {
	var events []report
	if outcome.Replayed {
		events = append(events, report{eventType: corev1.EventTypeNormal, reason: ReasonReplayedByDownstream, verb: verb,
			message: fmt.Sprintf("the downstream answered attempt %d with its stored response for key %s: it deduplicated", a.Status.Attempts, idempotencyKey(a))})
	}
	for _, w := range outcome.Warnings {
		events = append(events, warning(ReasonIncompleteResponse, verb, w))
	}
	return events
}

// replayTally counts a downstream's stored response as a duplicate hit:
// the downstream's own deduplication answered a repeat.
func replayTally(outcome adapter.Outcome) tally {
	if outcome.Replayed {
		return tally{duplicate: sourceDownstreamReplay}
	}
	return tally{}
}

// lookupScheduled keeps an Unknown action whose lookup could not tell.
func (p rules) lookupScheduled(a *v1alpha1.ToolAction, delay time.Duration, lookupErr error) transition {
	message := fmt.Sprintf("lookup %d could not tell whether attempt %d applied: %v; next lookup in %s",
		a.Status.Lookups+1, a.Status.Attempts, lookupErr, delay.Round(time.Millisecond))
	return transition{
		apply:        func(a *v1alpha1.ToolAction) { setLookupScheduled(a, p.now, p.now.Add(delay), message) },
		requeueAfter: delay,
	}
}

// resolved applies a human's finding; p.by names the resolution.
func (p rules) resolved(resolution *v1alpha1.ToolResolution) transition {
	by := "ToolResolution " + resolution.Name
	if user := resolution.Annotations[v1alpha1.ResolvedByAnnotation]; user != "" {
		by = fmt.Sprintf("%s (%s)", user, by)
	}
	message := fmt.Sprintf("resolved as %s by %s: %s", resolution.Spec.Outcome, by, resolution.Spec.Reason)
	return transition{
		apply: func(a *v1alpha1.ToolAction) {
			switch resolution.Spec.Outcome {
			case v1alpha1.ResolvedSucceeded:
				setSucceeded(a, p.now, p.by, ReasonResolved, adapter.Outcome{ExternalRef: resolution.Spec.ExternalRef})
			case v1alpha1.ResolvedFailed:
				setFailed(a, p.now, p.by, v1alpha1.ErrorClassOutcomeUnknown, ReasonResolved, message)
			case v1alpha1.ResolvedRetrySafe:
				setRetryScheduled(a, p.now, p.now, p.by, ReasonResolved, message)
			}
			// Keep the operator's words in the history whatever the outcome,
			// under the reason that names the resolution as its author.
			last := &a.Status.History[len(a.Status.History)-1]
			last.Reason, last.Message = ReasonResolved, printable.Truncate(message, maxHistoryMessage)
		},
		events: []report{{eventType: corev1.EventTypeNormal, reason: ReasonResolved, verb: "Resolve", message: message, related: resolution}},
		tally:  tally{resolution: resolution.Spec.Outcome},
	}
}

// The transitions below record the outcome of a claimed attempt.

func (p rules) dispatched(claimed *v1alpha1.ToolAction, outcome adapter.Outcome) transition {
	message := "the downstream applied the request"
	if outcome.ExternalRef != "" {
		message += "; external reference " + outcome.ExternalRef
	}
	events := []report{{eventType: corev1.EventTypeNormal, reason: ReasonSucceeded, verb: "Dispatch", routine: true,
		message: fmt.Sprintf("attempt %d: %s", claimed.Status.Attempts, message)}}
	return transition{
		apply:        func(a *v1alpha1.ToolAction) { setSucceeded(a, p.now, p.by, ReasonSucceeded, outcome) },
		events:       append(events, outcomeNotes(claimed, "Dispatch", outcome)...),
		reapplyWhile: holdingClaim(claimed),
		tally:        replayTally(outcome),
	}
}

func (p rules) dispatchFailed(claimed *v1alpha1.ToolAction, class v1alpha1.ErrorClass, reason, message string) transition {
	return p.attemptOutcome(claimed, reason, message, 0, func(a *v1alpha1.ToolAction) {
		setFailed(a, p.now, p.by, class, reason, message)
	})
}

func (p rules) retryScheduled(claimed *v1alpha1.ToolAction, delay time.Duration, retryable *adapter.RetryableError) transition {
	return p.attemptOutcome(claimed, retryable.Reason, retryable.Error(), delay, func(a *v1alpha1.ToolAction) {
		setRetryScheduled(a, p.now, p.now.Add(delay), p.by, retryable.Reason, retryable.Error())
	})
}

// failureAfterUnknown: a later attempt failed, but an earlier one's outcome
// was never seen and may still apply (a held request answers every re-send
// under its key with 409 in progress, then commits), so the action is not
// Failed. A tool with a lookup call goes on looking the key up until its
// deadline; any other is escalated at once.
func (p rules) failureAfterUnknown(claimed *v1alpha1.ToolAction, tool *resolvedTool, reason, last string) transition {
	if tool.caps.Lookup {
		message := fmt.Sprintf("attempt %d failed (%s), but an earlier attempt's outcome is unknown and may still apply: the key is looked up until the tool's deadline of %s, then escalated",
			claimed.Status.Attempts, last, unknownDeadline(tool.tool))
		return p.dispatchUnknown(claimed, tool.caps, reason, message)
	}
	message := fmt.Sprintf("attempt %d failed (%s), but an earlier attempt's outcome was unknown and may have applied; resolve it with a ToolResolution",
		claimed.Status.Attempts, last)
	return p.attemptOutcome(claimed, ReasonOutcomeUnknown, message, 0, func(a *v1alpha1.ToolAction) {
		setEscalated(a, p.now, p.by, ReasonOutcomeUnknown, message)
	})
}

// dispatchUnknown: the downstream may still be working on the request, so
// the first lookup waits one attempt timeout, lest it report absent what is
// about to be committed.
func (p rules) dispatchUnknown(claimed *v1alpha1.ToolAction, caps adapter.Capabilities, reason, message string) transition {
	settle := attemptTimeout(caps)
	return p.attemptOutcome(claimed, reason, message, settle, func(a *v1alpha1.ToolAction) {
		setUnknown(a, p.now, p.by, reason, message)
		a.Status.NextAttemptTime = metaTimePtr(p.now.Add(settle))
	})
}

func (p rules) attemptOutcome(claimed *v1alpha1.ToolAction, reason, message string, requeue time.Duration, apply func(*v1alpha1.ToolAction)) transition {
	return transition{
		apply:        apply,
		events:       []report{warning(reason, "Dispatch", fmt.Sprintf("attempt %d: %s", claimed.Status.Attempts, message))},
		requeueAfter: requeue,
		reapplyWhile: holdingClaim(claimed),
	}
}

// holdingClaim: an attempt's outcome is recorded while the record is still
// this attempt's: Executing under its claim, or Unknown because the claim
// lapsed meanwhile, in which case this attempt's answer settles what the
// lapse left open.
func holdingClaim(claimed *v1alpha1.ToolAction) func(*v1alpha1.ToolAction) bool {
	claim := claimed.Status.Claim
	return func(latest *v1alpha1.ToolAction) bool {
		current, phase := latest.Status.Claim, latest.Status.Phase
		return (phase == v1alpha1.PhaseExecuting || phase == v1alpha1.PhaseUnknown) &&
			current != nil && claim != nil && current.Executor == claim.Executor && current.Attempt == claim.Attempt
	}
}

// compensatedBy records on the original that a compensation succeeded; a
// concurrent change of the original does not lose it.
func (p rules) compensatedBy(compensation *v1alpha1.ToolAction) transition {
	name := compensation.Name
	return transition{
		apply: func(a *v1alpha1.ToolAction) { setCompensatedBy(a, p.now, p.by, name) },
		events: []report{{eventType: corev1.EventTypeNormal, reason: ReasonCompensated, verb: "Compensate", related: compensation,
			message: "compensated by ToolAction " + name + "; the original effect happened and stays recorded"}},
		reapplyWhile: func(latest *v1alpha1.ToolAction) bool {
			return !slices.Contains(latest.Status.CompensatedBy, name) && len(latest.Status.CompensatedBy) < v1alpha1.MaxCompensations
		},
	}
}

// unsettledUnknown reports whether an earlier attempt of the action ended
// with an outcome the manager did not see (a timeout, a reset, a lapsed
// claim) that nothing settled since: it may have applied, or may still
// apply, whatever later attempts say. A resolver who found it safe to retry
// settles every unknown outcome before it; with absenceSettles, so does a
// lookup that found the key absent (AbsentByLookup), which proves that a
// re-send under the key is no repeat but not that the unseen request will
// never commit. When older history was dropped and nothing in the kept
// history settles it, an unknown outcome is assumed.
func unsettledUnknown(action *v1alpha1.ToolAction, absenceSettles bool) bool {
	history := action.Status.History
	for i := len(history) - 1; i >= 0; i-- {
		switch t := history[i]; {
		case absenceSettles && t.Reason == ReasonAbsentByLookup, t.Reason == ReasonResolved && t.To == v1alpha1.PhaseRetryScheduled:
			return false
		case t.To == v1alpha1.PhaseUnknown:
			return true
		}
	}
	return action.Status.DroppedTransitions > 0
}

func idempotencyKey(a *v1alpha1.ToolAction) string {
	if a.Status.IdempotencyKey != "" {
		return a.Status.IdempotencyKey
	}
	return v1alpha1.IdempotencyKey(a.Namespace, a.Name)
}

// settledBefore: the key's earlier record holds the same request,
// settled: the new action shows that outcome and is never dispatched.
func (p rules) settledBefore(e *earlierRecord, requestDigest string) transition {
	rec := e.Record
	message := fmt.Sprintf("this key settled the same request before: %s at %s", rec.Phase, rec.CompletionTime.UTC().Format(time.RFC3339))
	if rec.ExternalRef != "" {
		message += ", external reference " + rec.ExternalRef
	}
	message += fmt.Sprintf(" (%s: the record was %s at %s); it is not dispatched again", e.Where, deletedBecause(rec.Cause), rec.DeletionTime.UTC().Format(time.RFC3339))
	return transition{
		apply: func(a *v1alpha1.ToolAction) {
			a.Status.RequestDigest = requestDigest
			a.Status.IdempotencyKey = v1alpha1.IdempotencyKey(a.Namespace, a.Name)
			accept(a, p.now)
			a.Status.KeptUntil = rec.KeptUntil
			if rec.Phase == v1alpha1.PhaseSucceeded {
				succeed(a, p.now, p.by, e.settledReason, message, adapter.Outcome{ExternalRef: rec.ExternalRef, Result: e.Result})
				return
			}
			a.Status.ExternalRef = rec.ExternalRef
			setFailed(a, p.now, p.by, rec.ErrorClass, e.settledReason, message)
		},
		events: []report{{eventType: corev1.EventTypeNormal, reason: e.settledReason, verb: "Deduplicate", message: message}},
		tally:  tally{duplicate: e.source, firstCompleted: rec.CompletionTime.Time},
	}
}

// keyConflict: the key's earlier record holds another request; this one
// is refused as a duplicate key and never dispatched.
func (p rules) keyConflict(e *earlierRecord, requestDigest string) transition {
	rec := e.Record
	message := fmt.Sprintf("this key settled a different request before (digest %s, %s at %s; %s); this request, digest %s, is not dispatched: use a new name for a new intent",
		rec.RequestDigest, rec.Phase, rec.CompletionTime.UTC().Format(time.RFC3339), e.Where, requestDigest)
	return transition{
		apply: func(a *v1alpha1.ToolAction) {
			a.Status.RequestDigest = requestDigest
			a.Status.IdempotencyKey = v1alpha1.IdempotencyKey(a.Namespace, a.Name)
			a.Status.KeptUntil = rec.KeptUntil
			setRejected(a, p.now, p.by, v1alpha1.ErrorClassDuplicateConflict, e.conflictReason, message)
		},
		events: []report{warning(e.conflictReason, "Validate", message)},
		tally:  tally{conflict: e.source},
	}
}

func deletedBecause(cause string) string {
	if cause == v1alpha1.TombstoneCauseRecordRetention {
		return "retired by the tool's recordRetention"
	}
	return "deleted"
}
