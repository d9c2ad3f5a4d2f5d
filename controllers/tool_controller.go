package controllers

import (
	"context"
	"errors"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/toolcontract"
	"github.com/toolledger/toolledger/pkg/adapter"
)

// Reasons of a Tool's Ready condition that the controller decides; the
// tool's adapter names the reasons of its own checks.
const (
	ReasonToolReady     = "Ready"
	ReasonInvalidSchema = "InvalidSchema"
	// ReasonUnsupportedSchema: the schema uses a keyword the controller
	// cannot check, such as $ref or x-kubernetes-validations.
	ReasonUnsupportedSchema = "UnsupportedSchema"
	ReasonNoAdapter         = "NoAdapter"
	ReasonCheckFailed       = "CheckFailed"
)

// toolRecheck is how often a tool's Secret is checked again: Secrets are
// read with get only, never watched.
const toolRecheck = 5 * time.Minute

// ToolStatusReconciler publishes whether a Tool or ClusterTool can be used,
// and the MCP hints of its idempotency class. Actions do not wait for it:
// it tells people, before an action fails, that a tool is misconfigured.
type ToolStatusReconciler struct {
	Client client.Client
	// Adapters check their own part of each tool.
	Adapters *adapter.Registry
	Clock    clock.PassiveClock
	// OperatorNamespace holds the Secrets of ClusterTools.
	OperatorNamespace string
}

// +kubebuilder:rbac:groups=toolledger.dev,resources=tools/status;clustertools/status,verbs=update

// ReconcileTool updates a Tool's status.
func (r *ToolStatusReconciler) ReconcileTool(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var tool v1alpha1.Tool
	if err := r.Client.Get(ctx, req.NamespacedName, &tool); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	next := tool.DeepCopy()
	r.setStatus(ctx, &next.Status, &tool, tool.Generation)
	return r.write(ctx, &tool.Status, next)
}

// ReconcileClusterTool updates a ClusterTool's status.
func (r *ToolStatusReconciler) ReconcileClusterTool(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var tool v1alpha1.ClusterTool
	if err := r.Client.Get(ctx, req.NamespacedName, &tool); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	next := tool.DeepCopy()
	// A ClusterTool is checked as the Tool it serves as: in the operator's
	// namespace, where its Secrets live.
	served := &v1alpha1.Tool{ObjectMeta: metav1.ObjectMeta{Name: tool.Name, Namespace: r.OperatorNamespace}, Spec: tool.Spec.ToolSpec}
	r.setStatus(ctx, &next.Status, served, tool.Generation)
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

func (r *ToolStatusReconciler) setStatus(ctx context.Context, status *v1alpha1.ToolStatus, tool *v1alpha1.Tool, generation int64) {
	hints := tool.Spec.IdempotencyClass.Hints()
	status.MCPHints = &hints
	status.ObservedGeneration = generation
	reason, message := r.check(ctx, tool)
	condition := metav1.Condition{
		Type: v1alpha1.ConditionToolReady, Status: metav1.ConditionTrue, Reason: reason, Message: message,
		ObservedGeneration: generation, LastTransitionTime: metav1.NewTime(r.Clock.Now()),
	}
	if reason != ReasonToolReady {
		condition.Status = metav1.ConditionFalse
	}
	meta.SetStatusCondition(&status.Conditions, condition)
}

// check returns ReasonToolReady, or the first reason the tool cannot be
// used: its schema, then its adapter's own checks (Secrets are read from the
// tool's namespace).
func (r *ToolStatusReconciler) check(ctx context.Context, tool *v1alpha1.Tool) (string, string) {
	if _, err := toolcontract.CompileSchema(tool.Spec.ParametersSchema); err != nil {
		if unsupported := (*toolcontract.UnsupportedError)(nil); errors.As(err, &unsupported) {
			return ReasonUnsupportedSchema, "spec.parametersSchema: " + err.Error()
		}
		return ReasonInvalidSchema, "spec.parametersSchema: " + err.Error()
	}
	a, err := r.Adapters.For(tool)
	if err != nil {
		return ReasonNoAdapter, err.Error()
	}
	if err := a.Validate(ctx, tool); err != nil {
		var invalid *adapter.ConfigError
		if errors.As(err, &invalid) {
			return invalid.Reason, invalid.Message
		}
		return ReasonCheckFailed, err.Error()
	}
	return ReasonToolReady, "the tool can be used"
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
