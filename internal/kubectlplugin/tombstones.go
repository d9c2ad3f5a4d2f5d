package kubectlplugin

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/ledgerclient"
)

func newTombstonesCommand(c *commandEnv) *cobra.Command {
	var (
		format        output
		allNamespaces bool
		tool          string
	)
	cmd := &cobra.Command{
		Use:     "tombstones",
		Aliases: []string{"tombstone", "tomb"},
		Short:   "List the tombstones that keep the keys of deleted records",
		Long: `List the ledgerclient.Tombstones of the namespace: the compact records of deleted
ToolActions that were dispatched. While a key's tombstone exists, a ToolAction
created again under the key is not dispatched: the same request shows the
original outcome, another fails with DuplicateConflict.

  COMPLETED  how long ago the deleted action finished
  CAUSE      Deleted (someone deleted the record) or RecordRetention (the
             tool's recordRetention passed)
  FREED      when the key may mean a new intent again: the completion plus
             the tool's keyRetention ("5m ago" when that has passed; the
             manager then deletes the tombstone); "never" when the tool has
             no keyRetention (an administrator deletes the tombstone); "-"
             when the tool is gone or cannot be read

--tool NAME lists the tombstones of the tools named NAME (Tool/NAME or
ClusterTool/NAME for one kind), through their labels. -o json|yaml prints a
list of {namespace, name, tool, outcome, errorClass, externalRef,
completionTime, cause, deletionTime, keyFreed {by, time, keyRetention,
reason}} under "items". ledgerclient.Tombstones are read in pages and listed in the API
server's order; kubectl toolledger status KEY shows one in full.`,
		Example: `  kubectl toolledger tombstones -n shop
  kubectl toolledger tombstones -A --tool charge -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			selector, err := toolSelector(tool)
			if err != nil {
				return err
			}
			namespace, ledger, err := c.connectList(allNamespaces)
			if err != nil {
				return err
			}
			tombs, err := ledger.ListTombstones(cmd.Context(), namespace, selector)
			if err != nil {
				return err
			}
			tools := ledger.ToolsOf(cmd.Context(), namespace, tombs)
			for _, kind := range []string{v1alpha1.KindTool, v1alpha1.KindClusterTool} {
				if err := tools.Unreadable[kind]; err != nil {
					fmt.Fprintf(c.streams.ErrOut, "warning: %v; when the keys of %s tombstones are freed is unknown\n", err, kind)
				}
			}
			list := ledgerclient.BuildTombstones(tombs, tools)
			of := ""
			if tool != "" {
				of = " of tool " + tool
			}
			return c.printList(format, list, len(list.Items) == 0, fmt.Sprintf("No Tombstones%s in %s.", of, ledgerclient.Scope(namespace)),
				func(w io.Writer) error { return writeTombstones(w, list, allNamespaces, c.now()) })
		},
	}
	cmd.Flags().BoolVarP(&allNamespaces, "all-namespaces", "A", false, "List the tombstones of all namespaces.")
	cmd.Flags().StringVar(&tool, "tool", "", "List only the tombstones of this tool: NAME, Tool/NAME or ClusterTool/NAME.")
	addOutputFlag(cmd, &format, "a summary of each tombstone")
	return cmd
}

// toolSelector turns --tool into the label selector of the tool's
// tombstones, "" for all.
func toolSelector(tool string) (string, error) {
	if tool == "" {
		return "", nil
	}
	set := labels.Set{}
	name := tool
	if kind, rest, qualified := strings.Cut(tool, "/"); qualified {
		if kind != v1alpha1.KindTool && kind != v1alpha1.KindClusterTool {
			return "", fmt.Errorf("--tool %q: the kind must be Tool or ClusterTool, not %q", tool, kind)
		}
		set[v1alpha1.LabelToolKind], name = kind, rest
	}
	if problems := validation.IsDNS1123Subdomain(name); len(problems) > 0 {
		return "", fmt.Errorf("--tool %q cannot name a tool: %s", tool, strings.Join(problems, "; "))
	}
	set[v1alpha1.LabelTool] = v1alpha1.ToolLabelValue(name)
	return labels.SelectorFromSet(set).String(), nil
}

func writeTombstones(w io.Writer, list ledgerclient.Tombstones, withNamespace bool, now time.Time) error {
	columns := []string{"KEY", "TOOL", "OUTCOME", "EXTERNAL-REF", "COMPLETED", "CAUSE", "FREED"}
	return writeTable(w, "tombstones", columns, withNamespace, len(list.Items), func(i int) (string, []string) {
		item := list.Items[i]
		return item.Namespace, []string{
			item.Name, item.Tool, string(item.Outcome), cell(item.ExternalRef),
			age(now, item.CompletionTime), item.Cause, freedCell(item.KeyFreed, now),
		}
	})
}

// freedCell is the FREED column.
func freedCell(freed ledgerclient.KeyFreed, now time.Time) string {
	switch freed.By {
	case ledgerclient.FreedByKeyRetention:
		return relative(now, *freed.Time)
	case ledgerclient.FreedByAdministrator:
		return "never"
	default:
		return "-"
	}
}

// describeFreed is the status line of when the key is freed.
func describeFreed(freed ledgerclient.KeyFreed, now time.Time) string {
	switch freed.By {
	case ledgerclient.FreedByKeyRetention:
		text := fmt.Sprintf("%s (%s): the completion plus the tool's keyRetention of %s",
			timestamp(*freed.Time), relative(now, *freed.Time), duration.HumanDuration(freed.KeyRetention.Duration))
		if freed.Promised {
			text = fmt.Sprintf("%s (%s): the keptUntil its answers stated, later than the completion plus the tool's keyRetention of %s",
				timestamp(*freed.Time), relative(now, *freed.Time), duration.HumanDuration(freed.KeyRetention.Duration))
		}
		if !freed.Time.After(now) {
			text += "; the key is free, and the manager deletes the tombstone"
		}
		return text
	case ledgerclient.FreedByAdministrator:
		return "kept until an administrator deletes it (the tool has no keyRetention)"
	default:
		return "unknown (" + freed.Reason + ")"
	}
}
