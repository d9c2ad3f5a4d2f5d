package controllers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/archive"
	"github.com/toolledger/toolledger/internal/archivebinding"
	"github.com/toolledger/toolledger/internal/retention"
)

// keyHistory keeps a key's earlier life: what a record since deleted
// settled under the key. A record is kept before it leaves etcd; an
// action's first attempt reads it, and the rules answer the action from it
// (rules.beforeConnect).
type keyHistory interface {
	// earlier returns the key's earlier record, or nil when the key has
	// none the action's tool still keeps.
	earlier(ctx context.Context, action *v1alpha1.ToolAction, tool *v1alpha1.Tool) (*earlierRecord, error)
	// settled returns what the key's newest kept record settled, whatever
	// the retention: how a compensation finds an original that left etcd.
	settled(ctx context.Context, key types.NamespacedName) (*earlierRecord, error)
	// keep keeps a finished action before its record leaves etcd for
	// cause; tool is nil when it could not be read.
	keep(ctx context.Context, action *v1alpha1.ToolAction, tool *v1alpha1.Tool, cause, deletedBy string, deleted metav1.Time) error
}

// earlierRecord is what a key settled before, and where that is kept, for
// the messages, reasons and metrics of an action answered from it.
type earlierRecord struct {
	record v1alpha1.TombstoneRecord
	// result is the stored result of the downstream's answer, which an
	// archived record keeps and a Tombstone does not.
	result json.RawMessage
	// where names the record in messages: "Tombstone order-1".
	where string
	// settledReason answers the same request; conflictReason refuses
	// another; source labels the duplicate and conflict metrics.
	settledReason, conflictReason, source string
}

// tombstoneHistory keeps a key's earlier life in its Tombstone.
type tombstoneHistory struct {
	// reader reads the API server (tombstones are not cached, and a miss
	// must be a real miss); client deletes a tombstone whose key
	// retention has passed.
	reader client.Reader
	client client.Client
	clock  clock.PassiveClock
}

// keys is where this reconciler keeps a key's earlier life: the archive
// when it has one, else Tombstones.
func (r *ToolActionReconciler) keys() keyHistory {
	tombstones := tombstoneHistory{reader: r.APIReader, client: r.Client, clock: r.Clock}
	if r.Archive != nil {
		return archiveHistory{store: r.Archive, binding: r.Binding, namespaces: r.Client, clock: r.Clock, tombstones: tombstones, defaults: r.Retention}
	}
	return tombstones
}

// earlier reads the key's tombstone. A tombstone whose key retention has
// passed by the action's tool is deleted and reported absent: the key may
// mean a new intent.
func (h tombstoneHistory) earlier(ctx context.Context, action *v1alpha1.ToolAction, tool *v1alpha1.Tool) (*earlierRecord, error) {
	tomb, err := h.read(ctx, client.ObjectKeyFromObject(action))
	if tomb == nil || err != nil {
		return nil, err
	}
	if sameTool(action, tomb.Record.ToolRef) && retention.KeyPassed(tomb.Record.CompletionTime.Time, tomb.Record.KeptUntil, tool, h.clock.Now()) {
		return nil, retention.Unbury(ctx, h.client, tomb)
	}
	return fromTombstone(tomb), nil
}

func (h tombstoneHistory) settled(ctx context.Context, key types.NamespacedName) (*earlierRecord, error) {
	tomb, err := h.read(ctx, key)
	if tomb == nil || err != nil {
		return nil, err
	}
	return fromTombstone(tomb), nil
}

// read reads key's Tombstone; nil when it has none.
func (h tombstoneHistory) read(ctx context.Context, key types.NamespacedName) (*v1alpha1.Tombstone, error) {
	var tomb v1alpha1.Tombstone
	if err := h.reader.Get(ctx, key, &tomb); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("cannot read the Tombstone of key %s: %w", key.Name, err)
	}
	return &tomb, nil
}

func fromTombstone(tomb *v1alpha1.Tombstone) *earlierRecord {
	return &earlierRecord{record: tomb.Record, where: "Tombstone " + tomb.Name,
		settledReason: ReasonSettledByTombstone, conflictReason: ReasonTombstoneConflict, source: sourceTombstone}
}

// sameTool reports whether a kept record was made by the action's tool,
// whose key retention then applies to it.
func sameTool(action *v1alpha1.ToolAction, ref v1alpha1.ToolReference) bool {
	return ref.Name == action.Spec.ToolRef.Name && ref.Kind == action.Spec.ToolRef.KindOrDefault()
}

// keep writes the action's tombstone. A tombstone already there keeps the
// key: it is this action's from an earlier try, or an older one the key
// still answers to.
func (h tombstoneHistory) keep(ctx context.Context, action *v1alpha1.ToolAction, tool *v1alpha1.Tool, cause, deletedBy string, deleted metav1.Time) error {
	err := h.client.Create(ctx, newTombstone(action, tool, cause, deletedBy, deleted))
	switch {
	case err == nil || apierrors.IsAlreadyExists(err):
		log.FromContext(ctx).V(1).Info("Tombstone written", "cause", cause)
		return nil
	case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
		// The tenant is being deleted, and its tombstones with it: there is
		// no key left to guard, and holding the record would hold the
		// namespace in Terminating for good.
		log.FromContext(ctx).Info("No tombstone: the namespace is being deleted", "cause", cause)
		return nil
	}
	return fmt.Errorf("cannot write the Tombstone of %s: %w", action.Name, err)
}

// archiveHistory keeps a key's earlier life in the archive, and reads the
// Tombstones written before the manager had one.
type archiveHistory struct {
	store *archive.Store
	// binding says whether the ledger has been bound to the store long
	// enough that a record may live there alone.
	binding *archivebinding.Guard
	// namespaces reads a namespace's uid, which binds its records: the
	// manager's cache.
	namespaces client.Reader
	clock      clock.PassiveClock
	tombstones tombstoneHistory
	// defaults give a tool the archive's default keyRetention when it
	// sets none.
	defaults retention.Defaults
}

// keyFreed reports whether the key of a record that finished at completed
// is free by tool's keyRetention, or the archive's default, and by its
// keptUntil, promised.
func (h archiveHistory) keyFreed(completed time.Time, promised *metav1.Time, tool *v1alpha1.Tool) bool {
	if tool == nil {
		return false
	}
	return retention.KeyPassed(completed, promised, &v1alpha1.Tool{Spec: *h.defaults.Of(&tool.Spec)}, h.clock.Now())
}

// archivedKeyFreed reports whether rec's key is free by tool: a record
// moved from a Tombstone keeps the Tombstone's retention, the tool's own
// keyRetention (for good without one), whatever the archive's default.
func (h archiveHistory) archivedKeyFreed(rec *archive.Record, tool *v1alpha1.Tool) bool {
	if rec.FromTombstone {
		return retention.KeyPassed(rec.CompletionTime, rec.KeptUntil, tool, h.clock.Now())
	}
	return h.keyFreed(rec.CompletionTime, rec.KeptUntil, tool)
}

// earlier reads the key's Tombstone, written before the archive, then the
// newest archived record that guards the key. In that order: the sweep
// moves a Tombstone by archiving it, then deleting it, so this reader finds
// it in one place at least. Once the binding records that every Tombstone
// moved, none is written until the archive is decommissioned, which the
// archive says with the key: the Tombstone is read only then, after the
// archive, whose decommissioning stops the moves. An archived record whose
// key retention has passed by the action's tool answers nothing: the key
// may mean a new intent.
func (h archiveHistory) earlier(ctx context.Context, action *v1alpha1.ToolAction, tool *v1alpha1.Tool) (*earlierRecord, error) {
	moved, err := h.binding.TombstonesMoved(ctx)
	if err != nil {
		return nil, err
	}
	if !moved {
		if kept, err := h.tombstones.earlier(ctx, action, tool); kept != nil || err != nil {
			return kept, err
		}
	}
	ns, err := archive.CurrentNamespace(ctx, h.namespaces, action.Namespace)
	if err != nil {
		return nil, err
	}
	rec, decommissioned, err := h.store.CheckKey(ctx, ns, action.Name)
	if err != nil {
		return nil, err
	}
	if moved && decommissioned {
		if kept, err := h.tombstones.earlier(ctx, action, tool); kept != nil || err != nil {
			return kept, err
		}
	}
	if rec == nil {
		return nil, nil
	}
	if sameTool(action, rec.Tool) && h.archivedKeyFreed(rec, tool) {
		return nil, nil
	}
	return fromArchive(rec), nil
}

// settled reads as earlier does, whatever the retention.
func (h archiveHistory) settled(ctx context.Context, key types.NamespacedName) (*earlierRecord, error) {
	if kept, err := h.tombstones.settled(ctx, key); kept != nil || err != nil {
		return kept, err
	}
	ns, err := archive.CurrentNamespace(ctx, h.namespaces, key.Namespace)
	if err != nil {
		return nil, err
	}
	rec, err := h.store.Guarding(ctx, ns, key.Name)
	if rec == nil || err != nil {
		return nil, err
	}
	return fromArchive(rec), nil
}

func fromArchive(rec *archive.Record) *earlierRecord {
	return &earlierRecord{record: rec.Tombstone(), result: rec.Result(), where: fmt.Sprintf("the archived record of %s (UID %s)", rec.Key, rec.UID),
		settledReason: ReasonSettledByArchive, conflictReason: ReasonArchiveConflict, source: sourceArchive}
}

// keep archives the action; keeping it again changes nothing. A record
// waits while the ledger's binding to the archive is new or another's; once
// the archive is decommissioned, its key goes to a Tombstone. An action
// that its key's earlier record answered is not archived: that record
// keeps all it would, and a manifest a GitOps tool applies again after
// each retirement would otherwise add a row every time.
func (h archiveHistory) keep(ctx context.Context, action *v1alpha1.ToolAction, tool *v1alpha1.Tool, cause, deletedBy string, deleted metav1.Time) error {
	if answeredByEarlierRecord(action) {
		log.FromContext(ctx).V(1).Info("Not archived: its key's earlier record answered it", "cause", cause)
		return nil
	}
	ns, err := archive.CurrentNamespace(ctx, h.namespaces, action.Namespace)
	if err != nil {
		return err
	}
	rec, err := archive.NewRecord(action, ns.UID, tool, cause, deletedBy, deleted.Time)
	if err != nil {
		return err
	}
	err = h.binding.MayKeep(ctx, time.Now())
	if err == nil {
		// A record kept after its key retention passed is history only:
		// its key is free, whatever tool asks for it next.
		rec.GuardsKey = rec.GuardsKey && !h.keyFreed(rec.CompletionTime, rec.KeptUntil, tool)
		err = h.store.Keep(ctx, rec)
	}
	switch {
	case errors.Is(err, archivebinding.ErrReleased), errors.Is(err, archive.ErrDecommissioned):
		if !needsTombstone(action) {
			return nil
		}
		return h.tombstones.keep(ctx, action, tool, cause, deletedBy, deleted)
	case err != nil:
		return fmt.Errorf("cannot archive %s: %w", action.Name, err)
	}
	log.FromContext(ctx).V(1).Info("Record archived", "cause", cause)
	return nil
}

// answeredByEarlierRecord reports an action whose outcome its key's earlier
// record gave, without a dispatch: the same request settled by it, or
// another refused by it.
func answeredByEarlierRecord(a *v1alpha1.ToolAction) bool {
	if a.Status.SettledByEarlierRecord() {
		return true
	}
	e := a.Status.Error
	return a.Status.Attempts == 0 && e != nil && (e.Reason == ReasonTombstoneConflict || e.Reason == ReasonArchiveConflict)
}
