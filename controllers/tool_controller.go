package controllers

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/catalog"
)

// Reasons of a Tool's Ready condition.
const (
	ReasonToolReady       = "Ready"
	ReasonInvalidURL      = "InvalidURL"
	ReasonInvalidSchema   = "InvalidSchema"
	ReasonSecretNotFound  = "SecretNotFound"
	ReasonSecretKeyAbsent = "SecretKeyAbsent"
)

// toolRecheck is how often a tool's Secret is checked again: Secrets are
// read with get only, never watched.
const toolRecheck = 5 * time.Minute

// ToolStatusReconciler publishes whether a Tool or ClusterTool can be used,
// and the MCP hints of its idempotency class. Actions do not wait for it:
// it tells people, before an action fails, that a tool is misconfigured.
type ToolStatusReconciler struct {
	Client    client.Client
	APIReader client.Reader
	Clock     clock.PassiveClock
	// OperatorNamespace holds the Secrets of ClusterTools.
	OperatorNamespace string
}

// +kubebuilder:rbac:groups=toolledger.dev,resources=tools/status;clustertools/status,verbs=get;update;patch

// ReconcileTool updates a Tool's status.
func (r *ToolStatusReconciler) ReconcileTool(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var tool v1alpha1.Tool
	if err := r.Client.Get(ctx, req.NamespacedName, &tool); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	next := tool.DeepCopy()
	r.setStatus(ctx, &next.Status, &tool.Spec, tool.Namespace, tool.Generation)
	return r.write(ctx, &tool.Status, next)
}

// ReconcileClusterTool updates a ClusterTool's status.
func (r *ToolStatusReconciler) ReconcileClusterTool(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var tool v1alpha1.ClusterTool
	if err := r.Client.Get(ctx, req.NamespacedName, &tool); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	next := tool.DeepCopy()
	r.setStatus(ctx, &next.Status, &tool.Spec.ToolSpec, r.OperatorNamespace, tool.Generation)
	return r.write(ctx, &tool.Status, next)
}

func (r *ToolStatusReconciler) write(ctx context.Context, current *v1alpha1.ToolStatus, next client.Object) (ctrl.Result, error) {
	var nextStatus *v1alpha1.ToolStatus
	switch t := next.(type) {
	case *v1alpha1.Tool:
		nextStatus = &t.Status
	case *v1alpha1.ClusterTool:
		nextStatus = &t.Status
	}
	if !toolStatusEqual(current, nextStatus) {
		if err := r.Client.Status().Update(ctx, next); err != nil {
			return ctrl.Result{}, ignoreConflict(err, "cannot update the status of %s", next.GetName())
		}
	}
	return ctrl.Result{RequeueAfter: toolRecheck}, nil
}

func (r *ToolStatusReconciler) setStatus(ctx context.Context, status *v1alpha1.ToolStatus, spec *v1alpha1.ToolSpec, secretNamespace string, generation int64) {
	hints := spec.IdempotencyClass.Hints()
	status.MCPHints = &hints
	status.ObservedGeneration = generation
	reason, message := r.check(ctx, spec, secretNamespace)
	condition := metav1.Condition{
		Type: v1alpha1.ConditionToolReady, Status: metav1.ConditionTrue, Reason: reason, Message: message,
		ObservedGeneration: generation, LastTransitionTime: metav1.NewTime(r.Clock.Now()),
	}
	if reason != ReasonToolReady {
		condition.Status = metav1.ConditionFalse
	}
	meta.SetStatusCondition(&status.Conditions, condition)
}

// check returns ReasonToolReady, or the first reason the tool cannot be used.
func (r *ToolStatusReconciler) check(ctx context.Context, spec *v1alpha1.ToolSpec, secretNamespace string) (string, string) {
	if err := checkURL(spec.HTTP.URL); err != nil {
		return ReasonInvalidURL, "spec.http.url: " + err.Error()
	}
	if spec.HTTP.Lookup != nil {
		if err := checkURL(strings.ReplaceAll(spec.HTTP.Lookup.URL, "{key}", "key")); err != nil {
			return ReasonInvalidURL, "spec.http.lookup.url: " + err.Error()
		}
	}
	if _, err := catalog.CompileSchema(spec.ParametersSchema); err != nil {
		return ReasonInvalidSchema, "spec.parametersSchema: " + err.Error()
	}
	if auth := spec.HTTP.AuthHeader; auth != nil {
		ref := auth.SecretKeyRef
		var secret corev1.Secret
		err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: secretNamespace, Name: ref.Name}, &secret)
		switch {
		case apierrors.IsNotFound(err):
			return ReasonSecretNotFound, fmt.Sprintf("Secret %s/%s not found", secretNamespace, ref.Name)
		case err != nil:
			return ReasonSecretNotFound, fmt.Sprintf("cannot read Secret %s/%s: %v", secretNamespace, ref.Name, err)
		}
		if _, ok := secret.Data[ref.Key]; !ok {
			return ReasonSecretKeyAbsent, fmt.Sprintf("Secret %s/%s has no key %q", secretNamespace, ref.Name, ref.Key)
		}
	}
	return ReasonToolReady, "the tool can be used"
}

func checkURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q is not an absolute http(s) URL", raw)
	}
	return nil
}

// toolStatusEqual ignores condition timestamps, which change on every check.
func toolStatusEqual(a, b *v1alpha1.ToolStatus) bool {
	strip := func(s *v1alpha1.ToolStatus) *v1alpha1.ToolStatus {
		s = s.DeepCopy()
		for i := range s.Conditions {
			s.Conditions[i].LastTransitionTime = metav1.Time{}
		}
		return s
	}
	return equality.Semantic.DeepEqual(strip(a), strip(b))
}

// SetupWithManager registers one controller for Tools and one for ClusterTools.
func (r *ToolStatusReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := ctrl.NewControllerManagedBy(mgr).For(&v1alpha1.Tool{}).Named("tool").
		Complete(reconcile.Func(r.ReconcileTool)); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).For(&v1alpha1.ClusterTool{}).Named("clustertool").
		Complete(reconcile.Func(r.ReconcileClusterTool))
}
