package ledgerclient

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

// What frees a tombstone's key (KeyFreed.By).
const (
	// FreedByKeyRetention: the tool's keyRetention, at KeyFreed.Time; the
	// manager then deletes the tombstone.
	FreedByKeyRetention = "KeyRetention"
	// FreedByAdministrator: nothing automatic; the tool has no keyRetention,
	// so the tombstone stays until an administrator deletes it.
	FreedByAdministrator = "Administrator"
	// FreedUnknown: the tool was not found or could not be read.
	FreedUnknown = "Unknown"
)

// KeyFreed says when a tombstone's key may mean a new intent again.
type KeyFreed struct {
	// By is KeyRetention, Administrator or Unknown.
	By string `json:"by"`
	// Time is the tombstone's completion plus KeyRetention, when By is
	// KeyRetention, or its keptUntil when that is later (Promised).
	Time         *metav1.Time     `json:"time,omitempty"`
	KeyRetention *metav1.Duration `json:"keyRetention,omitempty"`
	// Promised says Time is the keptUntil the action's answers stated,
	// later than the tool's keyRetention now gives.
	Promised bool `json:"promised,omitempty"`
	// Reason says why By is Unknown.
	Reason string `json:"reason,omitempty"`
}

// ToolKey names a tool as a tombstone refers to it; a ClusterTool has no
// namespace.
type ToolKey struct{ Kind, Namespace, Name string }

func toolKeyOf(tomb *v1alpha1.Tombstone) ToolKey {
	key := ToolKey{Kind: tomb.Record.ToolRef.KindOrDefault(), Namespace: tomb.Namespace, Name: tomb.Record.ToolRef.Name}
	if key.Kind == v1alpha1.KindClusterTool {
		key.Namespace = ""
	}
	return key
}

// ToolRetentions is what was read of the tools that tombstones name:
// the keyRetention of each tool found (nil for none), and why a kind of
// tool could not be read. A tool of a kind that was read and is not here
// does not exist.
type ToolRetentions struct {
	Retentions map[ToolKey]*metav1.Duration
	Unreadable map[string]error
}

// NewToolRetentions is an empty ToolRetentions, ready to be filled.
func NewToolRetentions() ToolRetentions {
	return ToolRetentions{Retentions: map[ToolKey]*metav1.Duration{}, Unreadable: map[string]error{}}
}

// KeyFreed says when the tombstone's key is freed, by the same rule as the
// manager: completion plus the keyRetention of the tool the record named,
// and not before the keptUntil its answers stated.
func (tools ToolRetentions) KeyFreed(tomb *v1alpha1.Tombstone) KeyFreed {
	key := toolKeyOf(tomb)
	if err, unread := tools.Unreadable[key.Kind]; unread {
		return KeyFreed{By: FreedUnknown, Reason: err.Error()}
	}
	retention, found := tools.Retentions[key]
	switch {
	case !found:
		return KeyFreed{By: FreedUnknown, Reason: "tool not found"}
	case retention == nil:
		return KeyFreed{By: FreedByAdministrator}
	default:
		at := metav1.NewTime(v1alpha1.KeyFreedAt(tomb.Record.CompletionTime.Time, tomb.Record.KeptUntil, retention.Duration))
		promised := at.After(tomb.Record.CompletionTime.Add(retention.Duration))
		return KeyFreed{By: FreedByKeyRetention, Time: &at, KeyRetention: retention, Promised: promised}
	}
}

// toolOf reads the tool of one tombstone, for status.
func (l *Ledger) toolOf(ctx context.Context, tomb *v1alpha1.Tombstone) ToolRetentions {
	tools := NewToolRetentions()
	key := toolKeyOf(tomb)
	spec, err := l.namedToolSpec(ctx, tomb.Namespace, tomb.Record.ToolRef)
	switch {
	case err != nil:
		tools.Unreadable[key.Kind] = err
	case spec != nil:
		tools.Retentions[key] = spec.KeyRetention
	}
	return tools
}

// ToolsOf reads the tools that the tombstones name with one paged list per
// kind named, rather than one request per tombstone. A kind that cannot be
// read (a namespace-bound role cannot list ClusterTools) leaves those
// tombstones' keys unknown rather than failing the list.
func (l *Ledger) ToolsOf(ctx context.Context, namespace string, tombs []v1alpha1.Tombstone) ToolRetentions {
	tools := NewToolRetentions()
	kinds := map[string]bool{}
	for i := range tombs {
		kinds[toolKeyOf(&tombs[i]).Kind] = true
	}
	read := func(kind string, list func() (map[ToolKey]*metav1.Duration, error)) {
		if !kinds[kind] {
			return
		}
		retentions, err := list()
		if err != nil {
			tools.Unreadable[kind] = err
			return
		}
		for key, retention := range retentions {
			tools.Retentions[key] = retention
		}
	}
	read(v1alpha1.KindTool, func() (map[ToolKey]*metav1.Duration, error) { return l.listToolRetentions(ctx, namespace) })
	read(v1alpha1.KindClusterTool, func() (map[ToolKey]*metav1.Duration, error) { return l.listClusterToolRetentions(ctx) })
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

// BuildTombstones summarises the tombstones, in the order listed.
func BuildTombstones(tombs []v1alpha1.Tombstone, tools ToolRetentions) Tombstones {
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
			KeyFreed:       tools.KeyFreed(t),
		})
	}
	return list
}
