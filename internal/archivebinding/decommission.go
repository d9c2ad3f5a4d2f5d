package archivebinding

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/archive"
)

// Report counts what Decommission did.
type Report struct {
	// Written are the Tombstones written for the archive's kept keys;
	// Present the keys a Tombstone kept already; Gone the keys of
	// namespaces that no longer exist, which no tenant can use.
	Written, Present, Gone int
}

// Decommission ends the ledger's use of the archive without losing a key:
// the archive stops keeping records (a manager that retires one meanwhile
// writes its Tombstone instead), every key it guards is written back as a
// Tombstone, and only then does the binding let managers without the
// archive dispatch. Interrupted, it may be run again. c writes Tombstones,
// which only the manager's ServiceAccount may (the tombstone guard).
func Decommission(ctx context.Context, store *archive.Store, c client.Client, namespace string) (Report, error) {
	var done Report
	b, err := Read(ctx, c, namespace)
	switch {
	case err != nil:
		return done, err
	case b != nil && b.Archive != store.Identity():
		return done, fmt.Errorf("the ledger is bound to archive %s, not to this database's archive %s: nothing decommissioned", b.Archive, store.Identity())
	}
	at, err := store.Decommission(ctx)
	if err != nil {
		return done, err
	}
	err = store.GuardingKeys(ctx, func(r *archive.Record) error {
		tomb := v1alpha1.NewTombstone(r.Namespace, r.Key, r.Tombstone())
		err := c.Create(ctx, tomb)
		switch {
		case err == nil:
			done.Written++
		case apierrors.IsAlreadyExists(err):
			done.Present++
		case apierrors.IsNotFound(err), apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
			done.Gone++
		default:
			return fmt.Errorf("cannot write the Tombstone of %s/%s: %w", r.Namespace, r.Key, err)
		}
		return nil
	})
	if err != nil {
		return done, err
	}
	if b == nil {
		return done, nil
	}
	return done, release(ctx, c, namespace, store.Identity(), at)
}
