// Package keyhistory keeps a key's earlier life: what a record that left
// etcd settled under its key, where that is kept, how it moves, and when
// the key is freed. Without an archive a Tombstone keeps it; with one, a
// row of the archive, which the cluster's marks (internal/chainstate) hold
// to what left etcd, and which the namespace's lives divide: a namespace
// created again under its name answers nothing from an earlier life until
// a person decides. A record is kept before it leaves etcd; an action's
// first attempt reads the key's earlier life, and the rules answer the
// action from it.
package keyhistory

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/retention"
)

// +kubebuilder:rbac:groups=toolledger.dev,resources=tombstones,verbs=get;list;create;delete

// History keeps a key's earlier life.
type History interface {
	// Earlier returns the key's earlier record, or nil when the key has
	// none the action's tool still keeps. An error wrapping
	// archive.ErrUnavailable or archive.ErrBehind, or an
	// *EarlierLifeError, is why the key cannot be checked now.
	Earlier(ctx context.Context, action *v1alpha1.ToolAction, tool *v1alpha1.Tool) (*Earlier, error)
	// Settled returns what the key's newest kept record settled, whatever
	// the retention: how a compensation finds an original that left etcd.
	Settled(ctx context.Context, key types.NamespacedName) (*Earlier, error)
	// Keep keeps a finished action before its record leaves etcd for
	// cause; tool is nil when it could not be read. The record may leave
	// etcd once it returns nil.
	Keep(ctx context.Context, action *v1alpha1.ToolAction, tool *v1alpha1.Tool, cause, deletedBy string, deleted metav1.Time) error
}

// Earlier is what a key settled before, and where that is kept.
type Earlier struct {
	Record v1alpha1.TombstoneRecord
	// Result is the stored result of the downstream's answer, which an
	// archived record keeps and a Tombstone does not.
	Result json.RawMessage
	// Where names the record in messages: "Tombstone order-1".
	Where string
	// Archived is whether the archive keeps it, else a Tombstone.
	Archived bool
}

// NeedsTombstone reports whether a finished action may have caused an
// effect, so that its key must outlive its record: it was dispatched at
// least once. An action rejected before any dispatch caused nothing, and
// neither did one answered by a tombstone (the tombstone stays).
func NeedsTombstone(a *v1alpha1.ToolAction) bool {
	return a.Status.Phase.IsTerminal() && a.Status.Attempts > 0
}

// AnsweredByEarlierRecord reports an action whose outcome its key's earlier
// record gave, without a dispatch: the same request settled by it, or
// another refused by it.
func AnsweredByEarlierRecord(a *v1alpha1.ToolAction) bool {
	if a.Status.SettledByEarlierRecord() {
		return true
	}
	e := a.Status.Error
	return a.Status.Attempts == 0 && e != nil && (e.Reason == v1alpha1.ReasonTombstoneConflict || e.Reason == v1alpha1.ReasonArchiveConflict)
}

// Tombstones keeps a key's earlier life in its Tombstone.
type Tombstones struct {
	// Reader reads the API server (tombstones are not cached, and a miss
	// must be a real miss); Client writes them, and deletes one whose key
	// retention has passed.
	Reader client.Reader
	Client client.Client
	Clock  clock.PassiveClock
}

// Earlier reads the key's tombstone. A tombstone whose key retention has
// passed by the action's tool is deleted and reported absent: the key may
// mean a new intent.
func (h Tombstones) Earlier(ctx context.Context, action *v1alpha1.ToolAction, tool *v1alpha1.Tool) (*Earlier, error) {
	tomb, err := h.read(ctx, client.ObjectKeyFromObject(action))
	if tomb == nil || err != nil {
		return nil, err
	}
	if sameTool(action, tomb.Record.ToolRef) && retention.KeyPassed(tomb.Record.CompletionTime.Time, tomb.Record.KeptUntil, tool, h.Clock.Now()) {
		return nil, retention.Unbury(ctx, h.Client, tomb)
	}
	return fromTombstone(tomb), nil
}

// Settled reads the key's tombstone, whatever the retention.
func (h Tombstones) Settled(ctx context.Context, key types.NamespacedName) (*Earlier, error) {
	tomb, err := h.read(ctx, key)
	if tomb == nil || err != nil {
		return nil, err
	}
	return fromTombstone(tomb), nil
}

// read reads key's Tombstone; nil when it has none.
func (h Tombstones) read(ctx context.Context, key types.NamespacedName) (*v1alpha1.Tombstone, error) {
	var tomb v1alpha1.Tombstone
	if err := h.Reader.Get(ctx, key, &tomb); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("cannot read the Tombstone of key %s: %w", key.Name, err)
	}
	return &tomb, nil
}

func fromTombstone(tomb *v1alpha1.Tombstone) *Earlier {
	return &Earlier{Record: tomb.Record, Where: "Tombstone " + tomb.Name}
}

// sameTool reports whether a kept record was made by the action's tool,
// whose key retention then applies to it.
func sameTool(action *v1alpha1.ToolAction, ref v1alpha1.ToolReference) bool {
	return ref.Name == action.Spec.ToolRef.Name && ref.Kind == action.Spec.ToolRef.KindOrDefault()
}

// Keep writes the action's tombstone. A tombstone already there keeps the
// key: it is this action's from an earlier try, or an older one the key
// still answers to.
func (h Tombstones) Keep(ctx context.Context, action *v1alpha1.ToolAction, tool *v1alpha1.Tool, cause, deletedBy string, deleted metav1.Time) error {
	err := h.Client.Create(ctx, newTombstone(action, tool, cause, deletedBy, deleted))
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

// newTombstone is what remains of a finished action once its record goes.
func newTombstone(a *v1alpha1.ToolAction, tool *v1alpha1.Tool, cause, deletedBy string, deleted metav1.Time) *v1alpha1.Tombstone {
	rec := v1alpha1.TombstoneRecord{
		ActionUID:      a.UID,
		RequestDigest:  a.Status.RequestDigest,
		Phase:          a.Status.Phase,
		ExternalRef:    a.Status.ExternalRef,
		Attempts:       a.Status.Attempts,
		CompletionTime: *a.Status.CompletionTime,
		KeptUntil:      a.Status.KeptUntil,
		ToolRef:        a.Spec.ToolRef,
		Cause:          cause,
		DeletedBy:      deletedBy,
		DeletionTime:   deleted,
	}
	if tool != nil {
		rec.IdempotencyClass = tool.Spec.IdempotencyClass
	}
	if e := a.Status.Error; e != nil {
		rec.ErrorClass, rec.ErrorReason = e.Class, e.Reason
	}
	return v1alpha1.NewTombstone(a.Namespace, a.Name, rec)
}
