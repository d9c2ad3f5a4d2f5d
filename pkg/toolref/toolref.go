// Package toolref finds the tool a ToolAction's reference names: a Tool of
// the action's namespace, or a ClusterTool whose namespaceSelector admits
// that namespace. The controllers, the front ends' ledger client and the
// SDK each read the API their own way (a cache, REST, a RESTClient), so
// they hand their reads in as a Source, and Find decides which object,
// if any, is the action's tool. It depends on the API types, apimachinery
// and client-go's REST client only, so that the SDK stays light.
package toolref

import (
	"context"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

// Source reads what a reference is resolved through. Tool and ClusterTool
// return nil, and no error, when the object does not exist; every error a
// Source returns is passed on as it is, so it says what it could not read.
type Source interface {
	Tool(ctx context.Context, namespace, name string) (*v1alpha1.Tool, error)
	ClusterTool(ctx context.Context, name string) (*v1alpha1.ClusterTool, error)
	// NamespaceLabels reads the labels of a namespace, which a
	// ClusterTool's namespaceSelector is matched against.
	NamespaceLabels(ctx context.Context, namespace string) (map[string]string, error)
}

// NotFoundError says that the referenced tool does not exist.
type NotFoundError struct {
	// Kind is Tool or ClusterTool; Namespace is the Tool's.
	Kind, Namespace, Name string
}

func (e *NotFoundError) Error() string {
	if e.Kind == v1alpha1.KindClusterTool {
		return fmt.Sprintf("clustertool %q not found", e.Name)
	}
	return fmt.Sprintf("tool %q not found in namespace %q", e.Name, e.Namespace)
}

// NotAdmittedError says that a ClusterTool is not the tool of actions in
// Namespace: its namespaceSelector does not match the namespace, or is
// invalid (SelectorError).
type NotAdmittedError struct {
	Name, Namespace string
	SelectorError   error
}

func (e *NotAdmittedError) Error() string {
	if e.SelectorError != nil {
		return fmt.Sprintf("clustertool %q has an invalid namespaceSelector: %v", e.Name, e.SelectorError)
	}
	return fmt.Sprintf("clustertool %q does not admit namespace %q", e.Name, e.Namespace)
}

func (e *NotAdmittedError) Unwrap() error { return e.SelectorError }

// Find returns the tool that ref names for an action in namespace. A
// ClusterTool is returned as a Tool of its name and spec, with no
// namespace: a caller that needs its Secrets places it in the operator's
// namespace. A missing tool is a *NotFoundError, a ClusterTool that does
// not admit the namespace a *NotAdmittedError.
func Find(ctx context.Context, src Source, namespace string, ref v1alpha1.ToolReference) (*v1alpha1.Tool, error) {
	if ref.KindOrDefault() == v1alpha1.KindClusterTool {
		return findClusterTool(ctx, src, namespace, ref.Name)
	}
	tool, err := src.Tool(ctx, namespace, ref.Name)
	switch {
	case err != nil:
		return nil, err
	case tool == nil:
		return nil, &NotFoundError{Kind: v1alpha1.KindTool, Namespace: namespace, Name: ref.Name}
	}
	return tool, nil
}

func findClusterTool(ctx context.Context, src Source, namespace, name string) (*v1alpha1.Tool, error) {
	clusterTool, err := src.ClusterTool(ctx, name)
	switch {
	case err != nil:
		return nil, err
	case clusterTool == nil:
		return nil, &NotFoundError{Kind: v1alpha1.KindClusterTool, Name: name}
	}
	labels, err := src.NamespaceLabels(ctx, namespace)
	if err != nil {
		return nil, err
	}
	admitted, err := clusterTool.Spec.Admits(labels)
	if err != nil {
		return nil, &NotAdmittedError{Name: name, Namespace: namespace, SelectorError: err}
	}
	if !admitted {
		return nil, &NotAdmittedError{Name: name, Namespace: namespace}
	}
	tool := &v1alpha1.Tool{Spec: clusterTool.Spec.ToolSpec}
	tool.Name = clusterTool.Name
	return tool, nil
}

// NamespaceLabelsOver reads a namespace's labels through client, a REST
// client of any API group (the SDK's and the front ends' serve toolledger's
// alone), which reaches the core API by its path.
func NamespaceLabelsOver(ctx context.Context, client rest.Interface, namespace string) (map[string]string, error) {
	raw, err := client.Get().AbsPath("/api/v1/namespaces", namespace).DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	var meta metav1.PartialObjectMetadata
	if err := json.Unmarshal(raw, &meta); err != nil {
		return nil, fmt.Errorf("cannot read namespace %q: %w", namespace, err)
	}
	return meta.Labels, nil
}
