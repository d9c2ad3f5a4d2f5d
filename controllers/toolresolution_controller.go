package controllers

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/printable"
)

// Reasons of the Applied condition of a ToolResolution.
const (
	ReasonApplied        = "Applied"
	ReasonActionNotFound = "ActionNotFound"
	ReasonNotResolvable  = "NotResolvable"
	// ReasonStaleAttempt: the resolution judged an earlier attempt than
	// the one the action is at; the later attempt may have applied.
	ReasonStaleAttempt = "StaleAttempt"
)

// ToolResolutionReconciler applies a human's finding to an Unknown or
// Escalated action. The action keeps everything it recorded; the resolution
// is appended to its history.
type ToolResolutionReconciler struct {
	Decisions
}

// +kubebuilder:rbac:groups=toolledger.dev,resources=toolresolutions,verbs=get;list;watch
// +kubebuilder:rbac:groups=toolledger.dev,resources=toolresolutions/status,verbs=update

// Reconcile applies a resolution once. The action is written first (a
// compare-and-set status update) and the resolution marked afterwards; after
// a crash in between, the action's history shows the resolution was applied.
func (r *ToolResolutionReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var resolution v1alpha1.ToolResolution
	if err := r.Client.Get(ctx, req.NamespacedName, &resolution); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if meta.FindStatusCondition(resolution.Status.Conditions, v1alpha1.ConditionApplied) != nil {
		return ctrl.Result{}, nil
	}
	action, err := r.action(ctx, resolution.Namespace, resolution.Spec.ActionName)
	if err != nil {
		return ctrl.Result{}, err
	}
	switch step := decideResolution(&resolution, action); step.kind {
	case decisionRefuse:
		return ctrl.Result{}, r.mark(ctx, &resolution, metav1.ConditionFalse, step.reason, step.message)
	case decisionApplied:
		// Applied before a crash or a failed mark: what follows is scheduled again.
		r.Ledger.follow(action)
		return ctrl.Result{}, r.mark(ctx, &resolution, metav1.ConditionTrue, ReasonApplied, "applied to ToolAction "+action.Name)
	}
	rules := r.Ledger.rules()
	rules.by = resolutionActor(&resolution)
	recorded, err := r.Ledger.recordDecision(ctx, action, rules.resolved(&resolution))
	switch {
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("cannot apply resolution %s to %s: %w", resolution.Name, action.Name, err)
	case recorded == nil:
		return lostRace(ctx, action.Name), nil
	}
	return ctrl.Result{}, r.mark(ctx, &resolution, metav1.ConditionTrue, ReasonApplied, "applied to ToolAction "+action.Name)
}

// resolutionActor names a resolution in the action's history.
func resolutionActor(resolution *v1alpha1.ToolResolution) string {
	return "toolresolution/" + resolution.Name
}

// setApplied records on a resolution's or an approval's status whether it
// was applied to its action, and when.
func setApplied(conditions *[]metav1.Condition, appliedTime **metav1.Time, generation int64, now time.Time,
	status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(conditions, metav1.Condition{
		Type: v1alpha1.ConditionApplied, Status: status, Reason: reason, Message: printable.Truncate(message, maxConditionMessage),
		ObservedGeneration: generation, LastTransitionTime: metav1.NewTime(now),
	})
	if status == metav1.ConditionTrue {
		*appliedTime = metaTimePtr(now)
	}
}

func appliedTo(action *v1alpha1.ToolAction, by string) bool {
	for _, t := range action.Status.History {
		if t.Reason == ReasonResolved && t.Executor == by {
			return true
		}
	}
	return false
}

func (r *ToolResolutionReconciler) mark(ctx context.Context, resolution *v1alpha1.ToolResolution, status metav1.ConditionStatus, reason, message string) error {
	next := resolution.DeepCopy()
	setApplied(&next.Status.Conditions, &next.Status.AppliedTime, next.Generation, r.Clock.Now(), status, reason, message)
	if status != metav1.ConditionTrue {
		r.Recorder.Eventf(next, nil, corev1.EventTypeWarning, reason, "Resolve", message)
	}
	return ignoreConflict(r.Client.Status().Update(ctx, next), "cannot mark resolution %s", resolution.Name)
}

// SetupWithManager registers the reconciler.
func (r *ToolResolutionReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.ToolResolution{}).
		Named("toolresolution").
		Complete(r)
}
