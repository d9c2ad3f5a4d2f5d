package controllers

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/pkg/toolref"
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

// NewTools finds tools in cache, confirming a miss with reader; the
// Secrets of ClusterTools are in operatorNamespace.
func NewTools(cache, reader client.Reader, operatorNamespace string) *Tools {
	return &Tools{cache: cache, reader: reader, operatorNamespace: operatorNamespace}
}

// resolveTool finds the action's tool and the adapter that serves it, with
// the adapter's capabilities for the tool.
func (r *ToolActionReconciler) resolveTool(ctx context.Context, action *v1alpha1.ToolAction) resolvedTool {
	tool, err := r.Tools.find(ctx, action)
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
// action's namespace (toolref.Find decides). A ClusterTool is returned as a
// Tool in the operator's namespace, where its Secrets live. A tool that
// does not exist, or does not admit the namespace, is an invalidError.
func (t *Tools) find(ctx context.Context, action *v1alpha1.ToolAction) (*v1alpha1.Tool, error) {
	tool, err := toolref.Find(ctx, t, action.Namespace, action.Spec.ToolRef)
	var notFound *toolref.NotFoundError
	var notAdmitted *toolref.NotAdmittedError
	switch {
	case errors.As(err, &notFound):
		return nil, &invalidError{class: v1alpha1.ErrorClassInvalidInput, reason: ReasonToolNotFound, message: err.Error()}
	case errors.As(err, &notAdmitted) && notAdmitted.SelectorError != nil:
		return nil, &invalidError{class: v1alpha1.ErrorClassInvalidInput, reason: ReasonToolNotAdmitted, message: err.Error()}
	case errors.As(err, &notAdmitted):
		return nil, &invalidError{class: v1alpha1.ErrorClassDenied, reason: ReasonToolNotAdmitted, message: err.Error()}
	case err != nil:
		return nil, err
	}
	if action.Spec.ToolRef.KindOrDefault() == v1alpha1.KindClusterTool {
		tool.Namespace = t.operatorNamespace
	}
	return tool, nil
}

// Tool reads a Tool for toolref.Find. A miss in the cache is confirmed
// with the API server, so that a tool applied together with the action is
// not mistaken for a missing one.
func (t *Tools) Tool(ctx context.Context, namespace, name string) (*v1alpha1.Tool, error) {
	key := types.NamespacedName{Namespace: namespace, Name: name}
	var tool v1alpha1.Tool
	if err := getConfirmed(ctx, t.cache, t.reader, key, &tool); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("cannot get tool %s: %w", key, err)
	}
	return &tool, nil
}

// ClusterTool reads a ClusterTool for toolref.Find, confirming a miss as
// Tool does.
func (t *Tools) ClusterTool(ctx context.Context, name string) (*v1alpha1.ClusterTool, error) {
	var clusterTool v1alpha1.ClusterTool
	if err := getConfirmed(ctx, t.cache, t.reader, types.NamespacedName{Name: name}, &clusterTool); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("cannot get clustertool %s: %w", name, err)
	}
	return &clusterTool, nil
}

// NamespaceLabels reads a namespace's labels from the API server, which
// the manager does not cache.
func (t *Tools) NamespaceLabels(ctx context.Context, name string) (map[string]string, error) {
	var namespace corev1.Namespace
	if err := t.reader.Get(ctx, types.NamespacedName{Name: name}, &namespace); err != nil {
		return nil, fmt.Errorf("cannot get namespace %s: %w", name, err)
	}
	return namespace.Labels, nil
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
