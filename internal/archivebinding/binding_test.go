package archivebinding

import (
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
		DecommissionedAt: time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)}
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
