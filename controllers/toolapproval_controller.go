package controllers

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

// Reasons of the Applied condition of a ToolApproval that was not applied;
// an applied one says Approved or Denied.
const (
	ReasonDigestMismatch      = "DigestMismatch"
	ReasonSelfApproval        = "SelfApproval"
	ReasonApprovalExpired     = "Expired"
	ReasonApproverUnverified  = "ApproverUnverified"
	ReasonRequesterUnverified = "RequesterUnverified"
	ReasonAlreadyDecided      = "AlreadyDecided"
	ReasonActionReplaced      = "ActionReplaced"
	ReasonNotAwaitingApproval = "NotAwaitingApproval"
)

// finalRefusals are not evaluated again: the approval's spec and
// annotations and the action's request, requester and UID do not change,
// and time only moves on. A tool that starts to allow self-approval does not
// revive an approval refused before: the approver creates another.
var finalRefusals = []string{
	ReasonDigestMismatch, ReasonSelfApproval, ReasonApprovalExpired, ReasonActionReplaced,
	ReasonApproverUnverified, ReasonRequesterUnverified, ReasonAlreadyDecided,
}

const (
	// unresolvedToolRecheck is how soon an approval refused because its action's tool
	// cannot be resolved is evaluated again: nothing watches the tools here.
	unresolvedToolRecheck = time.Minute
)

// approvalActionIndex indexes ToolApprovals by spec.actionName, so that an
// action that starts to await approval finds the approvals made already.
const approvalActionIndex = "spec.actionName"

// ToolApprovalReconciler applies an approver's decision to the action it
// names, once that action awaits an approval: Approved makes it
// dispatchable, Denied fails it with class Denied. A decision about another
// request digest, an expired one, or one by the action's own requester
// (unless the tool allows it) is not applied; the approval's Applied
// condition and an event on both objects say why. Who may decide is RBAC's
// to say; who did, the API server's (the identity policies stamp it).
type ToolApprovalReconciler struct {
	Decisions
	// Tools finds the action's tool.
	Tools *Tools
}

// +kubebuilder:rbac:groups=toolledger.dev,resources=toolapprovals,verbs=get;list;watch
// +kubebuilder:rbac:groups=toolledger.dev,resources=toolapprovals/status,verbs=update

// Reconcile applies an approval once. As with a resolution, the action is
// written first (a compare-and-set status update) and the approval marked
// afterwards; after a crash in between, status.approval names it.
func (r *ToolApprovalReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var approval v1alpha1.ToolApproval
	if err := r.Client.Get(ctx, req.NamespacedName, &approval); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if applied := meta.FindStatusCondition(approval.Status.Conditions, v1alpha1.ConditionApplied); applied != nil &&
		(applied.Status == metav1.ConditionTrue || slices.Contains(finalRefusals, applied.Reason)) {
		return ctrl.Result{}, nil
	}
	facts, err := r.facts(ctx, &approval)
	if err != nil {
		return ctrl.Result{}, err
	}
	action := facts.action
	switch step := decideApproval(facts); step.kind {
	case decisionWait:
		return ctrl.Result{}, nil
	case decisionRetry:
		return ctrl.Result{}, step.err
	case decisionRefuse:
		var about *v1alpha1.ToolAction
		if step.aboutAction {
			about = action
		}
		result := ctrl.Result{}
		if step.recheck {
			result.RequeueAfter = unresolvedToolRecheck
		}
		return result, r.refuse(ctx, &approval, about, step.reason, step.message)
	case decisionApplied:
		r.Ledger.follow(action)
		return ctrl.Result{}, r.markApplied(ctx, &approval, action)
	}
	rules := r.Ledger.rules()
	rules.by = approvalActor(&approval)
	recorded, err := r.Ledger.recordDecision(ctx, action, rules.decided(&approval, approval.Annotations[v1alpha1.DecidedByAnnotation]))
	switch {
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("cannot apply approval %s to %s: %w", approval.Name, action.Name, err)
	case recorded == nil:
		return lostRace(ctx, action.Name), nil
	}
	return ctrl.Result{}, r.markApplied(ctx, &approval, recorded)
}

// facts reads what an approval is decided from: the action it names, and
// that action's tool while it awaits a decision.
func (r *ToolApprovalReconciler) facts(ctx context.Context, approval *v1alpha1.ToolApproval) (approvalFacts, error) {
	f := approvalFacts{approval: approval, now: r.Clock.Now()}
	action, err := r.action(ctx, approval.Namespace, approval.Spec.ActionName)
	if err != nil || action == nil {
		return f, err
	}
	f.action = action
	if action.Status.Phase == v1alpha1.PhaseAwaitingApproval && action.Status.Approval == nil {
		f.tool, f.toolErr = r.Tools.find(ctx, action)
	}
	return f, nil
}

// approvalActor names an approval in the action's history.
func approvalActor(approval *v1alpha1.ToolApproval) string {
	return "toolapproval/" + approval.Name
}

func decisionVerb(d v1alpha1.ApprovalDecision) string {
	if d == v1alpha1.Denied {
		return "denied"
	}
	return "approved"
}

func (r *ToolApprovalReconciler) markApplied(ctx context.Context, approval *v1alpha1.ToolApproval, action *v1alpha1.ToolAction) error {
	return r.mark(ctx, approval, metav1.ConditionTrue, string(approval.Spec.Decision),
		fmt.Sprintf("applied to ToolAction %s: %s", action.Name, decisionVerb(approval.Spec.Decision)))
}

// refuse marks the approval not applied. The first time a reason is given,
// an event says it on the approval and, when it concerns an action that
// awaits approval, on the action too, naming both objects.
func (r *ToolApprovalReconciler) refuse(ctx context.Context, approval *v1alpha1.ToolApproval, action *v1alpha1.ToolAction, reason, message string) error {
	if c := meta.FindStatusCondition(approval.Status.Conditions, v1alpha1.ConditionApplied); c != nil && c.Reason == reason && c.Message == message {
		return nil
	}
	if action != nil {
		r.Recorder.Eventf(action, approval, corev1.EventTypeWarning, reason, "Approve", "ToolApproval %s not applied: %s", approval.Name, message)
		r.Recorder.Eventf(approval, action, corev1.EventTypeWarning, reason, "Approve", "%s", message)
	} else {
		r.Recorder.Eventf(approval, nil, corev1.EventTypeWarning, reason, "Approve", "%s", message)
	}
	return r.mark(ctx, approval, metav1.ConditionFalse, reason, message)
}

func (r *ToolApprovalReconciler) mark(ctx context.Context, approval *v1alpha1.ToolApproval, status metav1.ConditionStatus, reason, message string) error {
	next := approval.DeepCopy()
	setApplied(&next.Status.Conditions, &next.Status.AppliedTime, next.Generation, r.Clock.Now(), status, reason, message)
	return ignoreConflict(r.Client.Status().Update(ctx, next), "cannot mark approval %s", approval.Name)
}

// approvalsOf maps an action that has started to await approval, or was
// created, to the approvals that name it.
func (r *ToolApprovalReconciler) approvalsOf(ctx context.Context, obj client.Object) []reconcile.Request {
	var approvals v1alpha1.ToolApprovalList
	if err := r.Client.List(ctx, &approvals, client.InNamespace(obj.GetNamespace()), client.MatchingFields{approvalActionIndex: obj.GetName()}); err != nil {
		log.FromContext(ctx).Error(err, "Cannot list the approvals of an action", "action", obj.GetName())
		return nil
	}
	requests := make([]reconcile.Request, 0, len(approvals.Items))
	for i := range approvals.Items {
		requests = append(requests, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&approvals.Items[i])})
	}
	return requests
}

func startedAwaiting(e event.UpdateEvent) bool {
	before, ok := e.ObjectOld.(*v1alpha1.ToolAction)
	if !ok {
		return false
	}
	after, ok := e.ObjectNew.(*v1alpha1.ToolAction)
	return ok && after.Status.Phase == v1alpha1.PhaseAwaitingApproval && before.Status.Phase != v1alpha1.PhaseAwaitingApproval
}

// SetupWithManager registers the reconciler and the index it lists by.
func (r *ToolApprovalReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(ctx, &v1alpha1.ToolApproval{}, approvalActionIndex, func(obj client.Object) []string {
		return []string{obj.(*v1alpha1.ToolApproval).Spec.ActionName}
	}); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		// Its own status writes come back too: a mark that lost to a newer
		// version (read from a cache behind) is made again from it.
		For(&v1alpha1.ToolApproval{}).
		Watches(&v1alpha1.ToolAction{}, handler.EnqueueRequestsFromMapFunc(r.approvalsOf), builder.WithPredicates(predicate.Funcs{
			CreateFunc:  func(event.CreateEvent) bool { return true },
			UpdateFunc:  startedAwaiting,
			DeleteFunc:  func(event.DeleteEvent) bool { return false },
			GenericFunc: func(event.GenericEvent) bool { return false },
		})).
		Named("toolapproval").
		Complete(r)
}
