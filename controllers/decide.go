package controllers

import (
	"errors"
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/keyhistory"
	"github.com/toolledger/toolledger/internal/retention"
	"github.com/toolledger/toolledger/pkg/adapter"
)

// rules are the state machine's decisions: what to do next with an action,
// and what an adapter's answer means for the ledger. They read the record,
// the tool and its adapter's capabilities, an injected time and jitter, and
// nothing else: no client, no adapter call. The step files carry them out.
type rules struct {
	now time.Time
	// by names the executor for the history.
	by string
	// random returns jitter in [0, 1) for backoff.
	random func() float64
	// keepsEveryRecord: every finished record is kept (archived) before it
	// leaves etcd, not only those whose key it guards.
	keepsEveryRecord bool
}

// resolvedTool is the action's tool with its adapter's capabilities, or why
// it cannot be had: an *invalidError, or a transient error to retry.
type resolvedTool struct {
	tool    *v1alpha1.Tool
	adapter adapter.Adapter
	caps    adapter.Capabilities
	err     error
}

type stepKind int

const (
	// stepWait: nothing to do until after (never, when zero).
	stepWait stepKind = iota
	// stepResolveTool: a rule needs the tool; resolve it and decide again.
	stepResolveTool
	// stepFail: return err, so the action is retried with backoff.
	stepFail
	// stepRelease: remove the finalizer of an action being deleted.
	stepRelease
	// stepBury: write the tombstone of an action being deleted, then
	// remove its finalizer.
	stepBury
	// stepRecord: commit the transition record.
	stepRecord
	// stepFinish: a finished action; link its compensation, apply retention.
	stepFinish
	// stepLookup: ask the downstream for the outcome by key.
	stepLookup
	// stepAttempt: verify, claim and dispatch the next attempt.
	stepAttempt
)

// step is what a rule decided.
type step struct {
	kind  stepKind
	after time.Duration
	err   error
	// reason says why an attempt happens, for the history.
	reason string
	record transition
}

// unknownPolicy is what the controller may do about an unknown outcome.
type unknownPolicy int

const (
	// lookUp asks the downstream by key; absent means retry under the same key.
	lookUp unknownPolicy = iota
	// redispatch re-sends under the same key: the downstream deduplicates
	// (KeyProtected) or a repeat is harmless (ReadOnly, NaturallyIdempotent).
	redispatch
	// escalate hands the action to a human at once.
	escalate
)

// policyForUnknown follows the tool's idempotency class. NonRepeatable tools
// escalate at once, whatever else they offer; others prefer a lookup, which
// proves the outcome, to a re-send, which only repeats it safely.
func policyForUnknown(class v1alpha1.IdempotencyClass, caps adapter.Capabilities) unknownPolicy {
	switch {
	case class == v1alpha1.NonRepeatable:
		return escalate
	case caps.Lookup:
		return lookUp
	case class == v1alpha1.KeyProtected || class == v1alpha1.ReadOnly || class == v1alpha1.NaturallyIdempotent:
		return redispatch
	default:
		return escalate
	}
}

// decide returns the next step for the action. tool is nil until a rule
// asks for it (stepResolveTool), so that the steps that need no tool, such
// as waiting out a claim's lease, read nothing else.
func (p rules) decide(a *v1alpha1.ToolAction, tool *resolvedTool) step {
	if !a.DeletionTimestamp.IsZero() && !mayHaveApplied(a.Status.Phase) {
		return p.decideDeleted(a, tool)
	}
	switch a.Status.Phase {
	case v1alpha1.PhaseEscalated:
		// Escalated actions wait for a ToolResolution.
		return step{kind: stepWait}
	case v1alpha1.PhaseExecuting:
		return p.decideExecuting(a)
	case v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed:
		return p.decideFinished(tool)
	case v1alpha1.PhaseUnknown:
		return p.decideUnknown(a, tool)
	case v1alpha1.PhaseRetryScheduled:
		if wait := p.until(a.Status.NextAttemptTime); wait > 0 {
			return step{kind: stepWait, after: wait}
		}
	}
	return p.decideAttempt(a, tool, ReasonExecuting)
}

// mayHaveApplied reports whether an effect may be under way or may have
// happened without a record of its outcome: such actions keep their
// finalizer through a deletion until the outcome is known.
func mayHaveApplied(phase v1alpha1.Phase) bool {
	return phase == v1alpha1.PhaseExecuting || phase == v1alpha1.PhaseUnknown || phase == v1alpha1.PhaseEscalated
}

// decideDeleted: a deleted action that may have caused an effect leaves a
// tombstone, unless its tool's keyRetention has passed already; one that
// caused nothing just goes. A tool that is gone keeps the tombstone. With
// an archive, every finished action is archived before it goes.
func (p rules) decideDeleted(a *v1alpha1.ToolAction, tool *resolvedTool) step {
	switch {
	case !keyhistory.NeedsTombstone(a) && (!p.keepsEveryRecord || !a.Status.Phase.IsTerminal()):
		return step{kind: stepRelease}
	case tool == nil:
		return step{kind: stepResolveTool}
	case tool.err != nil && !isInvalid(tool.err):
		return step{kind: stepFail, err: tool.err}
	case !p.keepsEveryRecord && tool.err == nil && retention.KeyPassed(a.Status.CompletionTime.Time, a.Status.KeptUntil, tool.tool, p.now):
		return step{kind: stepRelease}
	}
	return step{kind: stepBury}
}

// decideExecuting: while the claim's lease runs its executor may still be
// dispatching; once it lapses the request may or may not have been sent, so
// the outcome is Unknown, never a blind re-send.
func (p rules) decideExecuting(a *v1alpha1.ToolAction) step {
	claim := a.Status.Claim
	if claim != nil {
		if wait := claim.LeaseExpiry.Sub(p.now); wait > 0 {
			return step{kind: stepWait, after: wait}
		}
	}
	return step{kind: stepRecord, record: p.lapse(claim)}
}

// decideFinished: a finished action's compensation link and retention
// follow. Without its tool there is no retention to apply, and the record
// is kept; the link is made all the same.
func (p rules) decideFinished(tool *resolvedTool) step {
	switch {
	case tool == nil:
		return step{kind: stepResolveTool}
	case tool.err != nil && !isInvalid(tool.err):
		return step{kind: stepFail, err: tool.err}
	}
	return step{kind: stepFinish}
}

// decideUnknown settles an outcome that may or may not have applied,
// following the tool's class: look the key up, re-send under the same key,
// or escalate to a human.
func (p rules) decideUnknown(a *v1alpha1.ToolAction, tool *resolvedTool) step {
	if tool == nil {
		return step{kind: stepResolveTool}
	}
	var invalid *invalidError
	if errors.As(tool.err, &invalid) {
		return step{kind: stepRecord, record: p.escalation(invalid.reason, invalid.message+"; the outcome cannot be looked up")}
	} else if tool.err != nil {
		return step{kind: stepFail, err: tool.err}
	}
	policy := policyForUnknown(tool.tool.Spec.IdempotencyClass, tool.caps)
	if wait := p.until(a.Status.NextAttemptTime); policy != escalate && wait > 0 {
		return step{kind: stepWait, after: wait}
	}
	switch policy {
	case escalate:
		why := "a NonRepeatable tool is never repeated or settled automatically"
		if tool.tool.Spec.IdempotencyClass != v1alpha1.NonRepeatable {
			why = fmt.Sprintf("a %s tool without a lookup call is never repeated automatically", tool.tool.Spec.IdempotencyClass)
		}
		return step{kind: stepRecord, record: p.escalation(ReasonOutcomeUnknown, fmt.Sprintf(
			"the outcome of attempt %d is unknown and %s; resolve it with a ToolResolution", a.Status.Attempts, why))}
	case redispatch:
		deleting, spent := !a.DeletionTimestamp.IsZero(), a.Status.Attempts >= maxAttempts(tool.tool)
		if deleting || spent {
			return step{kind: stepRecord, record: p.escalation(ReasonOutcomeUnknown, fmt.Sprintf(
				"the outcome of attempt %d is unknown and no further attempt is made (deleting: %t, attempts spent: %t)", a.Status.Attempts, deleting, spent))}
		}
		return p.decideAttempt(a, tool, ReasonRedispatch)
	}
	return step{kind: stepLookup}
}

// decideAttempt checks what can be checked before anything is read for an
// attempt: the tool exists, and its adapter can send the action's key.
func (p rules) decideAttempt(a *v1alpha1.ToolAction, tool *resolvedTool, reason string) step {
	if tool == nil {
		return step{kind: stepResolveTool}
	}
	var invalid *invalidError
	if errors.As(tool.err, &invalid) {
		return step{kind: stepRecord, record: p.refusal(a, invalid)}
	} else if tool.err != nil {
		return step{kind: stepFail, err: tool.err}
	}
	key := v1alpha1.IdempotencyKey(a.Namespace, a.Name)
	if limit := tool.caps.MaxKeyLength; limit > 0 && len(key) > limit {
		message := fmt.Sprintf("the idempotency key %q has %d characters; the tool's %s adapter sends at most %d",
			key, len(key), v1alpha1.AdapterName(&tool.tool.Spec), limit)
		if a.Status.Attempts > 0 {
			// An earlier attempt went out under this key and may have
			// applied: failing the action would be a guess.
			return step{kind: stepRecord, record: p.escalation(ReasonKeyTooLong, message+"; an earlier attempt may have applied")}
		}
		return step{kind: stepRecord, record: p.rejection(&invalidError{class: v1alpha1.ErrorClassInvalidInput, reason: ReasonKeyTooLong, message: message})}
	}
	if expiry := downstreamKeyExpiry(a, tool.tool); !expiry.IsZero() && !p.now.Before(expiry) && reason != ReasonAbsentByLookup &&
		tool.tool.Spec.IdempotencyClass == v1alpha1.KeyProtected && (a.Status.Phase == v1alpha1.PhaseUnknown || unsettledUnknown(a, true)) {
		// A KeyProtected downstream deduplicates no more by the key: a
		// re-send could apply twice. A lookup that found the effect absent
		// proved a re-send safe; a tool with a lookup call gets there by
		// one. (A ReadOnly or NaturallyIdempotent repeat is harmless.)
		return step{kind: stepRecord, record: p.escalation(ReasonDownstreamKeyExpired, fmt.Sprintf(
			"an earlier attempt's outcome is unknown, and the downstream kept its idempotency key until %s (the tool's downstreamKeyRetention from the first attempt): a re-send could apply twice; resolve it with a ToolResolution",
			expiry.UTC().Format(time.RFC3339)))}
	}
	return step{kind: stepAttempt, reason: reason}
}

// downstreamKeyExpiry is when the downstream forgets the key of a's
// attempts: the earlier of the date its answers stated and the tool's
// downstreamKeyRetention now, counted from the first attempt; zero when
// neither says.
func downstreamKeyExpiry(a *v1alpha1.ToolAction, tool *v1alpha1.Tool) time.Time {
	var expiry time.Time
	if stated := a.Status.DownstreamKeptUntil; stated != nil {
		expiry = stated.Time
	}
	if d := tool.Spec.DownstreamKeyRetention; d != nil && a.Status.StartTime != nil {
		if now := a.Status.StartTime.Add(d.Duration); expiry.IsZero() || now.Before(expiry) {
			expiry = now
		}
	}
	return expiry
}

// afterLookup decides what a lookup's answer means: found is Succeeded,
// absent is a new attempt under the same key, anything else is looked up
// again with backoff until the tool's deadline, then escalated.
func (p rules) afterLookup(a *v1alpha1.ToolAction, tool *resolvedTool, outcome adapter.Outcome, lookupErr error) step {
	deleting, spent := !a.DeletionTimestamp.IsZero(), a.Status.Attempts >= maxAttempts(tool.tool)
	switch {
	case lookupErr == nil:
		return step{kind: stepRecord, record: p.found(a, bounded(outcome))}
	case errors.Is(lookupErr, adapter.ErrNotFound) && deleting:
		// Nothing applied and nobody wants it any more.
		return step{kind: stepRelease}
	case errors.Is(lookupErr, adapter.ErrNotFound) && !spent:
		return p.decideAttempt(a, tool, ReasonAbsentByLookup)
	case errors.Is(lookupErr, adapter.ErrLookupWindowClosed):
		return step{kind: stepRecord, record: p.escalation(ReasonLookupWindowClosed, fmt.Sprintf(
			"the outcome of attempt %d can no longer be proved, and a re-send could apply twice: %v; resolve it with a ToolResolution",
			a.Status.Attempts, lookupErr))}
	case errors.Is(lookupErr, adapter.ErrLookupUnsupported):
		// The adapter promised a lookup it cannot make: settle by the class alone.
		without := *tool
		without.caps.Lookup = false
		return p.decideUnknown(a, &without)
	}
	// Inconclusive, or absent with every attempt spent: a lookup's "absent"
	// is only what the downstream holds now, and the unseen request may
	// still commit, so the key is looked up again rather than failed.
	deadline := p.now.Add(unknownDeadline(tool.tool))
	if since := a.Status.UnknownSince; since != nil {
		deadline = since.Add(unknownDeadline(tool.tool))
	}
	if !p.now.Before(deadline) {
		return step{kind: stepRecord, record: p.escalation(ReasonOutcomeUnknown, fmt.Sprintf(
			"no lookup proved the outcome of attempt %d within the tool's deadline of %s (%d lookups; last: %v); resolve it with a ToolResolution",
			a.Status.Attempts, unknownDeadline(tool.tool), a.Status.Lookups+1, lookupErr))}
	}
	delay := min(backoff(tool.tool, a.Status.Lookups+1, 0, p.random), deadline.Sub(p.now))
	return step{kind: stepRecord, record: p.lookupScheduled(a, delay, lookupErr)}
}

// afterDispatch maps an adapter's answer to the ledger. This is the only
// place where adapter errors become error classes. Failed is recorded only
// when the downstream definitely refused the action: once an earlier
// attempt's outcome went unseen, no later refusal proves that it will not
// apply.
func (p rules) afterDispatch(claimed *v1alpha1.ToolAction, tool *resolvedTool, outcome adapter.Outcome, dispatchErr error) transition {
	var (
		permanent *adapter.PermanentError
		retryable *adapter.RetryableError
		ambiguous *adapter.AmbiguousError
	)
	attempt := claimed.Status.Attempts
	isPermanent, isRetryable := errors.As(dispatchErr, &permanent), errors.As(dispatchErr, &retryable)
	switch {
	case dispatchErr == nil:
		return p.dispatched(claimed, bounded(outcome))
	case isRetryable && attempt < maxAttempts(tool.tool):
		delay := backoff(tool.tool, attempt, retryable.RetryAfter, p.random)
		return p.retryScheduled(claimed, delay, retryable)
	case isPermanent && unsettledUnknown(claimed, false):
		return p.failureAfterUnknown(claimed, tool, permanent.Reason, permanent.Error())
	case isRetryable && unsettledUnknown(claimed, false):
		// A 409 may mean the earlier request is being applied right now.
		return p.failureAfterUnknown(claimed, tool, retryable.Reason, retryable.Error())
	case isPermanent:
		class := v1alpha1.ErrorClassInvalidInput
		if permanent.Kind == adapter.Denied {
			class = v1alpha1.ErrorClassDenied
		}
		return p.dispatchFailed(claimed, class, permanent.Reason, permanent.Error())
	case isRetryable:
		return p.dispatchFailed(claimed, v1alpha1.ErrorClassRetriesExhausted, retryable.Reason,
			fmt.Sprintf("%d of %d attempts failed; last: %s", attempt, maxAttempts(tool.tool), retryable.Error()))
	}
	// An adapter that cannot say what happened leaves the outcome unknown.
	reason, message := ReasonUnclassifiedError, dispatchErr.Error()
	if errors.As(dispatchErr, &ambiguous) {
		reason, message = ambiguous.Reason, ambiguous.Error()
	}
	return p.dispatchUnknown(claimed, tool.caps, reason, message+"; the request may have applied, so it is not re-sent blindly")
}

// beforeConnect decides an attempt from its facts, in this order: a
// refused schema or request rejects the action; a key this manager cannot
// check (the ledger is bound to an archive it does not use, the archive is
// down or behind what left etcd, or an earlier life of the namespace holds
// the key) waits; a key that settled before answers it (the same request)
// or refuses it (another); a compensation waits for its original to
// succeed, or is refused when there is nothing to compensate; an approval
// holds it. It returns the transition that records the decision, an error
// to retry, or neither: the action may connect and be claimed.
func (p rules) beforeConnect(a *v1alpha1.ToolAction, f attemptFacts) (*transition, error) {
	var (
		invalid *invalidError
		t       transition
	)
	switch {
	case errors.As(f.refused, &invalid):
		t = p.refusal(a, invalid)
	case f.refused != nil:
		return nil, f.refused
	case f.unbound != nil:
		t = p.waiting(f.requestDigest, ReasonArchiveRequired, fmt.Sprintf("waiting to check key %s: %v", a.Name, f.unbound))
	case f.unchecked != nil:
		t = p.waiting(f.requestDigest, ReasonArchiveUnavailable,
			fmt.Sprintf("waiting for the archive to check key %s before the first dispatch: %v", a.Name, f.unchecked))
	case f.behind != nil:
		t = p.waiting(f.requestDigest, ReasonArchiveBehind,
			fmt.Sprintf("waiting to check key %s: %v; the key may be one of those lost, so it waits until the archive catches up or an operator acknowledges the loss (kubectl toolledger archive status)", a.Name, f.behind))
	case f.earlierLife != nil:
		t = p.waiting(f.requestDigest, ReasonEarlierNamespaceKey, f.earlierLife.Error())
	case f.earlier != nil && f.earlier.Record.RequestDigest == f.requestDigest:
		t = p.settledBefore(f.earlier, f.requestDigest)
	case f.earlier != nil:
		t = p.keyConflict(f.earlier, f.requestDigest)
	default:
		if held := p.compensationGate(a, f.original, f.requestDigest); held != nil {
			return held, nil
		}
		if f.targetErr != nil {
			return nil, fmt.Errorf("cannot digest the target of tool %q: %w", a.Spec.ToolRef.Name, f.targetErr)
		}
		return p.approvalGate(a, f.target, f.requestDigest), nil
	}
	return &t, nil
}

// compensationGate requires a compensation's original to have succeeded:
// there is nothing to offset otherwise. While the original is in flight
// the compensation waits. A new compensation is refused once the original
// lists as many as it can hold; one already sent goes on. An original whose
// record is gone may still be compensated when its tombstone shows it
// succeeded. nil lets the action go on.
func (p rules) compensationGate(a *v1alpha1.ToolAction, original *compensated, requestDigest string) *transition {
	if original == nil {
		return nil
	}
	reject := func(format string, args ...any) *transition {
		t := p.rejection(&invalidError{class: v1alpha1.ErrorClassInvalidInput, reason: ReasonCompensationInvalid, message: fmt.Sprintf(format, args...)})
		return &t
	}
	if original.record == nil {
		switch {
		case original.kept == nil:
			return reject("spec.compensates: ToolAction %q not found in namespace %q, and no tombstone of it either", original.name, a.Namespace)
		case original.kept.Record.Phase != v1alpha1.PhaseSucceeded:
			return reject("spec.compensates: ToolAction %q failed (%s says %s), so there is no effect to compensate", original.name, original.kept.Where, original.kept.Record.ErrorClass)
		}
		return nil
	}
	switch rec := original.record; rec.Status.Phase {
	case v1alpha1.PhaseSucceeded:
		if a.Status.Attempts == 0 && len(rec.Status.CompensatedBy) >= v1alpha1.MaxCompensations && !slices.Contains(rec.Status.CompensatedBy, a.Name) {
			return reject("spec.compensates: ToolAction %q has %d compensations already, the most it records", original.name, len(rec.Status.CompensatedBy))
		}
		return nil
	case v1alpha1.PhaseFailed:
		return reject("spec.compensates: ToolAction %q failed, so there is no effect to compensate", original.name)
	default:
		held := p.waiting(requestDigest, ReasonCompensationPending,
			fmt.Sprintf("waiting for ToolAction %q to succeed before compensating it (it is %s)", original.name, phaseOrPending(rec.Status.Phase)))
		return &held
	}
}

// notConnected waits for a tool whose adapter cannot connect yet (a
// missing Secret, an unknown resource).
func (p rules) notConnected(a *v1alpha1.ToolAction, requestDigest string, err error) transition {
	return p.waiting(requestDigest, ReasonToolNotReady, fmt.Sprintf("tool %q cannot be used yet: %v", a.Spec.ToolRef.Name, err))
}

// approvalGate holds an action that needs an approval it does not carry:
// its tool requires one now, or required one when the action was accepted
// (the requirement is sticky: editing the tool does not release an action
// held for approval), and no approval of this request and of the target
// its tool names now was applied. nil lets it be dispatched.
func (p rules) approvalGate(a *v1alpha1.ToolAction, target v1alpha1.TargetRecord, requestDigest string) *transition {
	if !target.ApprovalRequired {
		return nil
	}
	var held transition
	switch approval := a.Status.Approval; {
	case approval == nil || approval.Decision != v1alpha1.Approved || approval.RequestDigest != requestDigest:
		// The ToolApproval controller applies a matching approval.
		held = p.awaitingApproval(a, requestDigest, target)
	case approval.TargetDigest != target.Digest:
		held = p.targetChanged(a, requestDigest, target)
	default:
		return nil
	}
	return &held
}

// targetOf is what the tool names now, for the action: its approval
// requirement, sticky once recorded, and its target's digest.
func targetOf(a *v1alpha1.ToolAction, tool *v1alpha1.Tool) (v1alpha1.TargetRecord, error) {
	digest, err := targetDigest(&tool.Spec)
	if err != nil {
		return v1alpha1.TargetRecord{}, err
	}
	recorded := a.Status.Target
	return v1alpha1.TargetRecord{
		ApprovalRequired: tool.Spec.ApprovalRequired || (recorded != nil && recorded.ApprovalRequired),
		Digest:           digest,
	}, nil
}

// sendBudget is how long a claimed attempt may still take: until its
// lease ends less margin, on this executor's clock, and at most the
// attempt timeout. Zero or less means the attempt must not be sent: another
// replica, whose clock may run up to margin ahead, may already take the
// lease for lapsed and look the key up, and would find nothing yet.
func (p rules) sendBudget(claim *v1alpha1.ExecutorClaim, caps adapter.Capabilities, margin time.Duration) time.Duration {
	if claim == nil {
		return 0
	}
	return min(claim.LeaseExpiry.Add(-margin).Sub(p.now), attemptTimeout(caps))
}

// until is how long until t; zero when t is unset or past.
func (p rules) until(t *metav1.Time) time.Duration {
	if t == nil {
		return 0
	}
	return max(t.Sub(p.now), 0)
}

// bounded keeps what the ledger can hold of an adapter's outcome: an
// external reference longer than status.externalRef admits is not stored,
// rather than stored cut (a cut reference names nothing), and says so.
func bounded(outcome adapter.Outcome) adapter.Outcome {
	if n := len(outcome.ExternalRef); n > maxExternalRef {
		outcome.ExternalRef = ""
		outcome.Warnings = append(outcome.Warnings, fmt.Sprintf("the downstream's external reference of %d bytes exceeds %d bytes; not stored", n, maxExternalRef))
	}
	return outcome
}
