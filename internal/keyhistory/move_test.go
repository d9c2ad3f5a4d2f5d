package keyhistory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/archive"
	"github.com/toolledger/toolledger/internal/chainstate"
	"github.com/toolledger/toolledger/internal/keyhistory"
	"github.com/toolledger/toolledger/internal/testenv"
)

// A Tombstone being moved when the archive's decommissioning commits, and
// that decommissioning found when it wrote the key back, stays: without it
// a manager without the archive, once the binding is released, would find
// no trace of the key. Here decommissioning commits between the move's keep
// and its delete, the one order in which the keep succeeds.
func TestATombstoneThatDecommissioningFoundStays(t *testing.T) {
	ctx := context.Background()
	pg, err := testenv.StartPostgres(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pg.Stop() })
	store, err := archive.Open(ctx, pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)

	completed := metav1.NewTime(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	tomb := v1alpha1.NewTombstone("shop", "order-1", v1alpha1.TombstoneRecord{ActionUID: "u-1", RequestDigest: "sha256:0",
		Phase: v1alpha1.PhaseSucceeded, ExternalRef: "ch_1", Attempts: 1, CompletionTime: completed, DeletionTime: completed,
		ToolRef: v1alpha1.ToolReference{Kind: v1alpha1.KindTool, Name: "charge"}, IdempotencyClass: v1alpha1.NonRepeatable,
		Cause: v1alpha1.TombstoneCauseDeleted})
	tomb.UID = "t-1"
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	shop := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", UID: "shop-uid"}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(tomb, shop).WithInterceptorFuncs(interceptor.Funcs{
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			if _, err := store.Decommission(ctx); err != nil {
				return err
			}
			return c.Delete(ctx, obj, opts...)
		},
	}).Build()
	h := keyhistory.Archive{Store: store, Cache: c, Clock: clock.RealClock{}, Tombstones: keyhistory.Tombstones{Reader: c, Client: c, Clock: clock.RealClock{}},
		Marks: &chainstate.Marker{Reader: c, APIReader: c, Client: c, Archive: store, OperatorNamespace: "toolledger-system"}}

	if err := h.MoveTombstone(ctx, tomb); !errors.Is(err, archive.ErrDecommissioned) {
		t.Fatalf("moving the Tombstone: %v, want ErrDecommissioned", err)
	}
	var kept v1alpha1.Tombstone
	if err := c.Get(ctx, client.ObjectKeyFromObject(tomb), &kept); err != nil {
		t.Fatalf("the Tombstone is gone: %v", err)
	}
	if kept.Record.ActionUID != "u-1" || kept.Labels[v1alpha1.LabelTool] == "" {
		t.Errorf("the Tombstone written again: record %+v, labels %v", kept.Record, kept.Labels)
	}

	// Decommissioned, the archive takes no Tombstone, even one it kept:
	// the next pass of the sweep leaves it where it is.
	if err := h.MoveTombstone(ctx, &kept); !errors.Is(err, archive.ErrDecommissioned) {
		t.Fatalf("moving it again: %v, want ErrDecommissioned", err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(tomb), &kept); err != nil {
		t.Fatalf("the Tombstone is gone after the next pass: %v", err)
	}
}
