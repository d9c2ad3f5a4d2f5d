// Package v1alpha1 contains the toolledger.dev/v1alpha1 API: ToolAction, the
// ledger record of one business intent, and Tool, the catalog entry that says
// how such an intent is carried out downstream.
//
// +kubebuilder:object:generate=true
// +groupName=toolledger.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of the toolledger API.
	GroupVersion = schema.GroupVersion{Group: "toolledger.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the API types with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the API types to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
