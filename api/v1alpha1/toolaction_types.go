package v1alpha1

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Kinds a ToolReference may name.
const (
	KindTool        = "Tool"
	KindClusterTool = "ClusterTool"
)

// ToolReference names the tool that carries out an action.
type ToolReference struct {
	// kind is Tool, for a tool in the action's own namespace, or
	// ClusterTool, for a platform-wide tool whose selector admits the namespace.
	// +optional
	// +kubebuilder:default=Tool
	// +kubebuilder:validation:Enum=Tool;ClusterTool
	Kind string `json:"kind,omitempty"`

	// name is the name of the Tool or ClusterTool.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// KindOrDefault is the reference's kind, Tool when unset (the API server
// defaults it; objects built in code may not).
func (r ToolReference) KindOrDefault() string {
	if r.Kind == "" {
		return KindTool
	}
	return r.Kind
}

// Provenance records who asked for an action and within which unit of work.
// It is passed downstream unchanged and never enters the request digest.
type Provenance struct {
	// runID identifies the agent run or workflow execution that produced the intent.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	RunID string `json:"runID,omitempty"`

	// stepID identifies the step within the run.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	StepID string `json:"stepID,omitempty"`

	// parentTaskID identifies the task (for example an A2A task) that delegated this action.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	ParentTaskID string `json:"parentTaskID,omitempty"`

	// traceID is the distributed trace the intent belongs to (W3C trace id or traceparent).
	// It is passed downstream in an HTTP header, so it holds no control
	// character; only a valid W3C traceparent names a span the manager's
	// calls relate to.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="!self.matches('[[:cntrl:]]')",message="traceID must not hold a control character: it is passed downstream in an HTTP header"
	TraceID string `json:"traceID,omitempty"`

	// principals is the chain of principals on whose behalf the action runs,
	// the originating principal first.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=256
	Principals []string `json:"principals,omitempty"`
}

// MaxParametersBytes bounds an action's spec.parameters, JSON-encoded. The
// CRD bounds the members' number only, and the API server an object's size
// at about 1.5 MiB; the controller refuses more than this before anything
// is sent.
const MaxParametersBytes = 1 << 20

// MaxCompensations is the most compensations an action records
// (status.compensatedBy's bound).
const MaxCompensations = 16

// ToolActionSpec is the request. It is immutable: the object's name is the
// idempotency key, so a different request needs a different name.
type ToolActionSpec struct {
	// toolRef names the Tool that carries out the action.
	// +required
	ToolRef ToolReference `json:"toolRef"`

	// parameters is the JSON object sent to the tool, 1 MiB at most when
	// encoded (a larger one fails the action, InvalidParameters). Where the
	// parameters admission policy is installed, the API server also refuses
	// more than 10000 values (objects, arrays and their members counted) or
	// nesting deeper than 8 levels; pass large data as one string. It is a
	// map of members rather than one schemaless object so that the
	// immutability rule compares every member, renamed ones included.
	// +optional
	// +kubebuilder:validation:MaxProperties=256
	Parameters map[string]apiextensionsv1.JSON `json:"parameters,omitempty"`

	// requestDigest is the digest the client computed for this request, as
	// "sha256:" and 64 lowercase hex digits. When set, the action runs only if
	// it equals the digest the controller computes, so the client can prove
	// what it meant.
	// +optional
	// +kubebuilder:validation:Pattern=`^sha256:[0-9a-f]{64}$`
	RequestDigest string `json:"requestDigest,omitempty"`

	// provenance records who asked for the action and within which run.
	// +optional
	Provenance *Provenance `json:"provenance,omitempty"`

	// compensates names the Succeeded ToolAction, in the same namespace, whose
	// effect this action offsets (a refund for a charge, say). A compensation
	// is a new intent with its own key; it is never evidence that the
	// original did not happen. Once it succeeds, the original lists it in
	// status.compensatedBy.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Compensates string `json:"compensates,omitempty"`

	// clientKey is the idempotency key the caller sent in its protocol's
	// own carrier (an MCP commerce binding's meta key, say), when the
	// action's name was derived from it: kept as sent, so that two keys
	// whose derived names ever collided are refused as different requests,
	// never answered as one.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:Pattern=`^[ -~]+$`
	ClientKey string `json:"clientKey,omitempty"`
}

// Phase is a human-friendly summary of an action's conditions.
// +kubebuilder:validation:Enum=Pending;Accepted;AwaitingApproval;Executing;RetryScheduled;Succeeded;Failed;Unknown;Escalated
type Phase string

const (
	// PhasePending means not yet validated.
	PhasePending Phase = "Pending"
	// PhaseAccepted means validated and digested, waiting to be claimed.
	PhaseAccepted Phase = "Accepted"
	// PhaseAwaitingApproval means accepted, and held until a ToolApproval of
	// its request digest is applied (its tool requires one).
	PhaseAwaitingApproval Phase = "AwaitingApproval"
	// PhaseExecuting means claimed by an executor, which may have dispatched it.
	PhaseExecuting Phase = "Executing"
	// PhaseRetryScheduled means the last attempt definitely did not apply; another runs at status.nextAttemptTime.
	PhaseRetryScheduled Phase = "RetryScheduled"
	// PhaseSucceeded means the effect happened downstream exactly once.
	PhaseSucceeded Phase = "Succeeded"
	// PhaseFailed means the effect did not happen and will not be attempted again.
	PhaseFailed Phase = "Failed"
	// PhaseUnknown means the effect may have happened; it is never re-sent
	// blindly but looked up by key, or re-sent under the same key where the
	// tool's class makes that safe.
	PhaseUnknown Phase = "Unknown"
	// PhaseEscalated means nobody could prove the outcome before the tool's
	// deadline; a human closes it with a ToolResolution.
	PhaseEscalated Phase = "Escalated"
)

// IsSettled reports whether a caller stops waiting at the phase: the outcome
// is final, or only a human can move it on (Escalated).
func (p Phase) IsSettled() bool {
	return p.IsTerminal() || p == PhaseEscalated
}

// IsTerminal reports whether no further transition happens without a new intent.
func (p Phase) IsTerminal() bool {
	return p == PhaseSucceeded || p == PhaseFailed
}

// Condition types of a ToolAction.
const (
	// ConditionAccepted is True once the request is validated and its digest recorded.
	ConditionAccepted = "Accepted"
	// ConditionSucceeded is True once the effect happened, False once it finally did not.
	ConditionSucceeded = "Succeeded"
	// ConditionReady mirrors Succeeded for tools that read Ready (kstatus, kubectl wait).
	ConditionReady = "Ready"
	// ConditionReconciling is True while work towards an outcome is under way.
	ConditionReconciling = "Reconciling"
	// ConditionStalled is True when the action ended without success or was escalated.
	ConditionStalled = "Stalled"
	// ConditionApproved is Unknown while an action of a tool that requires
	// approval waits for one, True once approved, False once denied.
	ConditionApproved = "Approved"
	// ConditionCompensated is True once a compensating action succeeded.
	ConditionCompensated = "Compensated"
)

// ReasonFoundByLookup is the Succeeded condition's reason when a lookup
// found the effect of an attempt whose outcome was unknown.
const ReasonFoundByLookup = "FoundByLookup"

// SettledBy is the reason the action settled other than by an attempt of
// its own: ReasonFoundByLookup, or ReasonSettledByTombstone or
// ReasonSettledByArchive (its key's earlier record answered, without a
// dispatch); "" otherwise.
func (s *ToolActionStatus) SettledBy() string {
	reason := ""
	if s.Error != nil {
		reason = s.Error.Reason
	} else if c := meta.FindStatusCondition(s.Conditions, ConditionSucceeded); c != nil {
		reason = c.Reason
	}
	switch reason {
	case ReasonFoundByLookup, ReasonSettledByTombstone, ReasonSettledByArchive:
		return reason
	}
	return ""
}

// KeyUncheckable reports an action held before its first dispatch because
// no manager can check its key now: the archive that keeps the ledger's
// keys is down, not used by the manager, or behind what left etcd, or an
// earlier life of the namespace guards the key until a person decides. It
// runs once one can.
func (s *ToolActionStatus) KeyUncheckable() bool {
	if s.Phase != PhaseAccepted || s.Attempts > 0 {
		return false
	}
	c := meta.FindStatusCondition(s.Conditions, ConditionReconciling)
	return c != nil && c.Status == metav1.ConditionTrue && slices.Contains(keyCheckWaits, c.Reason)
}

// keyCheckWaits are the reasons an action waits for its key check.
var keyCheckWaits = []string{ReasonArchiveUnavailable, ReasonArchiveRequired, ReasonArchiveBehind, ReasonEarlierNamespaceKey}

// SettledByEarlierRecord reports an action answered by its key's tombstone
// or archived record, without a dispatch.
func (s *ToolActionStatus) SettledByEarlierRecord() bool {
	reason := s.SettledBy()
	return reason == ReasonSettledByTombstone || reason == ReasonSettledByArchive
}

// RefusedByEarlierRecord reports an action refused because its key's
// tombstone or archived record holds another request. It never dispatched
// and guards nothing: it leaves etcd at once, so that the key answers from
// its earlier record again and a retry of the original request is not met
// by this one's spec.
func (s *ToolActionStatus) RefusedByEarlierRecord() bool {
	return s.Phase == PhaseFailed && s.Attempts == 0 && s.Error != nil && s.Error.Class == ErrorClassDuplicateConflict &&
		(s.Error.Reason == ReasonTombstoneConflict || s.Error.Reason == ReasonArchiveConflict)
}

// ErrorClass says what a failure means for repeating the action.
// +kubebuilder:validation:Enum=InvalidInput;Denied;ProviderUnavailable;OutcomeUnknown;DuplicateConflict;RetriesExhausted
type ErrorClass string

const (
	// ErrorClassInvalidInput means the request cannot succeed as written. Final.
	ErrorClassInvalidInput ErrorClass = "InvalidInput"
	// ErrorClassDenied means the downstream refused the caller. Final.
	ErrorClassDenied ErrorClass = "Denied"
	// ErrorClassProviderUnavailable means the request definitely did not apply; it is retried under the same key.
	ErrorClassProviderUnavailable ErrorClass = "ProviderUnavailable"
	// ErrorClassOutcomeUnknown means the request may have applied; it is reconciled, never blindly repeated.
	ErrorClassOutcomeUnknown ErrorClass = "OutcomeUnknown"
	// ErrorClassDuplicateConflict means the key was reused for a different request. Never executed.
	ErrorClassDuplicateConflict ErrorClass = "DuplicateConflict"
	// ErrorClassRetriesExhausted means every allowed attempt definitely failed. Final.
	ErrorClassRetriesExhausted ErrorClass = "RetriesExhausted"
)

// ActionError describes why an action is not (yet) succeeded.
type ActionError struct {
	// class says what the error means for repeating the action.
	// +required
	Class ErrorClass `json:"class"`

	// reason is a one-word CamelCase cause, such as HTTP503 or ToolNotFound.
	// +required
	// +kubebuilder:validation:MaxLength=128
	Reason string `json:"reason"`

	// message is a human-readable explanation.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Message string `json:"message,omitempty"`
}

// ExecutorClaim is the compare-and-set claim an executor wrote before it
// dispatched an attempt.
type ExecutorClaim struct {
	// executor identifies the controller instance that holds the claim.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Executor string `json:"executor"`

	// attempt is the attempt number the claim was made for, starting at 1.
	// +required
	Attempt int32 `json:"attempt"`

	// leaseExpiry is when the claim lapses. An action still Executing after
	// it was possibly dispatched and its outcome is then Unknown.
	// +required
	LeaseExpiry metav1.Time `json:"leaseExpiry"`
}

// ToolActionStatus is the ledger record of the action.
type ToolActionStatus struct {
	// phase is a summary of the conditions for humans; conditions are authoritative.
	// +optional
	Phase Phase `json:"phase,omitempty"`

	// observedGeneration is the generation of the spec this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions are the authoritative state: Accepted, Succeeded, Ready, Reconciling, Stalled.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// requestDigest is the canonical digest of the request, as "sha256:" and 64 hex digits.
	// +optional
	RequestDigest string `json:"requestDigest,omitempty"`

	// idempotencyKey is the key sent downstream with every attempt.
	// +optional
	IdempotencyKey string `json:"idempotencyKey,omitempty"`

	// attempts counts the dispatches claimed so far.
	// +optional
	Attempts int32 `json:"attempts,omitempty"`

	// claim is the executor claim of the current or last attempt.
	// +optional
	Claim *ExecutorClaim `json:"claim,omitempty"`

	// nextAttemptTime is when a scheduled retry or the next lookup runs.
	// +optional
	NextAttemptTime *metav1.Time `json:"nextAttemptTime,omitempty"`

	// externalRef is the downstream's identifier of the effect, such as a charge id.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	ExternalRef string `json:"externalRef,omitempty"`

	// replayedByDownstream says the downstream answered the recorded outcome
	// with the stored response of an earlier request under the key (HTTP:
	// Idempotent-Replayed: true): it deduplicated a repeat.
	// +optional
	ReplayedByDownstream bool `json:"replayedByDownstream,omitempty"`

	// result holds the response fields that the Tool allows to be stored,
	// at most 8 KiB of JSON.
	// +optional
	// +kubebuilder:validation:Type=object
	// +kubebuilder:pruning:PreserveUnknownFields
	Result *apiextensionsv1.JSON `json:"result,omitempty"`

	// error is the last error; it stays on a final failure.
	// +optional
	Error *ActionError `json:"error,omitempty"`

	// startTime is when the first attempt was claimed.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`

	// completionTime is when the action reached Succeeded or Failed.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`

	// keptUntil is until when, at least, the ledger keeps the key of the
	// finished action: a retry under it before then is answered from this
	// record (or its Tombstone or archived record), never dispatched again.
	// It is the completion plus the tool's keyRetention, or the archive's
	// default, in force then; a later change of them never frees the key
	// sooner. An action answered by its key's earlier record states that
	// record's. Unset while the action runs, for an action never
	// dispatched (its key guards no effect), and when nothing but an
	// administrator frees the key.
	// +optional
	KeptUntil *metav1.Time `json:"keptUntil,omitempty"`

	// downstreamKeptUntil is when the downstream forgets the idempotency
	// key it was sent: the first attempt's start plus the tool's
	// downstreamKeyRetention. Unset when the tool declares none.
	// +optional
	DownstreamKeptUntil *metav1.Time `json:"downstreamKeptUntil,omitempty"`

	// unknownSince is when the outcome became unknown; the tool's
	// unknownOutcomeDeadline counts from here.
	// +optional
	UnknownSince *metav1.Time `json:"unknownSince,omitempty"`

	// lookups counts the lookups by key made since the outcome became unknown.
	// +optional
	Lookups int32 `json:"lookups,omitempty"`

	// approval is the decision applied to the action, for a tool that
	// requires approval: the ToolApproval, Approved or Denied, by whom and
	// when. An approved action keeps it for every retry and lookup under
	// its key.
	// +optional
	Approval *ApprovalRecord `json:"approval,omitempty"`

	// target is what the tool named when the action was accepted, and
	// again whenever it was held for approval: whether the tool required an
	// approval, and a digest of its adapter's configuration (URL, template,
	// headers, ServiceAccount, ...). Once an approval was required it stays
	// required for the action, whatever the tool says later; an approved
	// action is dispatched only while its tool names the target it was
	// approved for.
	// +optional
	Target *TargetRecord `json:"target,omitempty"`

	// compensatedBy lists the Succeeded ToolActions that compensate this
	// one, 16 at most: a further compensation is refused before dispatch.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	CompensatedBy []string `json:"compensatedBy,omitempty"`

	// history lists the transitions of the record, oldest first. It is
	// append-only; past maxHistory entries the oldest are dropped and counted
	// in droppedTransitions.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	History []Transition `json:"history,omitempty"`

	// droppedTransitions counts the oldest history entries dropped to keep the record bounded.
	// +optional
	DroppedTransitions int32 `json:"droppedTransitions,omitempty"`

	// notifications are the CloudEvents the action owes the notification
	// sinks for its transitions to AwaitingApproval, Escalated, Succeeded
	// and Failed: each is recorded with its transition, in the same write,
	// and names the sinks that have not acknowledged it yet. Empty when the
	// manager has no sinks.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Notifications []Notification `json:"notifications,omitempty"`

	// notificationsPending is true while a notification waits for a sink
	// (one given up for a sink, in its deadLetters, waits no more for it):
	// a selectable field, so that a manager finds them after a restart
	// without reading every record.
	// +optional
	NotificationsPending bool `json:"notificationsPending,omitempty"`
}

// MaxNotifications bounds status.notifications; past it the oldest
// delivered ones are dropped.
const MaxNotifications = 16

// Notification is a CloudEvent an action owes for one of its transitions,
// with what the event says of the transition, as it was then.
type Notification struct {
	// id is the event's id: derived from the namespace, the key, the
	// record's uid, the event's type and seq, so that a repeated delivery
	// is recognisably the same event.
	// +required
	// +kubebuilder:validation:MaxLength=64
	ID string `json:"id"`

	// type is the event's type, such as dev.toolledger.toolaction.succeeded.v1.
	// +required
	// +kubebuilder:validation:MaxLength=128
	Type string `json:"type"`

	// seq numbers the action's events of this type, from 0.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Seq int32 `json:"seq,omitempty"`

	// time is when the transition was recorded: the event's time.
	// +required
	Time metav1.Time `json:"time"`

	// externalRef is the action's external reference at the transition.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	ExternalRef string `json:"externalRef,omitempty"`

	// errorClass is the class of the action's error at the transition.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	ErrorClass string `json:"errorClass,omitempty"`

	// errorReason is the reason of the action's error at the transition.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	ErrorReason string `json:"errorReason,omitempty"`

	// traceparent is the W3C traceparent of the action's caller at the
	// transition, where the manager trusts its callers' trace context
	// (--trust-caller-trace-context), sent as the event's distributed
	// tracing extension; empty otherwise.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Traceparent string `json:"traceparent,omitempty"`

	// chainHead is, with an archive, the newest checkpoint of the
	// namespace's archived hash chain at the transition, SEQUENCE:HASH, as
	// the cluster keeps it, sent as the event's toolledgerchainhead
	// extension: a consumer that keeps them holds copies of the chain's
	// heads outside the cluster and the archive's database, which kubectl
	// toolledger verify --head checks.
	// +optional
	// +kubebuilder:validation:MaxLength=96
	ChainHead string `json:"chainHead,omitempty"`

	// pending lists the sinks that have not acknowledged the event yet
	// and that it was not given up for (deadLetters).
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=63
	Pending []string `json:"pending,omitempty"`

	// deadLetters are the sinks the event was given up for, and why: it
	// cannot be sent at all, or the sink kept refusing it while it took
	// other events. It is not sent to them again, and no longer holds the
	// record back from its retention.
	// +optional
	// +listType=map
	// +listMapKey=sink
	// +kubebuilder:validation:MaxItems=16
	DeadLetters []NotificationDeadLetter `json:"deadLetters,omitempty"`

	// deliveredTime is when the last pending sink acknowledged the event;
	// unset when the last one was given up instead (deadLetters).
	// +optional
	DeliveredTime *metav1.Time `json:"deliveredTime,omitempty"`
}

// DeadLetterReason says why an event was given up for a sink.
// +kubebuilder:validation:Enum=Malformed;Refused
type DeadLetterReason string

const (
	// DeadLetterMalformed means no HTTP request can carry the event (such
	// as a value no header may hold), so no sink can be sent it; it is
	// given up at once, for every sink, and no sink is contacted.
	DeadLetterMalformed DeadLetterReason = "Malformed"
	// DeadLetterRefused means the sink answered every try with a refusal
	// of this event alone (400, 413, 415, 422 or 431), while it works.
	DeadLetterRefused DeadLetterReason = "Refused"
)

// NotificationDeadLetter is a sink an event was given up for.
type NotificationDeadLetter struct {
	// sink names the sink, as pending did.
	// +required
	// +kubebuilder:validation:MaxLength=63
	Sink string `json:"sink"`

	// reason is Malformed when no HTTP request can carry the event, so
	// that it was given up at once; Refused when the sink refused it (400,
	// 413, 415, 422 or 431) each of the times it was tried.
	// +required
	Reason DeadLetterReason `json:"reason"`

	// message is the last failure to send the event to the sink.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Message string `json:"message,omitempty"`

	// time is when the event was given up.
	// +required
	Time metav1.Time `json:"time"`
}

// TargetRecord is what an action's tool named when the action was accepted.
type TargetRecord struct {
	// approvalRequired is true when the tool required an approval: it stays
	// true for the action even if the tool stops requiring one.
	// +optional
	ApprovalRequired bool `json:"approvalRequired,omitempty"`

	// digest is "sha256:" and 64 hex digits over the canonical JSON of the
	// tool's adapter configuration (spec.http, spec.kubernetesApply, ...).
	// +required
	// +kubebuilder:validation:MaxLength=71
	Digest string `json:"digest"`
}

// MaxHistory bounds status.history.
const MaxHistory = 32

// Transition is one entry of an action's history.
type Transition struct {
	// time is when the transition was recorded.
	// +required
	Time metav1.Time `json:"time"`

	// from is the phase before the transition; empty for the first.
	// +optional
	From Phase `json:"from,omitempty"`

	// to is the phase after the transition.
	// +required
	To Phase `json:"to"`

	// reason is a one-word CamelCase cause.
	// +required
	// +kubebuilder:validation:MaxLength=128
	Reason string `json:"reason"`

	// attempt is the attempt the transition belongs to.
	// +optional
	Attempt int32 `json:"attempt,omitempty"`

	// executor is the controller instance, or the ToolResolution or
	// ToolApproval, that made the transition.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Executor string `json:"executor,omitempty"`

	// message explains the transition.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=ta,categories=toolledger
// +kubebuilder:selectablefield:JSONPath=`.status.phase`
// +kubebuilder:selectablefield:JSONPath=`.spec.toolRef.name`
// +kubebuilder:selectablefield:JSONPath=`.status.notificationsPending`
// +kubebuilder:printcolumn:name="Tool",type=string,JSONPath=`.spec.toolRef.name`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Attempts",type=integer,JSONPath=`.status.attempts`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="External-Ref",type=string,JSONPath=`.status.externalRef`,priority=1
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.error.message`,priority=1
// +kubebuilder:printcolumn:name="Requested-By",type=string,JSONPath=`.metadata.annotations.toolledger\.dev/requested-by`,priority=1
// +kubebuilder:printcolumn:name="Decided-By",type=string,JSONPath=`.status.approval.decidedBy`,priority=1
// +kubebuilder:validation:XValidation:rule="!has(self.spec.compensates) || self.spec.compensates != self.metadata.name",message="spec.compensates must name another ToolAction: a compensation is a new intent with its own key"

// ToolAction is one business intent. Its name is the idempotency key and its
// namespace the tenant; its spec is the request and its status the ledger record.
type ToolAction struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is the object's metadata; the name is the idempotency key.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the request.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable: this idempotency key (metadata.name) already records a different request; use a new name for a new intent"
	Spec ToolActionSpec `json:"spec"`

	// status is the ledger record.
	// +optional
	Status ToolActionStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// ToolActionList is a list of ToolActions.
type ToolActionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ToolAction `json:"items"`
}

// maxIdempotencyKeyLength is the longest key sent downstream; many providers
// accept no more than 255 characters.
const maxIdempotencyKeyLength = 255

// IdempotencyKey is the key sent downstream with every attempt of the action:
// "<namespace>/<name>", so that keys of different tenants never collide. A
// longer pair than 255 characters is shortened by ShortenKey.
func IdempotencyKey(namespace, name string) string {
	return ShortenKey(namespace+"/"+name, maxIdempotencyKeyLength)
}

// ShortenKey returns key if it has at most limit characters (limit is at
// least 33); otherwise its start, "~" and 32 hex digits of the SHA-256 of
// the whole key, limit characters in all. "~" never occurs in Kubernetes
// names, so a shortened key cannot collide with one that was not.
func ShortenKey(key string, limit int) string {
	if len(key) <= limit {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	suffix := "~" + hex.EncodeToString(sum[:16])
	return key[:limit-len(suffix)] + suffix
}

// Finalizer keeps a ToolAction from vanishing while its effect may be under
// way or may have happened unrecorded (Executing, Unknown, Escalated).
const Finalizer = "toolledger.dev/outcome"
