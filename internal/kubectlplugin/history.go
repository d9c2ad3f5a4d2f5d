package kubectlplugin

import (
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/history"
	"github.com/toolledger/toolledger/internal/ledgerclient"
)

func newHistoryCommand(c *commandEnv) *cobra.Command {
	var (
		format        output
		allNamespaces bool
		filter        history.Filter
		since         time.Duration
		from, until   string
		limit         int
	)
	cmd := &cobra.Command{
		Use:   "history",
		Short: "Search the ledger's history: the records in etcd and in the archive",
		Long: `Search the namespace's records: the ToolActions in etcd and, with an archive
(a manager with --archive-dsn), the records that left etcd for it, read through
the archive API. Both are read as you: your role needs list on toolactions and
archivedtoolactions, and you see only the namespaces RBAC lets you read.

Records are listed in order of completion, the unfinished last; --limit shows
the newest N of them. Each flag narrows the search:

  --tool NAME            the tool's name
  --outcome PHASE        the phase: Succeeded, Failed, Escalated, ...
  --requester USER       who created the action (toolledger.dev/requested-by)
  --approver USER        who approved or denied it
  --external-ref REF     the downstream's reference
  --since DURATION       finished within the last DURATION (1h, 24h)
  --from, --until TIME   finished at or after FROM, before UNTIL (RFC 3339)
  --key-prefix PREFIX    keys that start with PREFIX

  WHERE   etcd (a ToolAction) or archive (it left etcd)

-o json|yaml prints {items: [{namespace, key, uid, tool, phase, externalRef,
requestedBy, decidedBy, attempts, creationTimestamp, completionTime, source}]}.
With --limit 0, a search that matches more than 10000 records asks for
narrower flags; kubectl toolledger status KEY shows one record in full.`,
		Example: `  kubectl toolledger history -n shop --requester alice --since 24h
  kubectl toolledger history -A --tool charge --outcome Failed -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if filter.CompletedFrom, err = parseTime("--from", from); err != nil {
				return err
			}
			if filter.CompletedUntil, err = parseTime("--until", until); err != nil {
				return err
			}
			switch {
			case since < 0:
				return fmt.Errorf("--since %s: give a positive duration, such as 24h", since)
			case since > 0 && from != "":
				return fmt.Errorf("give --since or --from, not both")
			case since > 0:
				filter.CompletedFrom = c.now().Add(-since)
			}
			if limit < 0 {
				return fmt.Errorf("--limit %d: give a count, or 0 for every record", limit)
			}
			if filter.Phase != "" && !knownPhase(filter.Phase) {
				return fmt.Errorf("--outcome %q is not a phase: give one of %s", filter.Phase, phaseNames())
			}
			namespace, ledger, err := c.connectList(allNamespaces)
			if err != nil {
				return err
			}
			records, matched, archived, err := ledger.History(cmd.Context(), namespace, filter, limit)
			if err != nil {
				return err
			}
			if !archived {
				fmt.Fprintln(c.streams.ErrOut, "note: the cluster serves no archive API; only the records in etcd were searched")
			}
			if matched > len(records) {
				fmt.Fprintf(c.streams.ErrOut, "note: %d records match; showing the newest %d (--limit)\n", matched, len(records))
			}
			list := struct {
				Items []ledgerclient.HistoryRecord `json:"items"`
			}{records}
			return c.printList(format, list, len(records) == 0, "No records match in "+ledgerclient.Scope(namespace)+".",
				func(w io.Writer) error { return writeHistoryRecords(w, records, allNamespaces, c.now()) })
		},
	}
	flags := cmd.Flags()
	flags.BoolVarP(&allNamespaces, "all-namespaces", "A", false, "Search every namespace you may read.")
	flags.StringVar(&filter.Tool, "tool", "", "Only the records of this tool.")
	flags.StringVar(&filter.Phase, "outcome", "", "Only the records in this phase (Succeeded, Failed, Escalated, ...).")
	flags.StringVar(&filter.RequestedBy, "requester", "", "Only the actions this user created.")
	flags.StringVar(&filter.DecidedBy, "approver", "", "Only the actions this user approved or denied.")
	flags.StringVar(&filter.ExternalRef, "external-ref", "", "Only the record of this downstream reference.")
	flags.StringVar(&filter.KeyPrefix, "key-prefix", "", "Only the keys that start with this.")
	flags.DurationVar(&since, "since", 0, "Only the records finished within this long (1h, 24h).")
	flags.StringVar(&from, "from", "", "Only the records finished at or after this time (RFC 3339).")
	flags.StringVar(&until, "until", "", "Only the records finished before this time (RFC 3339).")
	flags.IntVar(&limit, "limit", 500, "Show the newest this many records (0 for all).")
	addOutputFlag(cmd, &format, "the records")
	return cmd
}

func parseTime(flag, value string) (time.Time, error) {
	if value == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339, value)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s %q is not an RFC 3339 time, such as 2026-12-01T00:00:00Z", flag, value)
	}
	return t, nil
}

var phases = []v1alpha1.Phase{v1alpha1.PhasePending, v1alpha1.PhaseAccepted, v1alpha1.PhaseAwaitingApproval, v1alpha1.PhaseExecuting,
	v1alpha1.PhaseRetryScheduled, v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed, v1alpha1.PhaseUnknown, v1alpha1.PhaseEscalated}

func knownPhase(p string) bool {
	for _, phase := range phases {
		if string(phase) == p {
			return true
		}
	}
	return false
}

func phaseNames() string {
	s := ""
	for i, phase := range phases {
		if i > 0 {
			s += ", "
		}
		s += string(phase)
	}
	return s
}

func writeHistoryRecords(w io.Writer, records []ledgerclient.HistoryRecord, allNamespaces bool, now time.Time) error {
	columns := []string{"KEY", "TOOL", "OUTCOME", "EXTERNAL-REF", "REQUESTED-BY", "APPROVER", "ATTEMPTS", "COMPLETED", "WHERE"}
	return writeTable(w, "records", columns, allNamespaces, len(records), func(i int) (string, []string) {
		r := records[i]
		completed := "-"
		if r.CompletionTime != nil {
			completed = age(now, *r.CompletionTime)
		}
		return r.Namespace, []string{r.Key, r.Tool, cell(r.Phase), cell(r.ExternalRef), cell(r.RequestedBy), cell(r.DecidedBy),
			strconv.Itoa(int(r.Attempts)), completed, r.Source}
	})
}
