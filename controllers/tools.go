package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

// resolveTool finds the action's tool and the adapter that serves it, with
// the adapter's capabilities for the tool.
func (r *ToolActionReconciler) resolveTool(ctx context.Context, action *v1alpha1.ToolAction) resolvedTool {
	tool, err := r.findTool(ctx, action)
	if err != nil {
		return resolvedTool{err: err}
	}
	a, err := r.Adapters.For(tool)
	if err != nil {
		return resolvedTool{err: &invalidError{class: v1alpha1.ErrorClassInvalidInput, reason: ReasonInvalidToolContract, message: err.Error()}}
	}
	return resolvedTool{tool: tool, adapter: a, caps: a.Capabilities(tool)}
}

// findTool finds the referenced Tool, or the ClusterTool if it admits the
// action's namespace. A ClusterTool is returned as a Tool in the operator's
// namespace, where its Secrets live. A miss in the cache is confirmed with
// the API server, so that a tool applied together with the action is not
// mistaken for a missing one.
func (r *ToolActionReconciler) findTool(ctx context.Context, action *v1alpha1.ToolAction) (*v1alpha1.Tool, error) {
	ref := action.Spec.ToolRef
	if ref.Kind == v1alpha1.KindClusterTool {
		return r.resolveClusterTool(ctx, action)
	}
	key := types.NamespacedName{Namespace: action.Namespace, Name: ref.Name}
	var tool v1alpha1.Tool
	if err := r.getConfirmed(ctx, key, &tool); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &invalidError{class: v1alpha1.ErrorClassInvalidInput, reason: ReasonToolNotFound,
				message: fmt.Sprintf("tool %q not found in namespace %q", key.Name, key.Namespace)}
		}
		return nil, fmt.Errorf("cannot get tool %s: %w", key, err)
	}
	return &tool, nil
}

func (r *ToolActionReconciler) resolveClusterTool(ctx context.Context, action *v1alpha1.ToolAction) (*v1alpha1.Tool, error) {
	name := action.Spec.ToolRef.Name
	var clusterTool v1alpha1.ClusterTool
	if err := r.getConfirmed(ctx, types.NamespacedName{Name: name}, &clusterTool); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &invalidError{class: v1alpha1.ErrorClassInvalidInput, reason: ReasonToolNotFound,
				message: fmt.Sprintf("clustertool %q not found", name)}
		}
		return nil, fmt.Errorf("cannot get clustertool %s: %w", name, err)
	}
	var namespace corev1.Namespace
	if err := r.APIReader.Get(ctx, types.NamespacedName{Name: action.Namespace}, &namespace); err != nil {
		return nil, fmt.Errorf("cannot get namespace %s: %w", action.Namespace, err)
	}
	admitted, err := clusterTool.Spec.Admits(namespace.Labels)
	if err != nil {
		return nil, &invalidError{class: v1alpha1.ErrorClassInvalidInput, reason: ReasonToolNotAdmitted,
			message: fmt.Sprintf("clustertool %q has an invalid namespaceSelector: %v", name, err)}
	}
	if !admitted {
		return nil, &invalidError{class: v1alpha1.ErrorClassDenied, reason: ReasonToolNotAdmitted,
			message: fmt.Sprintf("clustertool %q does not admit namespace %q", name, action.Namespace)}
	}
	return &v1alpha1.Tool{
		ObjectMeta: metav1.ObjectMeta{Name: clusterTool.Name, Namespace: r.OperatorNamespace},
		Spec:       clusterTool.Spec.ToolSpec,
	}, nil
}

// getConfirmed reads from the cache and confirms a miss with the API server.
func (r *ToolActionReconciler) getConfirmed(ctx context.Context, key types.NamespacedName, obj client.Object) error {
	err := r.Client.Get(ctx, key, obj)
	if apierrors.IsNotFound(err) {
		err = r.APIReader.Get(ctx, key, obj)
	}
	return err
}
