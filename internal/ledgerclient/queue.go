package ledgerclient

import (
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

// QueuePhases are the phases in which an action waits for something other
// than its executor's next step, in lifecycle order: accepted but not
// claimed, outcome unknown and being looked up, escalated to a human.
var QueuePhases = []v1alpha1.Phase{v1alpha1.PhaseAccepted, v1alpha1.PhaseAwaitingApproval, v1alpha1.PhaseUnknown, v1alpha1.PhaseEscalated}

// Queue is what `queue -o json|yaml` prints: the actions that need
// attention, oldest first.
type Queue struct {
	Items []QueueItem `json:"items"`
}

// QueueItem is one action of the queue.
type QueueItem struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Tool is the tool's name, prefixed with its kind when that is not Tool.
	Tool  string         `json:"tool"`
	Phase v1alpha1.Phase `json:"phase"`
	// Since is when the action started waiting: status.unknownSince when
	// set, else its creation.
	Since metav1.Time `json:"since"`
	// AgeSeconds is how long it has waited, when the queue was read.
	AgeSeconds int64 `json:"ageSeconds"`
	Attempts   int32 `json:"attempts"`
	Lookups    int32 `json:"lookups"`
	// Reason and Message say why it waits: status.error when set, else the
	// Reconciling condition (an accepted action's reason not to run yet).
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// BuildQueue summarises the actions, each listed once, oldest first.
func BuildQueue(actions []v1alpha1.ToolAction, now time.Time) Queue {
	queue := Queue{Items: []QueueItem{}}
	for i := range actions {
		a := &actions[i]
		since := a.CreationTimestamp
		if a.Status.UnknownSince != nil {
			since = *a.Status.UnknownSince
		}
		reason, message := waitingFor(a)
		queue.Items = append(queue.Items, QueueItem{
			Namespace:  a.Namespace,
			Name:       a.Name,
			Tool:       ToolName(a.Spec.ToolRef),
			Phase:      a.Status.Phase,
			Since:      since,
			AgeSeconds: int64(now.Sub(since.Time) / time.Second),
			Attempts:   a.Status.Attempts,
			Lookups:    a.Status.Lookups,
			Reason:     reason,
			Message:    message,
		})
	}
	slices.SortStableFunc(queue.Items, func(a, b QueueItem) int {
		return oldestFirst(a.Since, b.Since, a.Namespace, b.Namespace, a.Name, b.Name)
	})
	return queue
}

// oldestFirst orders two listed actions by how long they have waited, then
// by namespace and name, so that equal ages list in a stable order.
func oldestFirst(sinceA, sinceB metav1.Time, namespaceA, namespaceB, nameA, nameB string) int {
	if c := sinceA.Compare(sinceB.Time); c != 0 {
		return c
	}
	if c := strings.Compare(namespaceA, namespaceB); c != 0 {
		return c
	}
	return strings.Compare(nameA, nameB)
}

// waitingFor says why an action is in the queue.
func waitingFor(a *v1alpha1.ToolAction) (reason, message string) {
	if a.Status.Error != nil {
		return a.Status.Error.Reason, a.Status.Error.Message
	}
	if c := meta.FindStatusCondition(a.Status.Conditions, v1alpha1.ConditionReconciling); c != nil {
		return c.Reason, c.Message
	}
	return "", ""
}
