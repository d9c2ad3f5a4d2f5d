package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ledgerv1alpha1 "github.com/toolledger/toolledger/api/v1alpha1"
)

// ArchivedToolAction is a finished ToolAction as the archive keeps it after
// it left etcd: its metadata (name = idempotency key, namespace = tenant,
// uid, labels, annotations, creation time), spec and status, as they were
// when it was retired, and why and when it left. Several records can share
// a key (a key re-used after its keyRetention, or an action created again
// and answered from the archive): get returns the newest, list returns all.
//
// +kubebuilder:object:root=true
type ArchivedToolAction struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the action's spec. It is empty for a record kept by a
	// Tombstone before the archive was configured: the Tombstone was all
	// that was left of it.
	Spec ledgerv1alpha1.ToolActionSpec `json:"spec"`
	// Status is the action's status when it was retired.
	Status ledgerv1alpha1.ToolActionStatus `json:"status"`
	// Archive says why and when the record left etcd.
	Archive ArchiveInfo `json:"archive"`
}

// ArchiveInfo is what the archive adds to a record.
type ArchiveInfo struct {
	// Cause is why the record left etcd: Deleted (kubectl delete, a GitOps
	// prune), RecordRetention or KeyRetention.
	Cause string `json:"cause"`
	// DeletedBy is the user who deleted the record, when the manager knows.
	DeletedBy string `json:"deletedBy,omitempty"`
	// DeletionTime is when the record left etcd, or was asked to.
	DeletionTime metav1.Time `json:"deletionTime"`
	// GuardsKey is whether the record keeps its key: a ToolAction created
	// again under the key is answered from it (SettledByArchive) until the
	// tool's keyRetention has passed since its completion.
	GuardsKey bool `json:"guardsKey"`
	// IdempotencyClass is the tool's class when the record was retired.
	IdempotencyClass ledgerv1alpha1.IdempotencyClass `json:"idempotencyClass,omitempty"`
	// FromTombstone is true for a record migrated from a Tombstone.
	FromTombstone bool `json:"fromTombstone,omitempty"`
}

// ArchivedToolActionList is a page of archived records, ordered by
// namespace, key and completion time.
//
// +kubebuilder:object:root=true
type ArchivedToolActionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ArchivedToolAction `json:"items"`
}
