// Package archivebinding records in the cluster which archive the ledger
// keeps its keys in, and every manager reads that record before it
// dispatches a new key. With an archive no Tombstone is written: a manager
// started without it (a rollback, an upgrade without the archive's values,
// an old replica during the rollout that turns it on), or with another
// database, would find no trace of a key the archive keeps, and dispatch it
// again. Bound to an archive, such a manager dispatches no new key and says
// why, until it runs with that archive again or the archive is
// decommissioned (its kept keys written back as Tombstones).
//
// The record is a ConfigMap of the operator's namespace, written by the
// managers that use an archive, never by Helm: a rollback or an uninstall
// of the chart leaves it in place, and a finalizer keeps it until the
// archive is decommissioned.
package archivebinding

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
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/toolledger/toolledger/internal/archivefinding"
)

// ConfigMapName is the binding's ConfigMap, in the operator's namespace.
const ConfigMapName = archivefinding.BindingConfigMap

// Finalizer keeps the binding until the archive is decommissioned.
const Finalizer = "toolledger.dev/archive-binding"

// The binding's data.
const (
	keyArchive          = "archive"
	keyState            = "state"
	keyBoundAt          = "boundAt"
	keyDecommissionedAt = "decommissionedAt"
	keyTombstonesMoved  = "tombstonesMoved"
	keyBehind           = archivefinding.BindingKey
)

// State says whether the ledger's keys are in the archive.
type State string

const (
	// InUse says the archive keeps keys that no Tombstone keeps: every
	// manager needs it to check a new key.
	InUse State = "InUse"
	// Decommissioned says the archive's kept keys were written back as
	// Tombstones: a manager without it may dispatch.
	Decommissioned State = "Decommissioned"
)

// Binding is the cluster's record of the archive the ledger keeps keys in.
type Binding struct {
	// Archive is the archive's identity (archive.Store.Identity).
	Archive string
	State   State
	// BoundAt is when the ledger started keeping keys in it.
	BoundAt time.Time
	// DecommissionedAt is when its keys went back to Tombstones.
	DecommissionedAt time.Time
	// TombstonesMovedAt is when, the binding settled, no Tombstone was left
	// in the cluster: every key written before the archive had moved into
	// it. From then on, until the archive is decommissioned, no Tombstone
	// is written, and a key check reads the archive alone.
	TombstonesMovedAt time.Time
	// Behind is what the managers found of the archive going behind the
	// cluster's marks; nil while it holds them.
	Behind *archivefinding.Finding
}

// Key is where the binding of the ledger whose operator namespace is
// namespace is kept.
func Key(namespace string) types.NamespacedName {
	return types.NamespacedName{Namespace: namespace, Name: ConfigMapName}
}

// Read reads the binding; nil when the ledger was never bound to an archive.
func Read(ctx context.Context, reader client.Reader, namespace string) (*Binding, error) {
	var cm corev1.ConfigMap
	if err := reader.Get(ctx, Key(namespace), &cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("cannot read the archive binding (ConfigMap %s): %w", Key(namespace), err)
	}
	return fromConfigMap(&cm)
}

func fromConfigMap(cm *corev1.ConfigMap) (*Binding, error) {
	b := &Binding{Archive: cm.Data[keyArchive], State: State(cm.Data[keyState])}
	if b.Archive == "" || (b.State != InUse && b.State != Decommissioned) {
		// Read as bound: an edited record must not free the keys.
		return nil, fmt.Errorf("the archive binding (ConfigMap %s/%s) does not name an archive and its state (InUse or Decommissioned): it was edited; restore it, or decommission the archive (docs/archive.md#decommissioning-an-archive)",
			cm.Namespace, cm.Name)
	}
	if raw := cm.Data[keyBehind]; raw != "" {
		b.Behind = &archivefinding.Finding{}
		if err := json.Unmarshal([]byte(raw), b.Behind); err != nil {
			return nil, fmt.Errorf("the archive binding (ConfigMap %s/%s) has an unreadable %s: %w", cm.Namespace, cm.Name, keyBehind, err)
		}
	}
	for key, into := range map[string]*time.Time{keyBoundAt: &b.BoundAt, keyDecommissionedAt: &b.DecommissionedAt, keyTombstonesMoved: &b.TombstonesMovedAt} {
		if v := cm.Data[key]; v != "" {
			t, err := time.Parse(time.RFC3339, v)
			if err != nil {
				return nil, fmt.Errorf("the archive binding (ConfigMap %s/%s) has an unreadable %s %q", cm.Namespace, cm.Name, key, v)
			}
			*into = t
		}
	}
	return b, nil
}

func (b *Binding) writeTo(cm *corev1.ConfigMap) {
	cm.Data = map[string]string{keyArchive: b.Archive, keyState: string(b.State), keyBoundAt: b.BoundAt.UTC().Format(time.RFC3339)}
	if !b.DecommissionedAt.IsZero() {
		cm.Data[keyDecommissionedAt] = b.DecommissionedAt.UTC().Format(time.RFC3339)
	}
	if !b.TombstonesMovedAt.IsZero() {
		cm.Data[keyTombstonesMoved] = b.TombstonesMovedAt.UTC().Format(time.RFC3339)
	}
	if b.Behind != nil {
		raw, _ := json.Marshal(b.Behind) // plain fields: it cannot fail
		cm.Data[keyBehind] = string(raw)
	}
	if cm.Labels == nil {
		cm.Labels = map[string]string{}
	}
	cm.Labels["app.kubernetes.io/part-of"] = "toolledger"
	if b.State == InUse {
		controllerutil.AddFinalizer(cm, Finalizer)
	} else {
		controllerutil.RemoveFinalizer(cm, Finalizer)
	}
}

// RefusedError is why a manager must not dispatch a new key: the ledger is
// bound to an archive it does not use, or its binding is gone from a
// cluster that kept keys in an archive.
type RefusedError struct {
	Binding Binding
	// Archive is the manager's archive; "" without one.
	Archive string
	// Missing names what the managers keep of an archive's chains in the
	// operator namespace, when the binding itself is gone.
	Missing string
}

func (e *RefusedError) Error() string {
	if e.Missing != "" {
		return fmt.Sprintf("the archive binding (ConfigMap %s) is gone, but this ledger keeps keys in an archive (ConfigMap %s marks one of its chains): "+
			"this manager runs without an archive (--archive-dsn) and dispatches no new key until it runs with that archive, which binds the ledger again, "+
			"or the binding is restored (docs/archive.md#the-archive-binding)", ConfigMapName, e.Missing)
	}
	using := "this manager runs without an archive (--archive-dsn)"
	if e.Archive != "" {
		using = fmt.Sprintf("this manager's --archive-dsn reaches archive %s, another database", e.Archive)
	}
	return fmt.Sprintf("this ledger keeps its keys in archive %s (since %s), but %s: it dispatches no new key until it runs with that archive, "+
		"or the archive is decommissioned (docs/archive.md#decommissioning-an-archive)",
		e.Binding.Archive, e.Binding.BoundAt.UTC().Format(time.RFC3339), using)
}

// Refusal is why a manager whose archive is archive ("" without one) must
// not dispatch a new key under b, or nil when it may.
func Refusal(b *Binding, archive string) error {
	if b == nil || b.State == Decommissioned || b.Archive == archive {
		return nil
	}
	return &RefusedError{Binding: *b, Archive: archive}
}

// Bind records that the ledger keeps its keys in archive, which is not
// decommissioned, and returns the binding as it stands. A ledger bound to
// another archive stays bound to it (Refusal says so); one whose archive
// was decommissioned is bound to this one.
func Bind(ctx context.Context, c client.Client, namespace, archive string, now time.Time) (*Binding, error) {
	var cm corev1.ConfigMap
	err := c.Get(ctx, Key(namespace), &cm)
	switch {
	case apierrors.IsNotFound(err):
		cm = corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: ConfigMapName}}
		b := &Binding{Archive: archive, State: InUse, BoundAt: now}
		b.writeTo(&cm)
		if err := c.Create(ctx, &cm); err != nil {
			return nil, fmt.Errorf("cannot record the archive binding (ConfigMap %s): %w", Key(namespace), err)
		}
		return b, nil
	case err != nil:
		return nil, fmt.Errorf("cannot read the archive binding (ConfigMap %s): %w", Key(namespace), err)
	}
	current, err := fromConfigMap(&cm)
	if err != nil || current.State == InUse {
		return current, err
	}
	b := &Binding{Archive: archive, State: InUse, BoundAt: now}
	b.writeTo(&cm)
	if err := c.Update(ctx, &cm); err != nil {
		return nil, fmt.Errorf("cannot record the archive binding (ConfigMap %s): %w", Key(namespace), err)
	}
	return b, nil
}

// RecordTombstonesMoved records, in the binding to archive, that no
// Tombstone was left at at: the caller listed none after the binding
// settled. A binding to another archive, or released, is left as it is;
// the binding of the next archive starts without the record, so that the
// Tombstones its predecessor's decommissioning wrote are read until they
// moved too.
func RecordTombstonesMoved(ctx context.Context, c client.Client, namespace, archive string, at time.Time) error {
	var cm corev1.ConfigMap
	if err := c.Get(ctx, Key(namespace), &cm); err != nil {
		return fmt.Errorf("cannot read the archive binding (ConfigMap %s): %w", Key(namespace), err)
	}
	b, err := fromConfigMap(&cm)
	if err != nil || b.State != InUse || b.Archive != archive || !b.TombstonesMovedAt.IsZero() {
		return err
	}
	b.TombstonesMovedAt = at
	b.writeTo(&cm)
	if err := c.Update(ctx, &cm); err != nil {
		return fmt.Errorf("cannot record in the archive binding (ConfigMap %s) that every Tombstone moved: %w", Key(namespace), err)
	}
	return nil
}

// release records that the archive's keys were written back as Tombstones,
// so that a manager without it may dispatch; the finalizer goes with it.
func release(ctx context.Context, c client.Client, namespace, archive string, at time.Time) error {
	var cm corev1.ConfigMap
	if err := c.Get(ctx, Key(namespace), &cm); err != nil {
		return fmt.Errorf("cannot read the archive binding (ConfigMap %s): %w", Key(namespace), err)
	}
	current, err := fromConfigMap(&cm)
	if err != nil {
		return err
	}
	if current.Archive != archive {
		return errors.New("the ledger was bound to another archive meanwhile: nothing released")
	}
	b := &Binding{Archive: archive, State: Decommissioned, BoundAt: current.BoundAt, DecommissionedAt: at}
	b.writeTo(&cm)
	if err := c.Update(ctx, &cm); err != nil {
		return fmt.Errorf("cannot record the archive's decommissioning (ConfigMap %s): %w", Key(namespace), err)
	}
	return nil
}
