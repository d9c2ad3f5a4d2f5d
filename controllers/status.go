package controllers

import (
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/adapter"
)

// Condition and event reasons that the controller itself decides; adapter
// reasons (HTTP503, Timeout, ...) are recorded as the adapter names them.
const (
	ReasonAccepted              = "Accepted"
	ReasonExecuting             = "Executing"
	ReasonSucceeded             = "Succeeded"
	ReasonRetryScheduled        = "RetryScheduled"
	ReasonOutcomeUnknown        = "OutcomeUnknown"
	ReasonLeaseExpired          = "LeaseExpired"
	ReasonUnclassifiedError     = "UnclassifiedError"
	ReasonToolNotFound          = "ToolNotFound"
	ReasonToolNotReady          = "ToolNotReady"
	ReasonInvalidParameters     = "InvalidParameters"
	ReasonRequestDigestMismatch = "RequestDigestMismatch"
	ReasonRequestChanged        = "RequestChanged"
	ReasonIncompleteResponse    = "IncompleteResponse"
)

// The set* functions below are the only writers of phase and conditions, so
// that the two never disagree. Conditions follow kstatus: Reconciling=True
// while work is under way, Ready=True and Succeeded=True on success,
// Stalled=True on a final failure.

func setExecuting(a *v1alpha1.ToolAction, now time.Time, message string) {
	accept(a, now)
	inProgress(a, now, v1alpha1.PhaseExecuting, ReasonExecuting, message)
	a.Status.Error = nil
}

func setRetryScheduled(a *v1alpha1.ToolAction, now, at time.Time, reason, message string) {
	a.Status.NextAttemptTime = metaTimePtr(at)
	a.Status.Error = &v1alpha1.ActionError{Class: v1alpha1.ErrorClassProviderUnavailable, Reason: reason, Message: message}
	inProgress(a, now, v1alpha1.PhaseRetryScheduled, ReasonRetryScheduled,
		"attempt definitely not applied ("+reason+"); next attempt at "+at.UTC().Format(time.RFC3339))
}

func setUnknown(a *v1alpha1.ToolAction, now time.Time, reason, message string) {
	a.Status.Error = &v1alpha1.ActionError{Class: v1alpha1.ErrorClassOutcomeUnknown, Reason: reason, Message: message}
	inProgress(a, now, v1alpha1.PhaseUnknown, ReasonOutcomeUnknown, message)
}

// setWaiting keeps an accepted action whose tool cannot be used yet.
func setWaiting(a *v1alpha1.ToolAction, now time.Time, requestDigest, reason, message string) {
	a.Status.RequestDigest = requestDigest
	a.Status.IdempotencyKey = v1alpha1.IdempotencyKey(a.Namespace, a.Name)
	phase := a.Status.Phase
	if phase == "" || phase == v1alpha1.PhasePending {
		phase = v1alpha1.PhaseAccepted
	}
	accept(a, now)
	inProgress(a, now, phase, reason, message)
}

func setSucceeded(a *v1alpha1.ToolAction, now time.Time, outcome adapter.Outcome) {
	a.Status.Phase = v1alpha1.PhaseSucceeded
	a.Status.ExternalRef = outcome.ExternalRef
	if len(outcome.Result) > 0 {
		a.Status.Result = &apiextensionsv1.JSON{Raw: outcome.Result}
	}
	a.Status.Error = nil
	a.Status.CompletionTime = metaTimePtr(now)
	message := "the downstream applied the request"
	set(a, now, v1alpha1.ConditionSucceeded, metav1.ConditionTrue, ReasonSucceeded, message)
	set(a, now, v1alpha1.ConditionReady, metav1.ConditionTrue, ReasonSucceeded, message)
	meta.RemoveStatusCondition(&a.Status.Conditions, v1alpha1.ConditionReconciling)
	meta.RemoveStatusCondition(&a.Status.Conditions, v1alpha1.ConditionStalled)
}

func setFailed(a *v1alpha1.ToolAction, now time.Time, class v1alpha1.ErrorClass, reason, message string) {
	a.Status.Phase = v1alpha1.PhaseFailed
	a.Status.Error = &v1alpha1.ActionError{Class: class, Reason: reason, Message: message}
	a.Status.NextAttemptTime = nil
	a.Status.CompletionTime = metaTimePtr(now)
	set(a, now, v1alpha1.ConditionSucceeded, metav1.ConditionFalse, string(class), message)
	set(a, now, v1alpha1.ConditionReady, metav1.ConditionFalse, string(class), message)
	set(a, now, v1alpha1.ConditionStalled, metav1.ConditionTrue, string(class), message)
	meta.RemoveStatusCondition(&a.Status.Conditions, v1alpha1.ConditionReconciling)
}

// setRejected records a failure found before any dispatch: the request was
// never accepted.
func setRejected(a *v1alpha1.ToolAction, now time.Time, class v1alpha1.ErrorClass, reason, message string) {
	setFailed(a, now, class, reason, message)
	set(a, now, v1alpha1.ConditionAccepted, metav1.ConditionFalse, reason, message)
}

func accept(a *v1alpha1.ToolAction, now time.Time) {
	set(a, now, v1alpha1.ConditionAccepted, metav1.ConditionTrue, ReasonAccepted,
		"request validated; digest "+a.Status.RequestDigest)
}

func inProgress(a *v1alpha1.ToolAction, now time.Time, phase v1alpha1.Phase, reason, message string) {
	a.Status.Phase = phase
	set(a, now, v1alpha1.ConditionReconciling, metav1.ConditionTrue, reason, message)
	set(a, now, v1alpha1.ConditionSucceeded, metav1.ConditionUnknown, reason, message)
	set(a, now, v1alpha1.ConditionReady, metav1.ConditionUnknown, reason, message)
	meta.RemoveStatusCondition(&a.Status.Conditions, v1alpha1.ConditionStalled)
}

func set(a *v1alpha1.ToolAction, now time.Time, conditionType string, status metav1.ConditionStatus, reason, message string) {
	a.Status.ObservedGeneration = a.Generation
	meta.SetStatusCondition(&a.Status.Conditions, metav1.Condition{
		Type:               conditionType,
		Status:             status,
		Reason:             reason,
		Message:            truncate(message, maxConditionMessage),
		ObservedGeneration: a.Generation,
		LastTransitionTime: metav1.NewTime(now),
	})
}

// maxConditionMessage stays under metav1.Condition's 32768-character limit
// and keeps records small.
const maxConditionMessage = 4096

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-len("…")] + "…"
}

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

func metaTimePtr(t time.Time) *metav1.Time {
	mt := metaTime(t)
	return &mt
}
