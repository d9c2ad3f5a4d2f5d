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

// Tools finds the tool an action names, for every controller that needs
// one: a Tool of the action's namespace, or a ClusterTool that admits it.
type Tools struct {
	// cache reads the informer cache; reader confirms a miss with the API
	// server.
	cache  client.Reader
	reader client.Reader
	// operatorNamespace holds the Secrets of ClusterTools.
	operatorNamespace string
}

// Tools is how this reconciler finds tools, for the controllers beside it.
func (r *ToolActionReconciler) Tools() *Tools {
	return &Tools{cache: r.Client, reader: r.APIReader, operatorNamespace: r.OperatorNamespace}
}

// resolveTool finds the action's tool and the adapter that serves it, with
// the adapter's capabilities for the tool.
func (r *ToolActionReconciler) resolveTool(ctx context.Context, action *v1alpha1.ToolAction) resolvedTool {
	tool, err := r.Tools().find(ctx, action)
	if err != nil {
		return resolvedTool{err: err}
	}
	a, err := r.Adapters.For(tool)
	if err != nil {
		return resolvedTool{err: &invalidError{class: v1alpha1.ErrorClassInvalidInput, reason: ReasonInvalidToolContract, message: err.Error()}}
	}
	return resolvedTool{tool: tool, adapter: a, caps: a.Capabilities(tool)}
}

// find finds the referenced Tool, or the ClusterTool if it admits the
// action's namespace. A ClusterTool is returned as a Tool in the operator's
// namespace, where its Secrets live. A miss in the cache is confirmed with
// the API server, so that a tool applied together with the action is not
// mistaken for a missing one.
func (t *Tools) find(ctx context.Context, action *v1alpha1.ToolAction) (*v1alpha1.Tool, error) {
	ref := action.Spec.ToolRef
	if ref.Kind == v1alpha1.KindClusterTool {
		return t.findClusterTool(ctx, action)
	}
	key := types.NamespacedName{Namespace: action.Namespace, Name: ref.Name}
	var tool v1alpha1.Tool
	if err := getConfirmed(ctx, t.cache, t.reader, key, &tool); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &invalidError{class: v1alpha1.ErrorClassInvalidInput, reason: ReasonToolNotFound,
				message: fmt.Sprintf("tool %q not found in namespace %q", key.Name, key.Namespace)}
		}
		return nil, fmt.Errorf("cannot get tool %s: %w", key, err)
	}
	return &tool, nil
}

func (t *Tools) findClusterTool(ctx context.Context, action *v1alpha1.ToolAction) (*v1alpha1.Tool, error) {
	name := action.Spec.ToolRef.Name
	var clusterTool v1alpha1.ClusterTool
	if err := getConfirmed(ctx, t.cache, t.reader, types.NamespacedName{Name: name}, &clusterTool); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &invalidError{class: v1alpha1.ErrorClassInvalidInput, reason: ReasonToolNotFound,
				message: fmt.Sprintf("clustertool %q not found", name)}
		}
		return nil, fmt.Errorf("cannot get clustertool %s: %w", name, err)
	}
	var namespace corev1.Namespace
	if err := t.reader.Get(ctx, types.NamespacedName{Name: action.Namespace}, &namespace); err != nil {
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
		ObjectMeta: metav1.ObjectMeta{Name: clusterTool.Name, Namespace: t.operatorNamespace},
		Spec:       clusterTool.Spec.ToolSpec,
	}, nil
}

// getConfirmed reads from the cache and confirms a miss with the API server.
func (r *ToolActionReconciler) getConfirmed(ctx context.Context, key types.NamespacedName, obj client.Object) error {
	return getConfirmed(ctx, r.Client, r.APIReader, key, obj)
}

// getConfirmed reads obj from cache and confirms a miss with reader.
func getConfirmed(ctx context.Context, cache, reader client.Reader, key types.NamespacedName, obj client.Object) error {
	err := cache.Get(ctx, key, obj)
	if apierrors.IsNotFound(err) {
		err = reader.Get(ctx, key, obj)
	}
	return err
}
