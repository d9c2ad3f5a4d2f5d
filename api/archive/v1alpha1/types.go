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
	// Chain is the record's link in its namespace's hash chain; absent for
	// a record archived before the archive had chains.
	Chain *ChainLink `json:"chain,omitempty"`
	// NamespaceUID is the uid of the namespace the record was archived
	// from. A namespace deleted and created again under its name has
	// another, and its own history: a namespace's reads show its own
	// records only, a cluster-wide list every namespace's. Absent for a
	// record archived before the archive kept it.
	NamespaceUID string `json:"namespaceUID,omitempty"`
	// ArchivedAt is when the record was archived.
	ArchivedAt metav1.Time `json:"archivedAt"`
	// Omitted names the fields a list's item leaves out, which a get of the
	// record serves: spec.parameters, and
	// metadata.annotations.kubectl.kubernetes.io/last-applied-configuration
	// (kubectl's copy of them), whatever their size. Absent on a get.
	Omitted []string `json:"omitted,omitempty"`
}

// ChainLink is a place in a namespace's hash chain: a sequence number, from
// 1 without gaps, and the hex SHA-256 that covers the record there and the
// hash before it.
type ChainLink struct {
	Sequence int64  `json:"sequence"`
	Hash     string `json:"hash"`
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

// ArchiveChain is the verification of one namespace's history in the
// archive, made when it is read: the manager recomputes the namespace's
// hash chain from its first record and reports its head, or the first
// record at which it does not hold. Each namespace has one, named ledger.
//
// +kubebuilder:object:root=true
type ArchiveChain struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Status ArchiveChainStatus `json:"status"`
}

// ArchiveChainStatus is what a verification found.
type ArchiveChainStatus struct {
	// Verified is true when the verification reached the chain's head and
	// the chain holds: no record was changed, deleted or rechained since it
	// was archived, and the chain holds every checkpoint the cluster took.
	Verified bool `json:"verified"`
	// Complete is whether the verification reached the chain's head. A
	// long chain is verified over several gets, each going on, for a
	// bounded time, from where the last stopped (Head), until one
	// completes; kubectl toolledger verify asks again until then.
	Complete bool `json:"complete"`
	// Full is whether the verification read the chain from its first
	// record. One that is not goes on from where the last complete one
	// ended, trusting the records before, whose checkpoints it checks: ask
	// for a full one with ?full=true (verify --full).
	Full bool `json:"full"`
	// Head is the newest link the verification reached: once complete,
	// the chain's head. Copy it, and compare it with a later
	// verification's to see that nothing before it was rewritten.
	Head ChainLink `json:"head"`
	// Length is the sequence of the chain's head: how far a complete
	// verification goes.
	Length int64 `json:"length"`
	// Records counts the records up to Head; Pruned those deleted by
	// --archive-history-retention, whose links the chain keeps; Unchained
	// those archived before the archive had chains, which nothing proves;
	// Checked those this get read and hashed again.
	Records   int64 `json:"records"`
	Pruned    int64 `json:"pruned"`
	Unchained int64 `json:"unchained"`
	Checked   int64 `json:"checked"`
	// Checkpoints counts the checkpoints of the chain the cluster keeps
	// (the managers take its head every few minutes) that it was found to
	// hold: a database superuser's rewrite of anything before one shows.
	Checkpoints int `json:"checkpoints"`
	// Broken names the first record at which the chain does not hold.
	Broken *ChainBreak `json:"broken,omitempty"`
	// CopiedHead is what became of a head copied earlier and given with
	// the get (?head=SEQUENCE:HASH), when the chain holds up to it.
	CopiedHead *CopiedHead `json:"copiedHead,omitempty"`
	// VerifiedAt is when the chain was recomputed.
	VerifiedAt metav1.Time `json:"verifiedAt"`
}

// CopiedHead is a head copied earlier, checked against the chain.
type CopiedHead struct {
	ChainLink `json:",inline"`
	// Result is Matches: the chain holds the same hash at that sequence;
	// or Pruned: its record was pruned inside a run, whose last hash alone
	// the chain keeps, so it can no longer be compared.
	Result string `json:"result"`
}

// ChainBreak is where a chain stops holding.
type ChainBreak struct {
	// Sequence is the record's place in the chain.
	Sequence int64 `json:"sequence"`
	// Key and UID name the record, when it is still there.
	Key string `json:"key,omitempty"`
	UID string `json:"uid,omitempty"`
	// Problem says what does not hold.
	Problem string `json:"problem"`
}

// ArchiveChainList is the verifications of several namespaces.
//
// +kubebuilder:object:root=true
type ArchiveChainList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ArchiveChain `json:"items"`
}
