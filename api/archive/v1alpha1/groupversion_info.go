// Package v1alpha1 contains the archive.toolledger.dev/v1alpha1 API:
// ArchivedToolAction, a finished ledger record that has left etcd for the
// archive (PostgreSQL), and ArchiveChain, the verification of a namespace's
// history as a hash chain. The manager serves it as an aggregated API, so that
// the API server authenticates and authorizes every read as the caller's
// own, with RBAC on archivedtoolactions and archivechains, and no user ever holds the
// database's credentials. It is read-only: get and list.
//
// +kubebuilder:object:generate=true
// +kubebuilder:skip
// +groupName=archive.toolledger.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of the archive API.
	GroupVersion = schema.GroupVersion{Group: "archive.toolledger.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the API types with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the API types to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// Resource is the plural resource name of ArchivedToolAction.
const Resource = "archivedtoolactions"

// The fields a list of archived records selects by (fieldSelector, with =
// or ==), each a path of the record as the API serves it.
const (
	FieldTool        = "spec.toolRef.name"
	FieldPhase       = "status.phase"
	FieldExternalRef = "status.externalRef"
	FieldRequestedBy = "metadata.annotations.toolledger.dev/requested-by"
	FieldDecidedBy   = "status.approval.decidedBy"
)

// The query parameters that bound a list of archived records beyond
// equality, which field selectors cannot say: the completion time's range
// (RFC 3339; from included, until not) and the keys' prefix.
const (
	ParamCompletedFrom  = "completedFrom"
	ParamCompletedUntil = "completedUntil"
	ParamKeyPrefix      = "keyPrefix"
)

// ChainResource is the plural resource name of ArchiveChain, and ChainName
// the name of a namespace's one ArchiveChain.
const (
	ChainResource = "archivechains"
	ChainName     = "ledger"
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(GroupVersion, &ArchivedToolAction{}, &ArchivedToolActionList{}, &ArchiveChain{}, &ArchiveChainList{})
	metav1.AddToGroupVersion(scheme, GroupVersion)
	return nil
}
