package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Annotations the API server stamps, from the authenticated user of the
// request that created the object, through the identity admission policies
// (config/admission/identity_policy.yaml); nobody may set or change them by
// hand. They are the verified identities, beside the claimed ones in
// spec.provenance.principals.
const (
	// RequestedByAnnotation names the user who created a ToolAction.
	RequestedByAnnotation = "toolledger.dev/requested-by"
	// DecidedByAnnotation names the user who created a ToolApproval.
	DecidedByAnnotation = "toolledger.dev/decided-by"
	// ResolvedByAnnotation names the user who created a ToolResolution.
	ResolvedByAnnotation = "toolledger.dev/resolved-by"
)

// Annotations the kubernetesApply adapter sets on the object it applies, so
// that a lookup can tell whether an attempt of the action applied it.
const (
	// IdempotencyKeyAnnotation holds the idempotency key of the action
	// whose apply last changed the object.
	IdempotencyKeyAnnotation = "toolledger.dev/idempotency-key"
	// RequestDigestAnnotation holds that action's request digest.
	RequestDigestAnnotation = "toolledger.dev/request-digest"
)

// TraceparentAnnotation carries the W3C traceparent of the invocation that
// last applied a ToolAction (the SDK's span, or the MCP gateway's), so that
// the manager's attempt and lookup spans relate to the caller's trace: they
// link to it, or continue it where the manager trusts its callers. It is
// metadata, not spec: a retry from another span is the same intent. Without
// it, spec.provenance.traceID names the caller's span when it is a
// traceparent.
const TraceparentAnnotation = "toolledger.dev/traceparent"

// ApprovalDecision is what an approver decided about one request.
// +kubebuilder:validation:Enum=Approved;Denied
type ApprovalDecision string

const (
	// Approved lets the action be dispatched, with retries under its key.
	Approved ApprovalDecision = "Approved"
	// Denied fails the action with class Denied; it is never dispatched.
	Denied ApprovalDecision = "Denied"
)

// ToolApprovalSpec is a human's decision about one intent: one key and one
// request digest.
type ToolApprovalSpec struct {
	// actionName is the name of the ToolAction, in this namespace, that the
	// decision is about: the intent's idempotency key.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	ActionName string `json:"actionName"`

	// actionUID, when set, binds the decision to one ToolAction object, the
	// one the approver reviewed: a ToolAction deleted and created again
	// under the same name is refused (ActionReplaced). kubectl toolledger
	// approve sets it; a decision written ahead of its action (in the same
	// manifest, say) leaves it out and is bound to the key and digest only.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=36
	ActionUID types.UID `json:"actionUID,omitempty"`

	// requestDigest is the digest of the request being decided: "sha256:"
	// and 64 lowercase hex digits, copied from the action's
	// status.requestDigest (kubectl toolledger approvals lists it). A
	// decision about another digest (other parameters, another tool
	// version) is not applied.
	// +required
	// +kubebuilder:validation:Pattern=`^sha256:[0-9a-f]{64}$`
	RequestDigest string `json:"requestDigest"`

	// decision is Approved or Denied.
	// +required
	Decision ApprovalDecision `json:"decision"`

	// reason says why, for the record.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Reason string `json:"reason"`

	// expiresAt (RFC 3339, e.g. 2026-12-01T18:00:00Z) is when the decision
	// stops counting: one not applied by then never is. Once applied, it
	// holds for every retry under the key.
	// +optional
	ExpiresAt *metav1.Time `json:"expiresAt,omitempty"`
}

// ToolApprovalStatus says whether the decision was applied to the action.
type ToolApprovalStatus struct {
	// conditions hold Applied: True once the decision was recorded on the
	// action, False with the reason it was not. DigestMismatch,
	// SelfApproval, Expired, ActionReplaced, ApproverUnverified,
	// RequesterUnverified and AlreadyDecided are final (create another
	// approval); ActionNotFound and NotAwaitingApproval are re-evaluated
	// when the action changes, ToolNotFound and ToolNotAdmitted every
	// minute.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// appliedTime is when the decision was recorded on the action.
	// +optional
	AppliedTime *metav1.Time `json:"appliedTime,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=tappr,categories=toolledger
// +kubebuilder:selectablefield:JSONPath=`.spec.actionName`
// +kubebuilder:printcolumn:name="Action",type=string,JSONPath=`.spec.actionName`
// +kubebuilder:printcolumn:name="Decision",type=string,JSONPath=`.spec.decision`
// +kubebuilder:printcolumn:name="Decided-By",type=string,JSONPath=`.metadata.annotations.toolledger\.dev/decided-by`
// +kubebuilder:printcolumn:name="Applied",type=string,JSONPath=`.status.conditions[?(@.type=="Applied")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Digest",type=string,JSONPath=`.spec.requestDigest`,priority=1
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.conditions[?(@.type=="Applied")].message`,priority=1
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 240",message="the name of a ToolApproval is at most 240 characters: the action's history names it as toolapproval/<name>"

// ToolApproval is a human decision bound to one intent: the ToolAction it
// names (the idempotency key) and the request digest the approver was
// shown. The controller applies it to an action that awaits approval,
// unless the digest differs, it has expired, or the approver is the
// action's requester (toolledger.dev/requested-by) and the tool does not
// allow self-approval. Who may decide is a matter of RBAC (the
// toolledger-approver role); the API server stamps who did in the
// toolledger.dev/decided-by annotation.
type ToolApproval struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is the object's metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the decision; it is immutable.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable: an approval is part of the record; create another to decide again"
	Spec ToolApprovalSpec `json:"spec"`

	// status says whether the decision was applied.
	// +optional
	Status ToolApprovalStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// ToolApprovalList is a list of ToolApprovals.
type ToolApprovalList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ToolApproval `json:"items"`
}

// ApprovalRecord is the decision applied to an action.
type ApprovalRecord struct {
	// name is the ToolApproval.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// decision is Approved or Denied.
	// +required
	Decision ApprovalDecision `json:"decision"`

	// decidedBy is the approver, as the API server stamped it on the
	// ToolApproval (toolledger.dev/decided-by).
	// +required
	// +kubebuilder:validation:MaxLength=512
	DecidedBy string `json:"decidedBy"`

	// requestDigest is the digest decided about.
	// +required
	RequestDigest string `json:"requestDigest"`

	// targetDigest is the digest of the tool's adapter configuration the
	// action recorded (status.target.digest) when the decision was applied:
	// an approved action is not dispatched to another target.
	// +optional
	// +kubebuilder:validation:MaxLength=71
	TargetDigest string `json:"targetDigest,omitempty"`

	// time is when the decision was applied.
	// +required
	Time metav1.Time `json:"time"`
}
