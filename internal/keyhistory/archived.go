package keyhistory

import (
	"context"
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
	"github.com/toolledger/toolledger/internal/chainstate"
	"github.com/toolledger/toolledger/internal/retention"
)

// Archive keeps a key's earlier life in the archive, and reads the
// Tombstones written before the manager had one.
type Archive struct {
	Store *archive.Store
	// Binding says whether the ledger has been bound to the store long
	// enough that a record may live there alone.
	Binding *archivebinding.Guard
	// Marks has the cluster's mark of each namespace's chain, which the
	// archive must hold, and moves it forward before a record leaves etcd.
	Marks *chainstate.Marker
	// Cache reads a namespace's uid, which binds its records, and the
	// decisions about its earlier lives: the manager's cache.
	Cache      client.Reader
	Clock      clock.PassiveClock
	Tombstones Tombstones
	// Defaults give a tool the archive's default keyRetention when it
	// sets none.
	Defaults retention.Defaults
}

// keyFreed reports whether the key of a record that finished at completed
// is free by tool's keyRetention, or the archive's default, and by its
// keptUntil, promised.
func (h Archive) keyFreed(completed time.Time, promised *metav1.Time, tool *v1alpha1.Tool) bool {
	if tool == nil {
		return false
	}
	return retention.KeyPassed(completed, promised, &v1alpha1.Tool{Spec: *h.Defaults.Of(&tool.Spec)}, h.Clock.Now())
}

// archivedKeyFreed reports whether rec's key is free by tool: a record
// moved from a Tombstone keeps the Tombstone's retention, the tool's own
// keyRetention (for good without one), whatever the archive's default.
func (h Archive) archivedKeyFreed(rec *archive.Record, tool *v1alpha1.Tool) bool {
	if rec.FromTombstone {
		return retention.KeyPassed(rec.CompletionTime, rec.KeptUntil, tool, h.Clock.Now())
	}
	return h.keyFreed(rec.CompletionTime, rec.KeptUntil, tool)
}

// Earlier reads the key's Tombstone, written before the archive, then the
// newest archived record that guards the key. In that order: the sweep
// moves a Tombstone by archiving it, then deleting it, so this reader finds
// it in one place at least. Once the binding records that every Tombstone
// moved, none is written until the archive is decommissioned, which the
// archive says with the key: the Tombstone is read only then, after the
// archive, whose decommissioning stops the moves. An archived record whose
// key retention has passed by the action's tool answers nothing: the key
// may mean a new intent. Of the namespace's earlier lives, a record answers
// only from one its owner adopted, and holds the key while nobody decided
// (an *EarlierLifeError).
func (h Archive) Earlier(ctx context.Context, action *v1alpha1.ToolAction, tool *v1alpha1.Tool) (*Earlier, error) {
	moved, err := h.Binding.TombstonesMoved(ctx)
	if err != nil {
		return nil, err
	}
	if !moved {
		if kept, err := h.Tombstones.Earlier(ctx, action, tool); kept != nil || err != nil {
			return kept, err
		}
	}
	ns, check, err := h.check(ctx, client.ObjectKeyFromObject(action))
	if err != nil {
		return nil, err
	}
	if moved && check.Decommissioned {
		if kept, err := h.Tombstones.Earlier(ctx, action, tool); kept != nil || err != nil {
			return kept, err
		}
	}
	freed := func(rec *archive.Record) bool { return sameTool(action, rec.Tool) && h.archivedKeyFreed(rec, tool) }
	rec, err := h.answering(ctx, ns, action.Name, check, freed)
	if rec == nil || err != nil {
		return nil, err
	}
	return fromArchive(rec), nil
}

// Settled reads as Earlier does, whatever the retention.
func (h Archive) Settled(ctx context.Context, key types.NamespacedName) (*Earlier, error) {
	if kept, err := h.Tombstones.Settled(ctx, key); kept != nil || err != nil {
		return kept, err
	}
	ns, check, err := h.check(ctx, key)
	if err != nil {
		return nil, err
	}
	rec, err := h.answering(ctx, ns, key.Name, check, func(*archive.Record) bool { return false })
	if rec == nil || err != nil {
		return nil, err
	}
	return fromArchive(rec), nil
}

// check reads what the archive holds of key, against the cluster's mark of
// its namespace's chain.
func (h Archive) check(ctx context.Context, key types.NamespacedName) (archive.Namespace, *archive.KeyCheck, error) {
	ns, err := archive.CurrentNamespace(ctx, h.Cache, key.Namespace)
	if err != nil {
		return ns, nil, err
	}
	mark, err := h.Marks.Mark(ctx, key.Namespace)
	if err != nil {
		return ns, nil, err
	}
	check, err := h.Store.CheckKey(ctx, ns, key.Name, mark)
	return ns, check, err
}

func fromArchive(rec *archive.Record) *Earlier {
	return &Earlier{Record: rec.Tombstone(), Result: rec.Result(), Where: fmt.Sprintf("the archived record of %s (UID %s)", rec.Key, rec.UID), Archived: true}
}

// Keep archives the action; keeping it again changes nothing. A record
// waits while the ledger's binding to the archive is new or another's, and
// while the archive does not hold the namespace's mark; once the archive is
// decommissioned, its key goes to a Tombstone. It returns once the record
// is durable where a failover lands and the cluster's mark covers it. An
// action that its key's earlier record answered is not archived: that
// record keeps all it would, and a manifest a GitOps tool applies again
// after each retirement would otherwise add a row every time.
func (h Archive) Keep(ctx context.Context, action *v1alpha1.ToolAction, tool *v1alpha1.Tool, cause, deletedBy string, deleted metav1.Time) error {
	if AnsweredByEarlierRecord(action) {
		log.FromContext(ctx).V(1).Info("Not archived: its key's earlier record answered it", "cause", cause)
		return nil
	}
	ns, err := archive.CurrentNamespace(ctx, h.Cache, action.Namespace)
	if err != nil {
		return err
	}
	rec, err := archive.NewRecord(action, ns.UID, tool, cause, deletedBy, deleted.Time)
	if err != nil {
		return err
	}
	err = h.Binding.MayKeep(ctx, time.Now())
	if err == nil {
		// A record kept after its key retention passed is history only:
		// its key is free, whatever tool asks for it next.
		rec.GuardsKey = rec.GuardsKey && !h.keyFreed(rec.CompletionTime, rec.KeptUntil, tool)
		err = h.keep(ctx, rec)
	}
	switch {
	case errors.Is(err, archivebinding.ErrReleased), errors.Is(err, archive.ErrDecommissioned):
		if !NeedsTombstone(action) {
			return nil
		}
		return h.Tombstones.Keep(ctx, action, tool, cause, deletedBy, deleted)
	case err != nil:
		return fmt.Errorf("cannot archive %s: %w", action.Name, err)
	}
	log.FromContext(ctx).V(1).Info("Record archived", "cause", cause)
	return nil
}

// keep keeps rec against the namespace's mark, and moves the mark over it.
func (h Archive) keep(ctx context.Context, rec archive.Record) error {
	mark, err := h.Marks.Mark(ctx, rec.Namespace)
	if err != nil {
		return err
	}
	link, err := h.Store.Keep(ctx, rec, mark)
	if err != nil {
		return err
	}
	return h.Marks.Cover(ctx, rec.Namespace, link)
}

// MoveTombstone moves a Tombstone written before the manager had an archive
// into it: archived, then deleted, so that the key is kept at every moment.
// It answers archive.ErrDecommissioned, the Tombstone kept, when the
// archive was decommissioned meanwhile.
func (h Archive) MoveTombstone(ctx context.Context, tomb *v1alpha1.Tombstone) error {
	ns, err := archive.CurrentNamespace(ctx, h.Cache, tomb.Namespace)
	if err != nil {
		return err
	}
	rec, err := archive.RecordFromTombstone(tomb, ns.UID)
	if err != nil {
		return err
	}
	if err := h.keep(ctx, rec); err != nil {
		return err
	}
	c := h.Tombstones.Client
	err = c.Delete(ctx, tomb, client.Preconditions{UID: &tomb.UID})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("cannot delete the archived Tombstone %s/%s: %w", tomb.Namespace, tomb.Name, err)
	}
	// Decommissioning may have committed between the keep and the delete,
	// and found this Tombstone when it wrote the key back: it must stay.
	// Unless the archive answers that it was not, it is written again.
	if decommissioned, err := h.Store.Decommissioned(ctx); err != nil || decommissioned {
		if err := c.Create(ctx, v1alpha1.NewTombstone(tomb.Namespace, tomb.Name, tomb.Record)); err != nil && !apierrors.IsAlreadyExists(err) && !apierrors.IsNotFound(err) &&
			!apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
			return fmt.Errorf("cannot write again the Tombstone %s/%s, which the archive's decommissioning keeps: %w", tomb.Namespace, tomb.Name, err)
		}
		return archive.ErrDecommissioned
	}
	log.FromContext(ctx).V(1).Info("Moved a Tombstone into the archive", "tombstone", client.ObjectKeyFromObject(tomb))
	return nil
}
