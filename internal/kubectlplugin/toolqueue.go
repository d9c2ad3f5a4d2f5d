package kubectlplugin

import (
	"fmt"
	"io"

	"github.com/toolledger/toolledger/internal/ledgerclient"
)

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
