package controllers

import (
	"slices"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/printable"
	"github.com/toolledger/toolledger/pkg/adapter"
)

// Condition, event and history reasons that the controller itself decides;
// adapter reasons (HTTP503, Timeout, ...) are recorded as the adapter names them.
const (
	ReasonAccepted           = "Accepted"
	ReasonExecuting          = "Executing"
	ReasonSucceeded          = "Succeeded"
	ReasonFoundByLookup      = v1alpha1.ReasonFoundByLookup
	ReasonAbsentByLookup     = "AbsentByLookup"
	ReasonLookupWindowClosed = "LookupWindowClosed"
	// ReasonDownstreamKeyExpired: an attempt's outcome is unknown and the
	// downstream no longer keeps the key a re-send would go under.
	ReasonDownstreamKeyExpired = "DownstreamKeyExpired"
	ReasonReplayedByDownstream = "ReplayedByDownstream"
	ReasonLookupFailed         = "LookupFailed"
	ReasonRetryScheduled       = "RetryScheduled"
	ReasonRedispatch           = "RedispatchUnderSameKey"
	ReasonOutcomeUnknown       = "OutcomeUnknown"
	ReasonEscalated            = "Escalated"
	ReasonLeaseExpired         = "LeaseExpired"
	ReasonUnclassifiedError    = "UnclassifiedError"
	ReasonToolNotFound         = "ToolNotFound"
	ReasonToolNotReady         = "ToolNotReady"
	ReasonToolNotAdmitted      = "ToolNotAdmitted"
	ReasonAwaitingApproval     = "AwaitingApproval"
	ReasonApproved             = "Approved"
	ReasonApprovalDenied       = "ApprovalDenied"
	// ReasonTargetChanged: the tool's adapter configuration changed since
	// the action's approval; it waits for a new one.
	ReasonTargetChanged = "TargetChanged"
	// ReasonLeaseSpent: the claim's lease ran out before the attempt was
	// sent, so it was not sent.
	ReasonLeaseSpent            = "LeaseSpentBeforeSend"
	ReasonInvalidToolContract   = "InvalidToolContract"
	ReasonInvalidParameters     = "InvalidParameters"
	ReasonRequestDigestMismatch = "RequestDigestMismatch"
	ReasonRequestChanged        = "RequestChanged"
	ReasonIncompleteResponse    = "IncompleteResponse"
	ReasonResolved              = "Resolved"
	ReasonCompensated           = "Compensated"
	ReasonCompensationPending   = "CompensationTargetPending"
	ReasonCompensationInvalid   = "CompensationTargetInvalid"
	// ReasonCompensationNotListed: a compensation succeeded that the
	// original's full status.compensatedBy cannot list.
	ReasonCompensationNotListed = "CompensationNotListed"
	ReasonDeletedBeforeDispatch = "DeletedBeforeDispatch"
	ReasonKeyTooLong            = "KeyTooLong"
	ReasonSettledByTombstone    = v1alpha1.ReasonSettledByTombstone
	ReasonTombstoneConflict     = v1alpha1.ReasonTombstoneConflict
	ReasonSettledByArchive      = v1alpha1.ReasonSettledByArchive
	ReasonArchiveConflict       = v1alpha1.ReasonArchiveConflict
	ReasonArchiveUnavailable    = v1alpha1.ReasonArchiveUnavailable
	ReasonArchiveRequired       = v1alpha1.ReasonArchiveRequired
	ReasonArchiveBehind         = v1alpha1.ReasonArchiveBehind
	ReasonEarlierNamespaceKey   = v1alpha1.ReasonEarlierNamespaceKey
)

// The set* functions below are the only writers of phase, conditions and
// history, so that the three never disagree. Conditions follow kstatus:
// Reconciling=True while work is under way, Ready=True and Succeeded=True on
// success, Stalled=True on a final failure or an escalation. `by` names the
// executor (or resolution) making the transition, for the history.

func setExecuting(a *v1alpha1.ToolAction, now time.Time, by, reason, message string) {
	accept(a, now)
	a.Status.Error = nil
	a.Status.NextAttemptTime = nil
	a.Status.UnknownSince = nil
	a.Status.Lookups = 0
	inProgress(a, now, v1alpha1.PhaseExecuting, reason, message, by)
}

func setRetryScheduled(a *v1alpha1.ToolAction, now, at time.Time, by, reason, message string) {
	a.Status.NextAttemptTime = metaTimePtr(at)
	a.Status.Error = &v1alpha1.ActionError{Class: v1alpha1.ErrorClassProviderUnavailable, Reason: reason, Message: message}
	inProgress(a, now, v1alpha1.PhaseRetryScheduled, ReasonRetryScheduled,
		"attempt definitely not applied ("+reason+"); next attempt at "+at.UTC().Format(time.RFC3339), by)
}

// setUnknown records that the last attempt may have applied. The first
// lookup runs at once.
func setUnknown(a *v1alpha1.ToolAction, now time.Time, by, reason, message string) {
	a.Status.Error = &v1alpha1.ActionError{Class: v1alpha1.ErrorClassOutcomeUnknown, Reason: reason, Message: message}
	if a.Status.UnknownSince == nil {
		a.Status.UnknownSince = metaTimePtr(now)
	}
	a.Status.NextAttemptTime = nil
	inProgress(a, now, v1alpha1.PhaseUnknown, ReasonOutcomeUnknown, message, by)
}

// setLookupScheduled keeps an Unknown action whose lookup was inconclusive.
func setLookupScheduled(a *v1alpha1.ToolAction, now, at time.Time, message string) {
	a.Status.Lookups++
	a.Status.NextAttemptTime = metaTimePtr(at)
	set(a, now, v1alpha1.ConditionReconciling, metav1.ConditionTrue, ReasonLookupFailed, message)
}

// setEscalated hands an action whose outcome cannot be proven to a human.
func setEscalated(a *v1alpha1.ToolAction, now time.Time, by, reason, message string) {
	from := a.Status.Phase
	a.Status.Phase = v1alpha1.PhaseEscalated
	a.Status.NextAttemptTime = nil
	a.Status.Error = &v1alpha1.ActionError{Class: v1alpha1.ErrorClassOutcomeUnknown, Reason: reason, Message: message}
	set(a, now, v1alpha1.ConditionSucceeded, metav1.ConditionUnknown, ReasonOutcomeUnknown, message)
	set(a, now, v1alpha1.ConditionReady, metav1.ConditionFalse, ReasonOutcomeUnknown, message)
	set(a, now, v1alpha1.ConditionStalled, metav1.ConditionTrue, ReasonOutcomeUnknown, message)
	meta.RemoveStatusCondition(&a.Status.Conditions, v1alpha1.ConditionReconciling)
	record(a, now, from, reason, message, by)
}

// setWaiting keeps an accepted action that cannot be dispatched yet.
func setWaiting(a *v1alpha1.ToolAction, now time.Time, requestDigest, reason, message string) {
	phase := a.Status.Phase
	if phase == "" || phase == v1alpha1.PhasePending {
		phase = v1alpha1.PhaseAccepted
	}
	hold(a, now, phase, requestDigest, reason, message)
}

// setAwaitingApproval holds an accepted action until an approval of its
// digest and target is applied. reason is AwaitingApproval, or
// TargetChanged when an earlier approval no longer holds (it is kept in the
// history, and no longer in status.approval).
func setAwaitingApproval(a *v1alpha1.ToolAction, now time.Time, requestDigest string, target v1alpha1.TargetRecord, reason, message string) {
	a.Status.Target = &target
	a.Status.Approval = nil
	hold(a, now, v1alpha1.PhaseAwaitingApproval, requestDigest, reason, message)
	set(a, now, v1alpha1.ConditionApproved, metav1.ConditionUnknown, reason, message)
}

func hold(a *v1alpha1.ToolAction, now time.Time, phase v1alpha1.Phase, requestDigest, reason, message string) {
	a.Status.RequestDigest = requestDigest
	a.Status.IdempotencyKey = v1alpha1.IdempotencyKey(a.Namespace, a.Name)
	accept(a, now)
	inProgress(a, now, phase, reason, message, "")
}

// setApproved records the approval and makes the action dispatchable.
func setApproved(a *v1alpha1.ToolAction, now time.Time, by string, approval v1alpha1.ApprovalRecord, message string) {
	a.Status.Approval = &approval
	set(a, now, v1alpha1.ConditionApproved, metav1.ConditionTrue, ReasonApproved, message)
	inProgress(a, now, v1alpha1.PhaseAccepted, ReasonApproved, message, by)
}

// setDenied records the denial: a final failure, never dispatched.
func setDenied(a *v1alpha1.ToolAction, now time.Time, by string, approval v1alpha1.ApprovalRecord, message string) {
	a.Status.Approval = &approval
	setFailed(a, now, by, v1alpha1.ErrorClassDenied, ReasonApprovalDenied, message)
	set(a, now, v1alpha1.ConditionApproved, metav1.ConditionFalse, ReasonApprovalDenied, message)
}

func setSucceeded(a *v1alpha1.ToolAction, now time.Time, by, reason string, outcome adapter.Outcome) {
	message := "the downstream applied the request"
	if outcome.ExternalRef != "" {
		message += "; external reference " + outcome.ExternalRef
	}
	succeed(a, now, by, reason, message, outcome)
}

func succeed(a *v1alpha1.ToolAction, now time.Time, by, reason, message string, outcome adapter.Outcome) {
	from := a.Status.Phase
	a.Status.Phase = v1alpha1.PhaseSucceeded
	a.Status.ExternalRef = outcome.ExternalRef
	a.Status.ReplayedByDownstream = outcome.Replayed
	if len(outcome.Result) > 0 {
		a.Status.Result = &apiextensionsv1.JSON{Raw: outcome.Result}
	}
	a.Status.Error = nil
	a.Status.NextAttemptTime = nil
	a.Status.CompletionTime = metaTimePtr(now)
	set(a, now, v1alpha1.ConditionSucceeded, metav1.ConditionTrue, reason, message)
	set(a, now, v1alpha1.ConditionReady, metav1.ConditionTrue, reason, message)
	meta.RemoveStatusCondition(&a.Status.Conditions, v1alpha1.ConditionReconciling)
	meta.RemoveStatusCondition(&a.Status.Conditions, v1alpha1.ConditionStalled)
	record(a, now, from, reason, message, by)
}

func setFailed(a *v1alpha1.ToolAction, now time.Time, by string, class v1alpha1.ErrorClass, reason, message string) {
	from := a.Status.Phase
	a.Status.Phase = v1alpha1.PhaseFailed
	a.Status.Error = &v1alpha1.ActionError{Class: class, Reason: reason, Message: printable.Truncate(message, maxErrorMessage)}
	a.Status.NextAttemptTime = nil
	a.Status.CompletionTime = metaTimePtr(now)
	set(a, now, v1alpha1.ConditionSucceeded, metav1.ConditionFalse, string(class), message)
	set(a, now, v1alpha1.ConditionReady, metav1.ConditionFalse, string(class), message)
	set(a, now, v1alpha1.ConditionStalled, metav1.ConditionTrue, string(class), message)
	meta.RemoveStatusCondition(&a.Status.Conditions, v1alpha1.ConditionReconciling)
	record(a, now, from, reason, message, by)
}

// setRejected records a failure found before any dispatch: the request was
// never accepted.
func setRejected(a *v1alpha1.ToolAction, now time.Time, by string, class v1alpha1.ErrorClass, reason, message string) {
	setFailed(a, now, by, class, reason, message)
	set(a, now, v1alpha1.ConditionAccepted, metav1.ConditionFalse, reason, message)
}

// setCompensatedBy records on the original that a compensation succeeded,
// once.
func setCompensatedBy(a *v1alpha1.ToolAction, now time.Time, by, compensation string) {
	if slices.Contains(a.Status.CompensatedBy, compensation) || len(a.Status.CompensatedBy) >= v1alpha1.MaxCompensations {
		return
	}
	a.Status.CompensatedBy = append(a.Status.CompensatedBy, compensation)
	message := "compensated by ToolAction " + compensation + "; the original effect happened and stays recorded"
	set(a, now, v1alpha1.ConditionCompensated, metav1.ConditionTrue, ReasonCompensated, message)
	record(a, now, a.Status.Phase, ReasonCompensated, message, by)
}

func accept(a *v1alpha1.ToolAction, now time.Time) {
	set(a, now, v1alpha1.ConditionAccepted, metav1.ConditionTrue, ReasonAccepted,
		"request validated; digest "+a.Status.RequestDigest)
}

func inProgress(a *v1alpha1.ToolAction, now time.Time, phase v1alpha1.Phase, reason, message, by string) {
	from := a.Status.Phase
	a.Status.Phase = phase
	set(a, now, v1alpha1.ConditionReconciling, metav1.ConditionTrue, reason, message)
	set(a, now, v1alpha1.ConditionSucceeded, metav1.ConditionUnknown, reason, message)
	set(a, now, v1alpha1.ConditionReady, metav1.ConditionUnknown, reason, message)
	meta.RemoveStatusCondition(&a.Status.Conditions, v1alpha1.ConditionStalled)
	if from != phase {
		record(a, now, from, reason, message, by)
	}
}

// record appends to the history, dropping the oldest entries past MaxHistory.
func record(a *v1alpha1.ToolAction, now time.Time, from v1alpha1.Phase, reason, message, by string) {
	a.Status.History = append(a.Status.History, v1alpha1.Transition{
		Time:     metaTime(now),
		From:     from,
		To:       a.Status.Phase,
		Reason:   reason,
		Attempt:  a.Status.Attempts,
		Executor: by,
		Message:  printable.Truncate(message, maxHistoryMessage),
	})
	if excess := len(a.Status.History) - v1alpha1.MaxHistory; excess > 0 {
		a.Status.History = append([]v1alpha1.Transition(nil), a.Status.History[excess:]...)
		a.Status.DroppedTransitions += int32(excess)
	}
}

func set(a *v1alpha1.ToolAction, now time.Time, conditionType string, status metav1.ConditionStatus, reason, message string) {
	a.Status.ObservedGeneration = a.Generation
	meta.SetStatusCondition(&a.Status.Conditions, metav1.Condition{
		Type:               conditionType,
		Status:             status,
		Reason:             reason,
		Message:            printable.Truncate(message, maxConditionMessage),
		ObservedGeneration: a.Generation,
		LastTransitionTime: metav1.NewTime(now),
	})
}

// Bounds of what the API server accepts, so that no downstream's long
// answer can make a status write fail forever.
const (
	// maxConditionMessage stays under metav1.Condition's 32768-character
	// limit and keeps records small.
	maxConditionMessage = 4096
	maxHistoryMessage   = 1024
	// maxErrorMessage and maxExternalRef are the CRD's limits of
	// status.error.message and status.externalRef (bounded enforces the latter).
	maxErrorMessage = 4096
	maxExternalRef  = 512
	// maxEventNote is the events.k8s.io limit of an Event's note.
	maxEventNote = 1024
)

// statusEqual ignores condition timestamps, which change on every write.
func statusEqual(a, b *v1alpha1.ToolAction) bool {
	strip := func(s v1alpha1.ToolActionStatus) v1alpha1.ToolActionStatus {
		s = *s.DeepCopy()
		for i := range s.Conditions {
			s.Conditions[i].LastTransitionTime = metav1.Time{}
		}
		return s
	}
	return equality.Semantic.DeepEqual(strip(a.Status), strip(b.Status))
}

func errorClass(a *v1alpha1.ToolAction) string {
	if a.Status.Error == nil {
		return ""
	}
	return string(a.Status.Error.Class)
}

func metaTime(t time.Time) metav1.Time {
	// The API server stores seconds; truncating here keeps what we compare
	// equal to what we read back.
	return metav1.NewTime(t.Truncate(time.Second))
}

// metaTimeUp is t rounded up to the second the API server stores: a
// deadline stored this way is never earlier than the one computed.
func metaTimeUp(t time.Time) metav1.Time {
	if down := t.Truncate(time.Second); !down.Equal(t) {
		return metav1.NewTime(down.Add(time.Second))
	}
	return metav1.NewTime(t)
}

func metaTimePtr(t time.Time) *metav1.Time {
	mt := metaTime(t)
	return &mt
}
