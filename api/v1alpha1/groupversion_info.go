// Package v1alpha1 contains the toolledger.dev/v1alpha1 API: ToolAction, the
// ledger record of one business intent, and Tool, the catalog entry that says
// how such an intent is carried out downstream.
//
// +kubebuilder:object:generate=true
// +groupName=toolledger.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of the toolledger API.
	GroupVersion = schema.GroupVersion{Group: "toolledger.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the API types with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the API types to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(GroupVersion, &ToolAction{}, &ToolActionList{}, &Tool{}, &ToolList{}, &ToolResolution{}, &ToolResolutionList{}, &ToolApproval{}, &ToolApprovalList{}, &ClusterTool{}, &ClusterToolList{}, &Tombstone{}, &TombstoneList{},
		&EarlierLifeDecision{}, &EarlierLifeDecisionList{}, &ArchiveAcknowledgement{}, &ArchiveAcknowledgementList{})
	metav1.AddToGroupVersion(scheme, GroupVersion)
	return nil
}
