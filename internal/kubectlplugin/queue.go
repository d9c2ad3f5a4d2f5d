package kubectlplugin

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/toolledger/toolledger/internal/ledgerclient"
)

// queueMessageWidth bounds the MESSAGE column of the table.
const queueMessageWidth = 160

func newQueueCommand(c *commandEnv) *cobra.Command {
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
				queue, err := ledger.ReadToolQueue(cmd.Context(), namespace)
				if err != nil {
					return err
				}
				return c.printList(format, queue, len(queue.Items) == 0, fmt.Sprintf("No unfinished ToolActions in %s.", ledgerclient.Scope(namespace)),
					func(w io.Writer) error { return writeToolQueue(w, queue, allNamespaces) })
			}
			actions, err := ledger.ListInPhases(cmd.Context(), namespace, ledgerclient.QueuePhases)
			if err != nil {
				return err
			}
			queue := ledgerclient.BuildQueue(actions, c.now())
			return c.printList(format, queue, len(queue.Items) == 0, fmt.Sprintf("No ToolActions need attention in %s.", ledgerclient.Scope(namespace)),
				func(w io.Writer) error { return writeQueue(w, queue, allNamespaces) })
		},
	}
	cmd.Flags().BoolVarP(&allNamespaces, "all-namespaces", "A", false, "List the queue across all namespaces.")
	cmd.Flags().BoolVar(&byTool, "by-tool", false, "Count the unfinished actions per namespace and tool, by phase, beside the tool's limits.")
	addOutputFlag(cmd, &format, "a summary of each action")
	return cmd
}

func writeQueue(w io.Writer, queue ledgerclient.Queue, withNamespace bool) error {
	columns := []string{"NAME", "PHASE", "AGE", "TOOL", "ATTEMPTS", "LOOKUPS", "REASON", "MESSAGE"}
	return writeTable(w, "queue", columns, withNamespace, len(queue.Items), func(i int) (string, []string) {
		item := queue.Items[i]
		return item.Namespace, []string{
			item.Name, string(item.Phase), duration.HumanDuration(time.Duration(item.AgeSeconds) * time.Second),
			item.Tool, fmt.Sprint(item.Attempts), fmt.Sprint(item.Lookups), cell(item.Reason), cell(shorten(item.Message, queueMessageWidth)),
		}
	})
}

func writeToolQueue(w io.Writer, queue ledgerclient.ToolQueue, withNamespace bool) error {
	columns := []string{"TOOL", "EXECUTING", "ACCEPTED", "AWAITINGAPPROVAL", "RETRYSCHEDULED", "UNKNOWN", "ESCALATED", "MAX-IN-FLIGHT", "PER-SECOND"}
	return writeTable(w, "queue", columns, withNamespace, len(queue.Items), func(i int) (string, []string) {
		item := queue.Items[i]
		inFlight, perSecond := "<no tool>", "<no tool>"
		if l := item.Limits; l != nil {
			inFlight, perSecond = fmt.Sprint(l.MaxInFlight), fmt.Sprint(l.RequestsPerSecond)
		}
		return item.Namespace, []string{item.Tool, fmt.Sprint(item.Executing), fmt.Sprint(item.Accepted), fmt.Sprint(item.AwaitingApproval), fmt.Sprint(item.RetryScheduled),
			fmt.Sprint(item.Unknown), fmt.Sprint(item.Escalated), inFlight, perSecond}
	})
}
