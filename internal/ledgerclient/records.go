package ledgerclient

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

// The records a human creates for the controller to apply, with the checks
// every front end (the kubectl plugin, the web console) makes first. Neither
// ever edits a ToolAction.

// NewApproval is a ToolApproval of decision about action, bound to that
// object (its UID) and to the request digest it records, named
// <action>-approval-<random suffix> by the API server.
func NewApproval(action *v1alpha1.ToolAction, decision v1alpha1.ApprovalDecision, reason string) *v1alpha1.ToolApproval {
	return &v1alpha1.ToolApproval{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "ToolApproval"},
		ObjectMeta: metav1.ObjectMeta{Namespace: action.Namespace, GenerateName: action.Name + "-approval-"},
		Spec: v1alpha1.ToolApprovalSpec{
			ActionName: action.Name, ActionUID: action.UID, RequestDigest: action.Status.RequestDigest,
			Decision: decision, Reason: reason,
		},
	}
}

// Decide creates the ToolApproval that build makes of the action key, as
// read now, after checking that it awaits approval and, when reviewedDigest
// is set, still records that request: nobody approves what they did not
// see. It returns the approval created and the action it is about.
func (l *Ledger) Decide(ctx context.Context, namespace, key, reviewedDigest string,
	build func(*v1alpha1.ToolAction) *v1alpha1.ToolApproval) (*v1alpha1.ToolApproval, *v1alpha1.ToolAction, error) {
	action, err := l.GetAction(ctx, namespace, key)
	if err != nil {
		return nil, nil, fmt.Errorf("%w; nothing was created", err)
	}
	if phase := PhaseOf(action); phase != v1alpha1.PhaseAwaitingApproval {
		return nil, nil, fmt.Errorf("ToolAction %q is %s; only an action awaiting approval takes a decision; nothing was created", key, phase)
	}
	if recorded := action.Status.RequestDigest; reviewedDigest != "" && reviewedDigest != recorded {
		return nil, nil, fmt.Errorf("ToolAction %q records request %s, not the %s you reviewed: review it again; nothing was created",
			key, recorded, reviewedDigest)
	}
	created, err := l.createApproval(ctx, build(action))
	if err != nil {
		return nil, nil, err
	}
	return created, action, nil
}

// Judged is what a resolver looked at: the action's attempt, and the
// object (its UID) when the front end showed it.
type Judged struct {
	UID     types.UID
	Attempt int32
}

// NewResolution is a ToolResolution of the action key about the attempt
// judged, named <key>-resolution-<random suffix> by the API server (which
// also retries a name that is taken and shortens a prefix too long for it).
func NewResolution(namespace, key string, judged Judged, outcome v1alpha1.ResolutionOutcome, externalRef, reason string) *v1alpha1.ToolResolution {
	return &v1alpha1.ToolResolution{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "ToolResolution"},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, GenerateName: key + "-resolution-"},
		Spec: v1alpha1.ToolResolutionSpec{
			ActionName: key, ActionUID: judged.UID, Attempt: judged.Attempt, Outcome: outcome, ExternalRef: externalRef, Reason: reason,
		},
	}
}

// Resolve creates resolution after checking that its action is Unknown or
// Escalated, and still the object and at the attempt the resolver judged;
// a resolution without a UID is bound to the object read now. The
// controller refuses a resolution that does not hold, but the refused
// resolution would stay in the record (resolutions are immutable); checking
// first keeps the record free of mistakes. The action may still change
// before the resolution arrives, which the controller then reports in the
// Applied condition (StaleAttempt, ActionReplaced, NotResolvable).
func (l *Ledger) Resolve(ctx context.Context, resolution *v1alpha1.ToolResolution) (*v1alpha1.ToolResolution, error) {
	key := resolution.Spec.ActionName
	action, err := l.GetAction(ctx, resolution.Namespace, key)
	if err != nil {
		return nil, fmt.Errorf("%w; nothing was created", err)
	}
	if uid := resolution.Spec.ActionUID; uid != "" && uid != action.UID {
		return nil, fmt.Errorf("ToolAction %q was deleted and created again since you looked (UID %s, not %s): judge the new one; nothing was created",
			key, action.UID, uid)
	}
	if judged, now := resolution.Spec.Attempt, action.Status.Attempts; judged != now {
		return nil, fmt.Errorf("ToolAction %q is at attempt %d (%s), not the attempt %d you judged: a later attempt may have applied; review it again; nothing was created",
			key, now, PhaseOf(action), judged)
	}
	if phase := PhaseOf(action); phase != v1alpha1.PhaseUnknown && phase != v1alpha1.PhaseEscalated {
		return nil, fmt.Errorf("ToolAction %q is %s; only Unknown or Escalated actions take a resolution; nothing was created", key, phase)
	}
	bound := resolution.DeepCopy()
	bound.Spec.ActionUID = action.UID
	return l.createResolution(ctx, bound)
}

// KeyFreed says when the tombstone's key is freed, reading its tool.
func (l *Ledger) KeyFreed(ctx context.Context, tomb *v1alpha1.Tombstone) KeyFreed {
	return l.toolOf(ctx, tomb).KeyFreed(tomb)
}

// ListApprovals reads the ToolApprovals of the action key, the decisions
// made about it whether applied or not.
func (l *Ledger) ListApprovals(ctx context.Context, namespace, key string) ([]v1alpha1.ToolApproval, error) {
	return listRecordsOf(ctx, l, resourceApprovals, "ToolApproval", namespace, key,
		func(page *v1alpha1.ToolApprovalList) []v1alpha1.ToolApproval { return page.Items })
}

// ListResolutions reads the ToolResolutions of the action key.
func (l *Ledger) ListResolutions(ctx context.Context, namespace, key string) ([]v1alpha1.ToolResolution, error) {
	return listRecordsOf(ctx, l, resourceResolutions, "ToolResolution", namespace, key,
		func(page *v1alpha1.ToolResolutionList) []v1alpha1.ToolResolution { return page.Items })
}

// listRecordsOf reads the records of kind about the action key, through
// the field selector spec.actionName; items are a page's records.
func listRecordsOf[T, L any, PL interface {
	*L
	runtime.Object
	GetContinue() string
}](ctx context.Context, l *Ledger, resource, kind, namespace, key string, items func(PL) []T) ([]T, error) {
	records, err := listAll(ctx, l, resource, namespace, metav1.ListOptions{FieldSelector: actionNameSelector(key)}, items)
	if err != nil {
		return nil, fmt.Errorf("cannot list the %ss of %q in %s: %w", kind, key, Scope(namespace), err)
	}
	return records, nil
}

func actionNameSelector(key string) string {
	return fields.OneTermEqualSelector("spec.actionName", key).String()
}

// ListTools reads the Tools of a namespace ("" for all).
func (l *Ledger) ListTools(ctx context.Context, namespace string) ([]v1alpha1.Tool, error) {
	items, err := listAll(ctx, l, resourceTools, namespace, metav1.ListOptions{}, func(page *v1alpha1.ToolList) []v1alpha1.Tool { return page.Items })
	if err != nil {
		return nil, fmt.Errorf("cannot list Tools in %s: %w", Scope(namespace), err)
	}
	return items, nil
}

// ListClusterTools reads the ClusterTools.
func (l *Ledger) ListClusterTools(ctx context.Context) ([]v1alpha1.ClusterTool, error) {
	items, err := listAll(ctx, l, resourceClusterTools, "", metav1.ListOptions{}, func(page *v1alpha1.ClusterToolList) []v1alpha1.ClusterTool { return page.Items })
	if err != nil {
		return nil, fmt.Errorf("cannot list ClusterTools: %w", err)
	}
	return items, nil
}

// WatchActions watches the ToolActions of a namespace ("" for all) that
// match fieldSelector, from now on: it reads the collection's current
// resourceVersion first, so that the watch does not replay what exists.
func (l *Ledger) WatchActions(ctx context.Context, namespace, fieldSelector string) (watch.Interface, error) {
	var list v1alpha1.ToolActionList
	listOpts := metav1.ListOptions{FieldSelector: fieldSelector, Limit: 1}
	if err := l.collection(resourceActions, namespace, &listOpts).Do(ctx).Into(&list); err != nil {
		return nil, fmt.Errorf("cannot list ToolActions in %s: %w", Scope(namespace), err)
	}
	watchOpts := metav1.ListOptions{FieldSelector: fieldSelector, Watch: true, ResourceVersion: list.ResourceVersion, AllowWatchBookmarks: true}
	w, err := l.collection(resourceActions, namespace, &watchOpts).Watch(ctx)
	if err != nil {
		return nil, fmt.Errorf("cannot watch ToolActions in %s: %w", Scope(namespace), err)
	}
	return w, nil
}
