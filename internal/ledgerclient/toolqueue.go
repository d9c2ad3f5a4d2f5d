package ledgerclient

import (
	"context"
	"slices"
	"strings"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

// toolQueuePhases are the phases counted per tool: in flight, then waiting
// for a dispatch, an approval or a retry, then waiting for an outcome.
var toolQueuePhases = []v1alpha1.Phase{
	v1alpha1.PhaseExecuting, v1alpha1.PhaseAccepted, v1alpha1.PhaseAwaitingApproval, v1alpha1.PhaseRetryScheduled,
	v1alpha1.PhaseUnknown, v1alpha1.PhaseEscalated,
}

// ToolQueue is what `queue --by-tool -o json|yaml` prints: per namespace
// and tool, its unfinished actions by phase and the tool's limits.
type ToolQueue struct {
	Items []ToolQueueItem `json:"items"`
}

// ToolQueueItem is one tool as the actions of one namespace use it.
type ToolQueueItem struct {
	Namespace string `json:"namespace"`
	// Tool is the tool's name, prefixed with its kind when that is not Tool.
	Tool string `json:"tool"`
	// Executing counts the actions in flight, over every replica; the
	// others wait for a dispatch slot or a claim (Accepted), an approval
	// (AwaitingApproval), a retry (RetryScheduled), a lookup (Unknown) or a
	// human (Escalated).
	Executing        int `json:"executing"`
	Accepted         int `json:"accepted"`
	AwaitingApproval int `json:"awaitingApproval"`
	RetryScheduled   int `json:"retryScheduled"`
	Unknown          int `json:"unknown"`
	Escalated        int `json:"escalated"`
	// Limits are the tool's spec.limits, per replica, defaults applied;
	// nil when the namespace has no such tool (it does not exist, or is a
	// ClusterTool that does not admit the namespace).
	Limits *v1alpha1.DispatchLimits `json:"limits,omitempty"`
}

type toolUse struct {
	namespace string
	ref       v1alpha1.ToolReference
}

// ReadToolQueue lists the unfinished actions of namespace ("" for all) and
// the specs of the tools they use, each read once.
func (l *Ledger) ReadToolQueue(ctx context.Context, namespace string) (ToolQueue, error) {
	actions, err := l.ListInPhases(ctx, namespace, toolQueuePhases)
	if err != nil {
		return ToolQueue{}, err
	}
	limits := map[toolUse]*v1alpha1.DispatchLimits{}
	for i := range actions {
		use := useOf(&actions[i])
		if _, read := limits[use]; read {
			continue
		}
		spec, err := l.findToolSpec(ctx, use.namespace, use.ref)
		if err != nil {
			return ToolQueue{}, err
		}
		limits[use] = nil
		if spec != nil {
			applied := spec.Limits.WithDefaults()
			limits[use] = &applied
		}
	}
	return buildToolQueue(actions, limits), nil
}

func useOf(a *v1alpha1.ToolAction) toolUse {
	ref := v1alpha1.ToolReference{Kind: a.Spec.ToolRef.KindOrDefault(), Name: a.Spec.ToolRef.Name}
	return toolUse{namespace: a.Namespace, ref: ref}
}

// buildToolQueue counts the actions, each listed once, per namespace and
// tool, by phase.
func buildToolQueue(actions []v1alpha1.ToolAction, limits map[toolUse]*v1alpha1.DispatchLimits) ToolQueue {
	items := map[toolUse]*ToolQueueItem{}
	for i := range actions {
		a := &actions[i]
		use := useOf(a)
		item, ok := items[use]
		if !ok {
			item = &ToolQueueItem{Namespace: use.namespace, Tool: ToolName(use.ref), Limits: limits[use]}
			items[use] = item
		}
		switch a.Status.Phase {
		case v1alpha1.PhaseExecuting:
			item.Executing++
		case v1alpha1.PhaseAccepted:
			item.Accepted++
		case v1alpha1.PhaseAwaitingApproval:
			item.AwaitingApproval++
		case v1alpha1.PhaseRetryScheduled:
			item.RetryScheduled++
		case v1alpha1.PhaseUnknown:
			item.Unknown++
		case v1alpha1.PhaseEscalated:
			item.Escalated++
		}
	}
	queue := ToolQueue{Items: []ToolQueueItem{}}
	for _, item := range items {
		queue.Items = append(queue.Items, *item)
	}
	slices.SortFunc(queue.Items, func(a, b ToolQueueItem) int {
		if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
			return c
		}
		return strings.Compare(a.Tool, b.Tool)
	})
	return queue
}
