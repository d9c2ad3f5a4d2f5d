package ledgerclient

import (
	"context"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

// Approvals is what `approvals -o json|yaml` prints: the actions that await
// a decision, oldest first.
type Approvals struct {
	Items []ApprovalItem `json:"items"`
}

// ApprovalItem is one action awaiting approval, with what an approver
// decides about.
type ApprovalItem struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Tool is the tool's name, prefixed with its kind when that is not Tool.
	Tool string `json:"tool"`
	// RequestedBy is the verified requester (toolledger.dev/requested-by).
	RequestedBy string `json:"requestedBy,omitempty"`
	// Principals are the ones the caller claims (spec.provenance.principals).
	Principals []string    `json:"principals,omitempty"`
	Since      metav1.Time `json:"since"`
	AgeSeconds int64       `json:"ageSeconds"`
	// RequestDigest is the digest an approval must name.
	RequestDigest string `json:"requestDigest"`
	// Parameters are every parameter sent downstream, each marked where it
	// enters the digest (all of them do when the tool names no
	// consequentialFields).
	Parameters []Parameter `json:"parameters"`
}

// BuildApprovals summarises the actions awaiting approval, oldest first,
// each with its parameters marked by its tool, every tool read once.
func BuildApprovals(ctx context.Context, l *Ledger, actions []v1alpha1.ToolAction, now time.Time) (Approvals, error) {
	approvals := Approvals{Items: []ApprovalItem{}}
	tools := map[toolUse]*v1alpha1.ToolSpec{}
	for i := range actions {
		a := &actions[i]
		parameters, err := actionParameters(ctx, l, tools, a)
		if err != nil {
			return Approvals{}, err
		}
		item := ApprovalItem{
			Namespace: a.Namespace, Name: a.Name, Tool: ToolName(a.Spec.ToolRef),
			RequestedBy: a.Annotations[v1alpha1.RequestedByAnnotation],
			Since:       a.CreationTimestamp, AgeSeconds: int64(now.Sub(a.CreationTimestamp.Time) / time.Second),
			RequestDigest: a.Status.RequestDigest, Parameters: parameters,
		}
		if p := a.Spec.Provenance; p != nil {
			item.Principals = p.Principals
		}
		approvals.Items = append(approvals.Items, item)
	}
	slices.SortStableFunc(approvals.Items, func(a, b ApprovalItem) int {
		return oldestFirst(a.Since, b.Since, a.Namespace, b.Namespace, a.Name, b.Name)
	})
	return approvals, nil
}
