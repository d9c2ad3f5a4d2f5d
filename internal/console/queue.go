package console

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

// QueuePhases are the phases in which an action waits for something other
// than its executor's next step, in lifecycle order: accepted but not
// claimed, outcome unknown and being looked up, escalated to a human.
var QueuePhases = []v1alpha1.Phase{v1alpha1.PhaseAccepted, v1alpha1.PhaseAwaitingApproval, v1alpha1.PhaseUnknown, v1alpha1.PhaseEscalated}

// queueMessageWidth bounds the MESSAGE column of the table.
const queueMessageWidth = 160

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

func newQueueCommand(c *console) *cobra.Command {
	var (
		format        output
		allNamespaces bool
		byTool        bool
	)
	cmd := &cobra.Command{
		Use:   "queue",
		Short: "List the actions that need attention, oldest first",
		Long: `List the ToolActions that wait for something other than their executor's next
step, oldest first:

  Escalated         nobody could prove the outcome; a human resolves it (kubectl toolledger resolve)
  Unknown           the outcome may have happened; the controller is settling it by key
  AwaitingApproval  its tool requires approval; an approver decides (kubectl toolledger approvals)
  Accepted          validated but not claimed by an executor yet (for example waiting for
                    the action it compensates)

AGE counts from status.unknownSince when set, else from the action's creation.
The table shortens long messages; -o json|yaml prints them in full as a list of
{namespace, name, tool, phase, since, ageSeconds, attempts, lookups, reason,
message} under "items".

With --by-tool it counts instead, per namespace and tool, the unfinished
actions by phase (Executing over every replica; Accepted ones wait for a
dispatch slot or a claim) beside the tool's spec.limits, which bound each
replica's calls in flight and calls a second. What waits in one replica's
memory is in its metrics: toolledger_dispatch_in_flight and
toolledger_dispatch_waiting.

The actions are read with the field selector status.phase=<phase>, one list per
phase, so the server returns only the actions in the queue (this needs CRD
selectable fields, Kubernetes 1.31 or later).`,
		Example: `  kubectl toolledger queue -n shop
  kubectl toolledger queue -A -o json
  kubectl toolledger queue -A --by-tool`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			namespace, ledger, err := c.connectList(allNamespaces)
			if err != nil {
				return err
			}
			if byTool {
				queue, err := readToolQueue(cmd.Context(), ledger, namespace)
				if err != nil {
					return err
				}
				return c.printList(format, queue, len(queue.Items) == 0, fmt.Sprintf("No unfinished ToolActions in %s.", scope(namespace)),
					func(w io.Writer) error { return writeToolQueue(w, queue, allNamespaces) })
			}
			actions, err := ledger.ListInPhases(cmd.Context(), namespace, QueuePhases)
			if err != nil {
				return err
			}
			queue := BuildQueue(actions, c.now())
			return c.printList(format, queue, len(queue.Items) == 0, fmt.Sprintf("No ToolActions need attention in %s.", scope(namespace)),
				func(w io.Writer) error { return writeQueue(w, queue, allNamespaces) })
		},
	}
	cmd.Flags().BoolVarP(&allNamespaces, "all-namespaces", "A", false, "List the queue across all namespaces.")
	cmd.Flags().BoolVar(&byTool, "by-tool", false, "Count the unfinished actions per namespace and tool, by phase, beside the tool's limits.")
	addOutputFlag(cmd, &format, "a summary of each action")
	return cmd
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

func writeQueue(w io.Writer, queue Queue, withNamespace bool) error {
	columns := []string{"NAME", "PHASE", "AGE", "TOOL", "ATTEMPTS", "LOOKUPS", "REASON", "MESSAGE"}
	return writeTable(w, "queue", columns, withNamespace, len(queue.Items), func(i int) (string, []string) {
		item := queue.Items[i]
		return item.Namespace, []string{
			item.Name, string(item.Phase), duration.HumanDuration(time.Duration(item.AgeSeconds) * time.Second),
			item.Tool, fmt.Sprint(item.Attempts), fmt.Sprint(item.Lookups), cell(item.Reason), cell(shorten(item.Message, queueMessageWidth)),
		}
	})
}
