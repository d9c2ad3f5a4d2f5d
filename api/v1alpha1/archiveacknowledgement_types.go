package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ArchiveAcknowledgementSpec names what the operator acknowledges.
type ArchiveAcknowledgementSpec struct {
	// archive is the identity of the archive whose loss is acknowledged,
	// as kubectl toolledger archive status shows it.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	Archive string `json:"archive"`

	// finding is the digest of the finding acknowledged (which namespaces'
	// chains the archive no longer holds, and how far), as kubectl
	// toolledger archive status shows it: an acknowledgement applies to
	// what its author saw, and a later finding needs one of its own.
	// +required
	// +kubebuilder:validation:Pattern=`^sha256:[0-9a-f]{64}$`
	Finding string `json:"finding"`

	// reason says why the loss is accepted, for the record: what was
	// restored, what could not be.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Reason string `json:"reason"`
}

// LostRecords are the records of one namespace's chain that left etcd for
// the archive, and that the archive no longer holds: their keys are free
// again.
type LostRecords struct {
	// namespace is the tenant whose records were lost.
	Namespace string `json:"namespace"`

	// fromSequence and toSequence are the first and the last lost
	// record's place in the namespace's chain.
	FromSequence int64 `json:"fromSequence"`
	ToSequence   int64 `json:"toSequence"`

	// retiredAfter is when the newest record the archive still holds left
	// etcd, as the cluster's mark last saw the chain before the loss; and
	// retiredBefore when the mark last moved: the lost records left etcd
	// between the two.
	// +optional
	RetiredAfter *metav1.Time `json:"retiredAfter,omitempty"`
	// +optional
	RetiredBefore *metav1.Time `json:"retiredBefore,omitempty"`
}

// Reasons of an ArchiveAcknowledgement's Applied condition.
const (
	// ReasonLossAcknowledged: the managers serve again from the archive as
	// it is; status.lost lists what it lost.
	ReasonLossAcknowledged = "LossAcknowledged"
	// ReasonFindingChanged: the finding is not the one acknowledged (the
	// archive caught up, or went back further): nothing was applied.
	ReasonFindingChanged = "FindingChanged"
	// ReasonOtherArchive: the ledger's archive is another one.
	ReasonOtherArchive = "OtherArchive"
)

// ArchiveAcknowledgementStatus says what the acknowledgement did.
type ArchiveAcknowledgementStatus struct {
	// conditions hold Applied: True once the managers took the archive as
	// it is (LossAcknowledged), False when the acknowledgement applies to
	// nothing (FindingChanged, OtherArchive).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// appliedTime is when it was applied.
	// +optional
	AppliedTime *metav1.Time `json:"appliedTime,omitempty"`

	// lost lists, per namespace, the records the archive lost.
	// +optional
	// +listType=map
	// +listMapKey=namespace
	Lost []LostRecords `json:"lost,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=archiveack,categories=toolledger
// +kubebuilder:printcolumn:name="Archive",type=string,JSONPath=`.spec.archive`
// +kubebuilder:printcolumn:name="Applied",type=string,JSONPath=`.status.conditions[?(@.type=="Applied")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Applied")].reason`
// +kubebuilder:printcolumn:name="Acknowledged-By",type=string,JSONPath=`.metadata.annotations.toolledger\.dev/acknowledged-by`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// ArchiveAcknowledgement is an operator's acceptance that the archive lost
// records that had left etcd for it: restored from a backup, recovered to
// a point in time, or failed over to a standby that lagged. Until then the
// managers hold every new action of the namespaces concerned
// (ArchiveBehind), keep none of their records, and are not ready, since
// the keys of the lost records are free again in the archive. It is a
// resource of its own so that who may accept a loss is a matter of RBAC,
// and the API server stamps who did (toolledger.dev/acknowledged-by).
type ArchiveAcknowledgement struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is the object's metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec names the finding acknowledged; it is immutable.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable: an acknowledgement is part of the record; create another"
	Spec ArchiveAcknowledgementSpec `json:"spec"`

	// status says what was applied, and lost.
	// +optional
	Status ArchiveAcknowledgementStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// ArchiveAcknowledgementList is a list of ArchiveAcknowledgements.
type ArchiveAcknowledgementList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ArchiveAcknowledgement `json:"items"`
}
