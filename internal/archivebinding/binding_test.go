package archivebinding

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

func TestRefusal(t *testing.T) {
	bound := &Binding{Archive: "a-1", State: InUse, BoundAt: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	released := &Binding{Archive: "a-1", State: Decommissioned, BoundAt: bound.BoundAt}
	for _, tc := range []struct {
		name    string
		binding *Binding
		archive string
		want    string
	}{
		{"never bound, without an archive", nil, "", ""},
		{"never bound, with an archive", nil, "a-2", ""},
		{"bound, with that archive", bound, "a-1", ""},
		{"bound, without an archive", bound, "",
			"this ledger keeps its keys in archive a-1 (since 2026-12-01T09:00:00Z), but this manager runs without an archive (--archive-dsn): " +
				"it dispatches no new key until it runs with that archive, or the archive is decommissioned (docs/archive.md#decommissioning-an-archive)"},
		{"bound, with another database", bound, "a-2",
			"this ledger keeps its keys in archive a-1 (since 2026-12-01T09:00:00Z), but this manager's --archive-dsn reaches archive a-2, another database: " +
				"it dispatches no new key until it runs with that archive, or the archive is decommissioned (docs/archive.md#decommissioning-an-archive)"},
		{"decommissioned, without an archive", released, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Refusal(tc.binding, tc.archive)
			got := ""
			if err != nil {
				got = err.Error()
				var refused *RefusedError
				if !errors.As(err, &refused) {
					t.Errorf("Refusal is a %T, not a *RefusedError", err)
				}
			}
			if got != tc.want {
				t.Errorf("Refusal = %q, want %q", got, tc.want)
			}
		})
	}
}

// An edited binding reads as an error, never as "unbound": that would let
// managers without the archive dispatch its keys again.
func TestAnEditedBindingIsNotAbsent(t *testing.T) {
	for name, data := range map[string]map[string]string{
		"emptied":         {},
		"no archive":      {"state": "InUse"},
		"unknown state":   {"archive": "a-1", "state": "Off"},
		"unreadable time": {"archive": "a-1", "state": "InUse", "boundAt": "yesterday"},
		"unreadable move": {"archive": "a-1", "state": "InUse", "boundAt": "2026-12-01T09:00:00Z", "tombstonesMoved": "soon"},
	} {
		t.Run(name, func(t *testing.T) {
			b, err := fromConfigMap(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "toolledger-system", Name: ConfigMapName}, Data: data})
			if err == nil {
				t.Fatalf("read %+v, want an error", b)
			}
		})
	}
}

func TestABindingReadsBackAsWritten(t *testing.T) {
	want := &Binding{Archive: "a-1", State: Decommissioned, BoundAt: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC),
		DecommissionedAt: time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC), TombstonesMovedAt: time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)}
	var cm corev1.ConfigMap
	want.writeTo(&cm)
	got, err := fromConfigMap(&cm)
	if err != nil || *got != *want {
		t.Fatalf("read %+v, %v; want %+v", got, err, want)
	}
	if len(cm.Finalizers) != 0 {
		t.Errorf("a released binding keeps finalizers %v", cm.Finalizers)
	}
	(&Binding{Archive: "a-1", State: InUse}).writeTo(&cm)
	if len(cm.Finalizers) != 1 || cm.Finalizers[0] != Finalizer {
		t.Errorf("a binding in use has finalizers %v, want %s", cm.Finalizers, Finalizer)
	}
}

// That every Tombstone moved is recorded only in a binding in use by the
// archive that says so, and a binding to the next archive starts without
// it: the Tombstones the last one's decommissioning wrote must move too.
func TestTombstonesMovedIsRecordedForTheArchiveInUse(t *testing.T) {
	ctx := context.Background()
	bound := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	moved := bound.Add(time.Hour)
	for _, tc := range []struct {
		name      string
		binding   Binding
		archive   string
		wantMoved bool
	}{
		{"in use by that archive", Binding{Archive: "a-1", State: InUse, BoundAt: bound}, "a-1", true},
		{"in use by another archive", Binding{Archive: "a-1", State: InUse, BoundAt: bound}, "a-2", false},
		{"decommissioned", Binding{Archive: "a-1", State: Decommissioned, BoundAt: bound, DecommissionedAt: bound}, "a-1", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cm corev1.ConfigMap
			cm.Namespace, cm.Name = "toolledger-system", ConfigMapName
			tc.binding.writeTo(&cm)
			c := fake.NewClientBuilder().WithObjects(&cm).Build()
			if err := RecordTombstonesMoved(ctx, c, "toolledger-system", tc.archive, moved); err != nil {
				t.Fatal(err)
			}
			g := &Guard{Reader: c, Namespace: "toolledger-system", Archive: tc.archive}
			if got, err := g.TombstonesMoved(ctx); err != nil || got != tc.wantMoved {
				t.Fatalf("TombstonesMoved = %v, %v; want %v", got, err, tc.wantMoved)
			}
		})
	}
	t.Run("the next archive's binding", func(t *testing.T) {
		var cm corev1.ConfigMap
		cm.Namespace, cm.Name = "toolledger-system", ConfigMapName
		(&Binding{Archive: "a-1", State: Decommissioned, BoundAt: bound, DecommissionedAt: moved, TombstonesMovedAt: moved}).writeTo(&cm)
		c := fake.NewClientBuilder().WithObjects(&cm).Build()
		b, err := Bind(ctx, c, "toolledger-system", "a-2", moved.Add(time.Hour))
		if err != nil || b.Archive != "a-2" || !b.TombstonesMovedAt.IsZero() {
			t.Fatalf("Bind = %+v, %v; want archive a-2 with no Tombstones moved", b, err)
		}
		g := &Guard{Reader: c, Namespace: "toolledger-system", Archive: "a-2"}
		if got, err := g.TombstonesMoved(ctx); err != nil || got {
			t.Fatalf("TombstonesMoved = %v, %v; want false", got, err)
		}
	})
}
