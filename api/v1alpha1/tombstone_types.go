package v1alpha1

import (
	"crypto/sha256"
	"encoding/hex"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Labels on every Tombstone, so that the retention sweep finds a tool's
// tombstones without reading the others.
const (
	// LabelTool is the tool the deleted action named, as ToolLabelValue
	// spells it.
	LabelTool = "toolledger.dev/tool"
	// LabelToolKind is its kind, Tool or ClusterTool.
	LabelToolKind = "toolledger.dev/tool-kind"
)

// ToolLabelValue spells a tool's name as a label value: the name itself
// when it fits in 63 characters, else its first 46 and 16 hex digits of its
// SHA-256, so that every tool, however long its name, can be selected.
func ToolLabelValue(name string) string {
	const maxLabelValue = 63
	if len(name) <= maxLabelValue {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return name[:maxLabelValue-17] + "-" + hex.EncodeToString(sum[:8])
}

// Why a record became a tombstone.
const (
	// TombstoneCauseDeleted: someone deleted the ToolAction (a user, a
	// GitOps prune, the garbage collector).
	TombstoneCauseDeleted = "Deleted"
	// TombstoneCauseRecordRetention: the tool's recordRetention passed.
	TombstoneCauseRecordRetention = "RecordRetention"
	// TombstoneCauseKeyRetention: the tool's keyRetention passed; only an
	// archived record has this cause (its key is free, its history kept).
	TombstoneCauseKeyRetention = "KeyRetention"
)

// TombstoneRecord is what a late duplicate of a deleted action needs, and
// nothing more: the request's digest, the outcome and where it came from.
type TombstoneRecord struct {
	// actionUID is the uid of the deleted ToolAction.
	// +required
	ActionUID types.UID `json:"actionUID"`

	// requestDigest is the deleted action's request digest; a ToolAction
	// created again under this key is compared with it.
	// +required
	RequestDigest string `json:"requestDigest"`

	// phase is the action's final phase, Succeeded or Failed.
	// +required
	// +kubebuilder:validation:Enum=Succeeded;Failed
	Phase Phase `json:"phase"`

	// errorClass and errorReason are the error of a Failed action.
	// +optional
	ErrorClass ErrorClass `json:"errorClass,omitempty"`
	// +optional
	ErrorReason string `json:"errorReason,omitempty"`

	// externalRef is the downstream's identifier of the effect.
	// +optional
	ExternalRef string `json:"externalRef,omitempty"`

	// attempts is how many attempts were dispatched.
	// +optional
	Attempts int32 `json:"attempts,omitempty"`

	// completionTime is when the action finished; the tool's keyRetention
	// counts from it.
	// +required
	CompletionTime metav1.Time `json:"completionTime"`

	// keptUntil is the action's status.keptUntil: the key is not freed
	// before it, whatever the tool's keyRetention says later.
	// +optional
	KeptUntil *metav1.Time `json:"keptUntil,omitempty"`

	// toolRef is the tool the action named, and idempotencyClass its class
	// when the action finished.
	// +required
	ToolRef ToolReference `json:"toolRef"`
	// +optional
	IdempotencyClass IdempotencyClass `json:"idempotencyClass,omitempty"`

	// cause says why the record was deleted: Deleted or RecordRetention.
	// +required
	// +kubebuilder:validation:Enum=Deleted;RecordRetention
	Cause string `json:"cause"`

	// deletedBy is who deleted the record, where that is known: the manager
	// for its retention. The API server does not record who deleted an
	// object; its audit log does.
	// +optional
	DeletedBy string `json:"deletedBy,omitempty"`

	// deletionTime is when the record's deletion was requested.
	// +required
	DeletionTime metav1.Time `json:"deletionTime"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=tomb,categories=toolledger
// +kubebuilder:printcolumn:name="Tool",type=string,JSONPath=`.record.toolRef.name`
// +kubebuilder:printcolumn:name="Outcome",type=string,JSONPath=`.record.phase`
// +kubebuilder:printcolumn:name="External-Ref",type=string,JSONPath=`.record.externalRef`
// +kubebuilder:printcolumn:name="Completed",type=date,JSONPath=`.record.completionTime`
// +kubebuilder:printcolumn:name="Cause",type=string,JSONPath=`.record.cause`,priority=1
// +kubebuilder:printcolumn:name="Digest",type=string,JSONPath=`.record.requestDigest`,priority=1

// Tombstone is the compact record of a deleted ToolAction that may have
// caused an effect. Its name is the action's name, the idempotency key, and
// its namespace the action's: while it exists, a ToolAction created again
// under that key is never dispatched, and shows the original outcome (same
// request) or fails with DuplicateConflict (another request). The manager
// writes it before it lets the record go and deletes it once the tool's
// keyRetention has passed; nobody else writes it.
type Tombstone struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is the object's metadata; the name is the idempotency key.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// record is what remains of the deleted action.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="record is immutable: a tombstone keeps what the deleted action did"
	Record TombstoneRecord `json:"record"`
}

// KeyFreedAt is when the key of an action that finished at completed is
// freed by a keyRetention of d: not before keptUntil, the date its answers
// stated, when it has one. The manager and its clients read the rule here.
func KeyFreedAt(completed time.Time, keptUntil *metav1.Time, d time.Duration) time.Time {
	freed := completed.Add(d)
	if keptUntil != nil && keptUntil.After(freed) {
		return keptUntil.Time
	}
	return freed
}

// NewTombstone is the Tombstone that keeps key of namespace with record,
// labelled for its tool's retention sweep.
func NewTombstone(namespace, key string, record TombstoneRecord) *Tombstone {
	kind := record.ToolRef.KindOrDefault()
	record.ToolRef.Kind = kind
	return &Tombstone{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: namespace,
			Name:      key,
			Labels:    map[string]string{LabelTool: ToolLabelValue(record.ToolRef.Name), LabelToolKind: kind},
		},
		Record: record,
	}
}

// +kubebuilder:object:root=true

// TombstoneList is a list of Tombstones.
type TombstoneList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Tombstone `json:"items"`
}

// Reasons of a ToolAction created again under a key that has a Tombstone.
const (
	// ReasonSettledByTombstone: the same request was settled before under
	// this key; the action shows that outcome and is not dispatched again.
	ReasonSettledByTombstone = "SettledByTombstone"
	// ReasonTombstoneConflict: another request was settled before under
	// this key; the action fails with DuplicateConflict.
	ReasonTombstoneConflict = "TombstoneConflict"
)

// Reasons of a ToolAction created again under a key whose record the
// archive keeps (a manager run with --archive-dsn).
const (
	// ReasonSettledByArchive: the same request was settled before under
	// this key; the action shows that outcome and is not dispatched again.
	ReasonSettledByArchive = "SettledByArchive"
	// ReasonArchiveConflict: another request was settled before under this
	// key; the action fails with DuplicateConflict.
	ReasonArchiveConflict = "ArchiveConflict"
	// ReasonArchiveUnavailable: the archive cannot check a new action's
	// key, so the action waits, never dispatched before it can.
	ReasonArchiveUnavailable = "ArchiveUnavailable"
	// ReasonArchiveRequired: the ledger keeps its keys in an archive the
	// manager does not use, so a new action waits.
	ReasonArchiveRequired = "ArchiveRequired"
	// ReasonArchiveBehind: the archive no longer holds records of the
	// namespace that left etcd for it (restored, or failed over to a
	// standby that lagged), so a new action waits until it catches up or an
	// operator acknowledges the loss (an ArchiveAcknowledgement).
	ReasonArchiveBehind = "ArchiveBehind"
	// ReasonEarlierNamespaceKey: an earlier life of the namespace's name
	// (deleted, then created again) guards the key in the archive, so the
	// action waits until the namespace's owner adopts that history or an
	// administrator releases it (an EarlierLifeDecision).
	ReasonEarlierNamespaceKey = "EarlierNamespaceKey"
)
