package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// LifeDecision is what a person decided about the keys an earlier life of a
// namespace's name left in the archive.
// +kubebuilder:validation:Enum=Adopt;Release
type LifeDecision string

const (
	// LifeAdopt makes the earlier life's history this namespace's: its
	// archived records answer this namespace's keys (a namespace restored
	// from a backup, or re-created by GitOps, by the same tenant).
	LifeAdopt LifeDecision = "Adopt"
	// LifeRelease frees the earlier life's keys for this namespace, whose
	// actions never see that life's outcomes (a new tenant given the name).
	// It takes the verb release on earlierlifedecisions, which an
	// administrator holds.
	LifeRelease LifeDecision = "Release"
)

// EarlierLifeDecisionSpec is a decision about one earlier life.
type EarlierLifeDecisionSpec struct {
	// earlierLife is the uid of the earlier namespace of this name whose
	// archived keys the decision is about, as the held actions' message
	// names it; empty for the records archived before the archive kept
	// namespaces' uids.
	// +required
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=36
	EarlierLife types.UID `json:"earlierLife"`

	// life is the uid of this namespace when the decision was made: the API
	// server sets it at creation (the toolledger-earlier-life admission
	// policies) and refuses another. A decision applies only in that life,
	// so that one restored with the namespace from a backup decides nothing
	// for the restored namespace.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=36
	Life types.UID `json:"life,omitempty"`

	// decision is Adopt (the namespace's owner takes the earlier life's
	// history as this namespace's) or Release (an administrator frees its
	// keys for this namespace).
	// +required
	Decision LifeDecision `json:"decision"`

	// reason says why, for the record.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Reason string `json:"reason"`
}

// Reasons of an EarlierLifeDecision's Applied condition.
const (
	// ReasonDecided: the decision applies to this namespace's key checks.
	ReasonDecided = "Decided"
	// ReasonOtherLife: the decision was made in another life of the
	// namespace (restored with it from a backup): it decides nothing here.
	ReasonOtherLife = "OtherLife"
	// ReasonDecidedBefore: an earlier decision about the same earlier life
	// applies; this one does not.
	ReasonDecidedBefore = "DecidedBefore"
)

// EarlierLifeDecisionStatus says whether the decision applies.
type EarlierLifeDecisionStatus struct {
	// conditions hold Applied: True while the decision applies to this
	// namespace's key checks, False when it cannot (OtherLife,
	// DecidedBefore).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=eld,categories=toolledger
// +kubebuilder:printcolumn:name="Earlier-Life",type=string,JSONPath=`.spec.earlierLife`
// +kubebuilder:printcolumn:name="Decision",type=string,JSONPath=`.spec.decision`
// +kubebuilder:printcolumn:name="Applied",type=string,JSONPath=`.status.conditions[?(@.type=="Applied")].status`
// +kubebuilder:printcolumn:name="Decided-By",type=string,JSONPath=`.metadata.annotations.toolledger\.dev/decided-by`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// EarlierLifeDecision decides what becomes of the keys an earlier life of
// this namespace's name left in the archive. A namespace deleted and
// created again under its name (restored from a backup, re-created by
// GitOps, or given to a new tenant) has a new uid: the archive tells its
// lives apart, and holds every action of the new one whose key an earlier
// life guards (EarlierNamespaceKey) until its owner adopts that history or
// an administrator releases it. It is a resource of its own so that who may
// decide is a matter of RBAC, and the API server stamps who did
// (toolledger.dev/decided-by).
type EarlierLifeDecision struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is the object's metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the decision; it is immutable.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable: a decision is part of the record; create another in a later life"
	Spec EarlierLifeDecisionSpec `json:"spec"`

	// status says whether the decision applies.
	// +optional
	Status EarlierLifeDecisionStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// EarlierLifeDecisionList is a list of EarlierLifeDecisions.
type EarlierLifeDecisionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EarlierLifeDecision `json:"items"`
}

// DecisionFor returns the decision that applies, in the namespace's life
// whose uid is life, to the earlier life earlier: the oldest of decisions
// made in that life about it; nil when none was made.
func DecisionFor(decisions []EarlierLifeDecision, life, earlier types.UID) *EarlierLifeDecision {
	var applies *EarlierLifeDecision
	for i := range decisions {
		d := &decisions[i]
		if d.Spec.Life != life || d.Spec.EarlierLife != earlier || !d.DeletionTimestamp.IsZero() {
			continue
		}
		if applies == nil || decidedBefore(d, applies) {
			applies = d
		}
	}
	return applies
}

// decidedBefore orders decisions by creation, then by name.
func decidedBefore(a, b *EarlierLifeDecision) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Name < b.Name
}
