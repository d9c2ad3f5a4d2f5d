package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// ResolutionOutcome is what a human established about an action's outcome.
// +kubebuilder:validation:Enum=Succeeded;Failed;RetrySafe
type ResolutionOutcome string

const (
	// ResolvedSucceeded means the effect happened downstream.
	ResolvedSucceeded ResolutionOutcome = "Succeeded"
	// ResolvedFailed means the effect did not happen and must not be attempted again.
	ResolvedFailed ResolutionOutcome = "Failed"
	// ResolvedRetrySafe means the effect did not happen and may be attempted again under the same key.
	ResolvedRetrySafe ResolutionOutcome = "RetrySafe"
)

// ToolResolutionSpec records a human's finding about an action.
type ToolResolutionSpec struct {
	// actionName names the Unknown or Escalated ToolAction in this namespace.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	ActionName string `json:"actionName"`

	// actionUID, when set, binds the finding to one ToolAction object, the
	// one the resolver looked at: a ToolAction deleted and created again
	// under the same name is refused (ActionReplaced). kubectl toolledger
	// resolve and the web console set it.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=36
	ActionUID types.UID `json:"actionUID,omitempty"`

	// attempt is the attempt the finding is about: the action's
	// status.attempts when the resolver looked. A resolution is applied only
	// while the action is still at that attempt; one about an earlier
	// attempt is refused (StaleAttempt), so that evidence about attempt 1
	// never re-sends an attempt 2 that may have applied.
	// +required
	// +kubebuilder:validation:Minimum=1
	Attempt int32 `json:"attempt"`

	// outcome is what the operator established downstream.
	// +required
	Outcome ResolutionOutcome `json:"outcome"`

	// externalRef is the downstream's identifier of the effect, for a Succeeded outcome.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	ExternalRef string `json:"externalRef,omitempty"`

	// reason says how the operator knows, for the record.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Reason string `json:"reason"`
}

// Condition type of a ToolResolution.
const (
	// ConditionApplied is True once the resolution was applied to its action,
	// False when it cannot be: the action is not Unknown or Escalated, is at
	// another attempt (StaleAttempt) or is another object (ActionReplaced).
	// A resolution that was not applied never is: create another.
	ConditionApplied = "Applied"
)

// ToolResolutionStatus says whether the resolution was applied.
type ToolResolutionStatus struct {
	// conditions hold Applied.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// appliedTime is when the resolution was applied.
	// +optional
	AppliedTime *metav1.Time `json:"appliedTime,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=tres,categories=toolledger
// +kubebuilder:selectablefield:JSONPath=`.spec.actionName`
// +kubebuilder:printcolumn:name="Action",type=string,JSONPath=`.spec.actionName`
// +kubebuilder:printcolumn:name="Attempt",type=integer,JSONPath=`.spec.attempt`
// +kubebuilder:printcolumn:name="Outcome",type=string,JSONPath=`.spec.outcome`
// +kubebuilder:printcolumn:name="Applied",type=string,JSONPath=`.status.conditions[?(@.type=="Applied")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 238",message="the name of a ToolResolution is at most 238 characters: the action's history names it as toolresolution/<name>"
// +kubebuilder:validation:XValidation:rule="self.spec.outcome != 'Succeeded' || has(self.spec.externalRef)",message="a Succeeded resolution needs spec.externalRef, the downstream's identifier of the effect"

// ToolResolution closes an action whose outcome nobody could prove: an
// operator records what really happened, and the controller appends it to
// the action's history. It is a resource of its own so that who may resolve
// is a matter of RBAC, apart from who may invoke tools.
type ToolResolution struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is the object's metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the finding; it is immutable.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable: a resolution is part of the record; create another to correct it"
	Spec ToolResolutionSpec `json:"spec"`

	// status says whether the resolution was applied.
	// +optional
	Status ToolResolutionStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// ToolResolutionList is a list of ToolResolutions.
type ToolResolutionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ToolResolution `json:"items"`
}
