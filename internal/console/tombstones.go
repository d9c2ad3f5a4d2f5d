package console

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

// What frees a tombstone's key (KeyFreed.By).
const (
	// freedByKeyRetention: the tool's keyRetention, at KeyFreed.Time; the
	// manager then deletes the tombstone.
	freedByKeyRetention = "KeyRetention"
	// freedByAdministrator: nothing automatic; the tool has no keyRetention,
	// so the tombstone stays until an administrator deletes it.
	freedByAdministrator = "Administrator"
	// freedUnknown: the tool was not found or could not be read.
	freedUnknown = "Unknown"
)

// KeyFreed says when a tombstone's key may mean a new intent again.
type KeyFreed struct {
	// By is KeyRetention, Administrator or Unknown.
	By string `json:"by"`
	// Time is the tombstone's completion plus KeyRetention, when By is
	// KeyRetention.
	Time         *metav1.Time     `json:"time,omitempty"`
	KeyRetention *metav1.Duration `json:"keyRetention,omitempty"`
	// Reason says why By is Unknown.
	Reason string `json:"reason,omitempty"`
}

// toolKey names a tool as a tombstone refers to it; a ClusterTool has no
// namespace.
type toolKey struct{ kind, namespace, name string }

func toolKeyOf(tomb *v1alpha1.Tombstone) toolKey {
	key := toolKey{kind: tomb.Record.ToolRef.KindOrDefault(), namespace: tomb.Namespace, name: tomb.Record.ToolRef.Name}
	if key.kind == v1alpha1.KindClusterTool {
		key.namespace = ""
	}
	return key
}

// toolCatalog is what the console read of the tools that tombstones name:
// the keyRetention of each tool found (nil for none), and why a kind of
// tool could not be read. A tool of a kind that was read and is not here
// does not exist.
type toolCatalog struct {
	retentions map[toolKey]*metav1.Duration
	unreadable map[string]error
}

func newToolCatalog() toolCatalog {
	return toolCatalog{retentions: map[toolKey]*metav1.Duration{}, unreadable: map[string]error{}}
}

// keyFreed says when the tombstone's key is freed, by the same rule as the
// manager: completion plus the keyRetention of the tool the record named.
func keyFreed(tomb *v1alpha1.Tombstone, tools toolCatalog) KeyFreed {
	key := toolKeyOf(tomb)
	if err, unread := tools.unreadable[key.kind]; unread {
		return KeyFreed{By: freedUnknown, Reason: err.Error()}
	}
	retention, found := tools.retentions[key]
	switch {
	case !found:
		return KeyFreed{By: freedUnknown, Reason: "tool not found"}
	case retention == nil:
		return KeyFreed{By: freedByAdministrator}
	default:
		at := metav1.NewTime(tomb.Record.CompletionTime.Add(retention.Duration))
		return KeyFreed{By: freedByKeyRetention, Time: &at, KeyRetention: retention}
	}
}

// toolOf reads the tool of one tombstone, for status.
func (l *Ledger) toolOf(ctx context.Context, tomb *v1alpha1.Tombstone) toolCatalog {
	tools := newToolCatalog()
	key := toolKeyOf(tomb)
	spec, err := l.namedToolSpec(ctx, tomb.Namespace, tomb.Record.ToolRef)
	switch {
	case err != nil:
		tools.unreadable[key.kind] = err
	case spec != nil:
		tools.retentions[key] = spec.KeyRetention
	}
	return tools
}

// toolsOf reads the tools that the tombstones name with one paged list per
// kind named, rather than one request per tombstone. A kind that cannot be
// read (a namespace-bound role cannot list ClusterTools) leaves those
// tombstones' keys unknown rather than failing the list.
func (l *Ledger) toolsOf(ctx context.Context, namespace string, tombs []v1alpha1.Tombstone) toolCatalog {
	tools := newToolCatalog()
	kinds := map[string]bool{}
	for i := range tombs {
		kinds[toolKeyOf(&tombs[i]).kind] = true
	}
	read := func(kind string, list func() (map[toolKey]*metav1.Duration, error)) {
		if !kinds[kind] {
			return
		}
		retentions, err := list()
		if err != nil {
			tools.unreadable[kind] = err
			return
		}
		for key, retention := range retentions {
			tools.retentions[key] = retention
		}
	}
	read(v1alpha1.KindTool, func() (map[toolKey]*metav1.Duration, error) { return l.listToolRetentions(ctx, namespace) })
	read(v1alpha1.KindClusterTool, func() (map[toolKey]*metav1.Duration, error) { return l.listClusterToolRetentions(ctx) })
	return tools
}

// Tombstones is what `tombstones -o json|yaml` prints.
type Tombstones struct {
	Items []TombstoneItem `json:"items"`
}

// TombstoneItem is one tombstone: the key of a deleted record and what it
// did.
type TombstoneItem struct {
	Namespace string `json:"namespace"`
	// Name is the key.
	Name string `json:"name"`
	// Tool is the tool's name, prefixed with its kind when that is not Tool.
	Tool           string              `json:"tool"`
	Outcome        v1alpha1.Phase      `json:"outcome"`
	ErrorClass     v1alpha1.ErrorClass `json:"errorClass,omitempty"`
	ExternalRef    string              `json:"externalRef,omitempty"`
	CompletionTime metav1.Time         `json:"completionTime"`
	Cause          string              `json:"cause"`
	DeletionTime   metav1.Time         `json:"deletionTime"`
	KeyFreed       KeyFreed            `json:"keyFreed"`
}

func newTombstonesCommand(c *console) *cobra.Command {
	var (
		format        output
		allNamespaces bool
		tool          string
	)
	cmd := &cobra.Command{
		Use:     "tombstones",
		Aliases: []string{"tombstone", "tomb"},
		Short:   "List the tombstones that keep the keys of deleted records",
		Long: `List the Tombstones of the namespace: the compact records of deleted
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
reason}} under "items". Tombstones are read in pages and listed in the API
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
			tombs, err := ledger.listTombstones(cmd.Context(), namespace, selector)
			if err != nil {
				return err
			}
			tools := ledger.toolsOf(cmd.Context(), namespace, tombs)
			for _, kind := range []string{v1alpha1.KindTool, v1alpha1.KindClusterTool} {
				if err := tools.unreadable[kind]; err != nil {
					fmt.Fprintf(c.streams.ErrOut, "warning: %v; when the keys of %s tombstones are freed is unknown\n", err, kind)
				}
			}
			list := buildTombstones(tombs, tools)
			of := ""
			if tool != "" {
				of = " of tool " + tool
			}
			return c.printList(format, list, len(list.Items) == 0, fmt.Sprintf("No Tombstones%s in %s.", of, scope(namespace)),
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

// buildTombstones summarises the tombstones, in the order listed.
func buildTombstones(tombs []v1alpha1.Tombstone, tools toolCatalog) Tombstones {
	list := Tombstones{Items: make([]TombstoneItem, 0, len(tombs))}
	for i := range tombs {
		t := &tombs[i]
		list.Items = append(list.Items, TombstoneItem{
			Namespace:      t.Namespace,
			Name:           t.Name,
			Tool:           ToolName(t.Record.ToolRef),
			Outcome:        t.Record.Phase,
			ErrorClass:     t.Record.ErrorClass,
			ExternalRef:    t.Record.ExternalRef,
			CompletionTime: t.Record.CompletionTime,
			Cause:          t.Record.Cause,
			DeletionTime:   t.Record.DeletionTime,
			KeyFreed:       keyFreed(t, tools),
		})
	}
	return list
}

func writeTombstones(w io.Writer, list Tombstones, withNamespace bool, now time.Time) error {
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
func freedCell(freed KeyFreed, now time.Time) string {
	switch freed.By {
	case freedByKeyRetention:
		return relative(now, *freed.Time)
	case freedByAdministrator:
		return "never"
	default:
		return "-"
	}
}

// describeFreed is the status line of when the key is freed.
func describeFreed(freed KeyFreed, now time.Time) string {
	switch freed.By {
	case freedByKeyRetention:
		text := fmt.Sprintf("%s (%s): the completion plus the tool's keyRetention of %s",
			timestamp(*freed.Time), relative(now, *freed.Time), duration.HumanDuration(freed.KeyRetention.Duration))
		if !freed.Time.After(now) {
			text += "; the key is free, and the manager deletes the tombstone"
		}
		return text
	case freedByAdministrator:
		return "kept until an administrator deletes it (the tool has no keyRetention)"
	default:
		return "unknown (" + freed.Reason + ")"
	}
}
