package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// ClusterToolSpec is a tool contract offered to the namespaces its selector
// admits. A ClusterTool runs in the operator's namespace, so it cannot use
// kubernetesApply, whose effect carries a tenant's own permissions.
// +kubebuilder:validation:XValidation:rule="!has(self.kubernetesApply)",message="kubernetesApply is for Tools: the effect must carry a tenant namespace's own permissions"
type ClusterToolSpec struct {
	ToolSpec `json:",inline"`

	// namespaceSelector selects the namespaces (tenants) whose ToolActions may
	// use this tool. An empty selector admits every namespace; a missing one none.
	// +required
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector"`
}

// Admits reports whether the selector admits a namespace with these labels:
// an empty selector admits every namespace, a missing one none.
func (s *ClusterToolSpec) Admits(namespaceLabels map[string]string) (bool, error) {
	if s.NamespaceSelector == nil {
		return false, nil
	}
	selector, err := metav1.LabelSelectorAsSelector(s.NamespaceSelector)
	if err != nil {
		return false, err
	}
	return selector.Matches(labels.Set(namespaceLabels)), nil
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,categories=toolledger
// +kubebuilder:printcolumn:name="Operation",type=string,JSONPath=`.spec.operation`
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.spec.version`
// +kubebuilder:printcolumn:name="Class",type=string,JSONPath=`.spec.idempotencyClass`
// +kubebuilder:printcolumn:name="Adapter",type=string,JSONPath=`.spec.http.url`,priority=1
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// ClusterTool is a platform-wide catalog entry. ToolActions reference it
// with toolRef.kind ClusterTool from the namespaces its selector admits; its
// auth Secret lives in the operator's own namespace, out of tenants' reach.
type ClusterTool struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is the object's metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the tool contract and who may use it.
	// +required
	Spec ClusterToolSpec `json:"spec"`

	// status says whether the tool can be used.
	// +optional
	Status ToolStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// ClusterToolList is a list of ClusterTools.
type ClusterToolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterTool `json:"items"`
}
