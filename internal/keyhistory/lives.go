package keyhistory

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/archive"
)

// +kubebuilder:rbac:groups=toolledger.dev,resources=earlierlifedecisions,verbs=get;list;watch
// +kubebuilder:rbac:groups=toolledger.dev,resources=earlierlifedecisions/status,verbs=update

// A namespace deleted and created again under its name has a new uid: a
// life of its own. What an earlier life left in the archive is that life's
// until a person decides: its owner adopts it (a namespace restored from a
// backup, re-created by GitOps), and its records answer the namespace's
// keys; an administrator releases it (a new tenant given the name), and its
// keys are free for the namespace. Until then the keys it guards are held:
// neither dispatched, which could repeat a restored tenant's effects, nor
// answered, which would show one tenant another's outcomes.

// EarlierLifeError holds a key that an earlier life of its namespace's name
// guards, until a person decides (an EarlierLifeDecision).
type EarlierLifeError struct {
	Namespace, Key string
	// Life is the uid of the earlier life; "" for the records archived
	// before the archive kept namespaces' uids.
	Life types.UID
	// Completed is when that life's record of the key finished.
	Completed time.Time
}

func (e *EarlierLifeError) Error() string {
	life := fmt.Sprintf("uid %s", e.Life)
	if e.Life == "" {
		life = "archived before the archive kept namespaces' uids"
	}
	return fmt.Sprintf("key %s is guarded by an earlier life of namespace %s (%s), whose record of it finished at %s: "+
		"it waits until the namespace's owner adopts that life's history (kubectl toolledger lives adopt -n %s) "+
		"or an administrator releases it (kubectl toolledger lives release -n %s --earlier-life %q)",
		e.Key, e.Namespace, life, e.Completed.UTC().Format(time.RFC3339), e.Namespace, e.Namespace, e.Life)
}

// answering picks the archived record that answers key in the namespace
// ns: the newest, of the current life's and those of the earlier lives it
// adopted, whose key freed does not let go. A released life's record
// answers nothing; an undecided one's holds the key when nothing answers.
func (h Archive) answering(ctx context.Context, ns archive.Namespace, key string, check *archive.KeyCheck, freed func(*archive.Record) bool) (*archive.Record, error) {
	var answer *archive.Record
	if check.Current != nil && !freed(check.Current) {
		answer = check.Current
	}
	if len(check.Earlier) == 0 {
		return answer, nil
	}
	decisions, err := h.decisions(ctx, ns.Name)
	if err != nil {
		return nil, err
	}
	var held *archive.Record
	for _, rec := range check.Earlier {
		if freed(rec) {
			continue
		}
		switch archive.FateOf(ns, rec.NamespaceUID, decisions) {
		case archive.LifeUnclaimed:
			if held == nil {
				held = rec
			}
		case archive.LifeKept:
			if answer == nil || rec.CompletionTime.After(answer.CompletionTime) {
				answer = rec
			}
		}
	}
	if answer == nil && held != nil {
		return nil, &EarlierLifeError{Namespace: ns.Name, Key: key, Life: held.NamespaceUID, Completed: held.CompletionTime}
	}
	return answer, nil
}

// decisions lists the decisions made in namespace about its earlier lives.
func (h Archive) decisions(ctx context.Context, namespace string) ([]v1alpha1.EarlierLifeDecision, error) {
	var list v1alpha1.EarlierLifeDecisionList
	if err := h.Cache.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("cannot list the decisions about namespace %s's earlier lives: %w", namespace, err)
	}
	return list.Items, nil
}

// Decisions says, on each EarlierLifeDecision, whether it applies, and
// hands the actions its namespace holds for an earlier life to the
// controller again.
type Decisions struct {
	Client client.Client
	// Recheck hands the actions of namespace waiting for their key check
	// to the controller again.
	Recheck func(ctx context.Context, namespace string)
}

// SetupWithManager registers the controller.
func (d *Decisions) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named("earlierlifedecision").For(&v1alpha1.EarlierLifeDecision{}).Complete(d)
}

// Reconcile sets the decision's Applied condition.
func (d *Decisions) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var decision v1alpha1.EarlierLifeDecision
	if err := d.Client.Get(ctx, req.NamespacedName, &decision); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	ns, err := archive.CurrentNamespace(ctx, d.Client, req.Namespace)
	if err != nil {
		return ctrl.Result{}, err
	}
	var list v1alpha1.EarlierLifeDecisionList
	if err := d.Client.List(ctx, &list, client.InNamespace(req.Namespace)); err != nil {
		return ctrl.Result{}, err
	}
	condition := metav1.Condition{Type: v1alpha1.ConditionApplied, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonDecided, ObservedGeneration: decision.Generation}
	switch applies := v1alpha1.DecisionFor(list.Items, ns.UID, decision.Spec.EarlierLife); {
	case decision.Spec.Life != ns.UID:
		condition.Status, condition.Reason = metav1.ConditionFalse, v1alpha1.ReasonOtherLife
		condition.Message = fmt.Sprintf("made in the life of namespace %s whose uid was %s; the namespace is another life now (uid %s): decide again", ns.Name, decision.Spec.Life, ns.UID)
	case applies != nil && applies.Name != decision.Name:
		condition.Status, condition.Reason = metav1.ConditionFalse, v1alpha1.ReasonDecidedBefore
		condition.Message = fmt.Sprintf("EarlierLifeDecision %s decided about earlier life %q before (%s)", applies.Name, decision.Spec.EarlierLife, applies.Spec.Decision)
	case decision.Spec.Decision == v1alpha1.LifeAdopt:
		condition.Message = fmt.Sprintf("the history of earlier life %q is this namespace's: its archived records answer the namespace's keys", decision.Spec.EarlierLife)
	default:
		condition.Message = fmt.Sprintf("the keys of earlier life %q are free for this namespace, which never sees that life's outcomes", decision.Spec.EarlierLife)
	}
	if current := meta.FindStatusCondition(decision.Status.Conditions, v1alpha1.ConditionApplied); current == nil ||
		current.Status != condition.Status || current.Reason != condition.Reason || current.Message != condition.Message {
		meta.SetStatusCondition(&decision.Status.Conditions, condition)
		if err := d.Client.Status().Update(ctx, &decision); err != nil {
			if apierrors.IsConflict(err) {
				return ctrl.Result{RequeueAfter: conflictRetry}, nil
			}
			return ctrl.Result{}, fmt.Errorf("cannot record whether EarlierLifeDecision %s applies: %w", decision.Name, err)
		}
		log.FromContext(ctx).Info("A decision about an earlier life of the namespace", "earlierLife", decision.Spec.EarlierLife,
			"decision", decision.Spec.Decision, "applied", condition.Status, "reason", condition.Reason, "decidedBy", decision.Annotations[AnnotationDecidedBy])
	}
	if condition.Status == metav1.ConditionTrue {
		d.Recheck(ctx, req.Namespace)
	}
	return ctrl.Result{}, nil
}

// conflictRetry is how soon a status written over another replica's is
// tried again.
const conflictRetry = 100 * time.Millisecond

// AnnotationDecidedBy is where the API server stamps who created an
// EarlierLifeDecision, as it does for a ToolApproval.
const AnnotationDecidedBy = "toolledger.dev/decided-by"
