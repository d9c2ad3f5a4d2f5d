package archive_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/archive"
)

// uidsLeft lists the uids left in the archive, in order.
func uidsLeft(t *testing.T, dsn string) []string {
	t.Helper()
	return query[[]string](t, dsn, `SELECT coalesce(array_agg(uid ORDER BY uid), '{}') FROM toolledger_records`)
}

func TestPruningDeletesWhatTheCutoffsLetGoAndNothingElse(t *testing.T) {
	dsn := database(t)
	s := open(t, dsn)
	ctx := context.Background()
	keep := func(uid, namespace, kind, tool string, completed time.Time) {
		t.Helper()
		a := finished(uid, 1, completed)
		a.Namespace, a.Name = namespace, uid
		a.Spec.ToolRef = v1alpha1.ToolReference{Kind: kind, Name: tool}
		if _, err := s.Keep(ctx, record(t, a), archive.Link{}); err != nil {
			t.Fatal(err)
		}
	}
	keep("shop-charge-old", "shop", v1alpha1.KindTool, "charge", t0)
	keep("shop-charge-new", "shop", v1alpha1.KindTool, "charge", t0.Add(48*time.Hour))
	keep("other-charge-old", "other", v1alpha1.KindTool, "charge", t0)
	keep("shop-refund-old", "shop", v1alpha1.KindTool, "refund", t0)
	keep("shop-notify-old", "shop", v1alpha1.KindClusterTool, "notify", t0)
	keep("other-notify-old", "other", v1alpha1.KindClusterTool, "notify", t0)
	keep("gone-tool-old", "shop", v1alpha1.KindTool, "retired", t0.Add(-24*time.Hour))

	pruned, err := s.Prune(ctx, []archive.Cutoff{
		{Kind: v1alpha1.KindTool, Namespace: "shop", Name: "charge", Before: t0.Add(time.Hour)},
		{Kind: v1alpha1.KindClusterTool, Name: "notify", Before: t0.Add(time.Hour)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if pruned != 3 {
		t.Errorf("pruned %d records, want 3", pruned)
	}
	// A tool without a cutoff (one that no longer exists, say) keeps its records.
	want := []string{"gone-tool-old", "other-charge-old", "shop-charge-new", "shop-refund-old"}
	if got := uidsLeft(t, dsn); !slices.Equal(got, want) {
		t.Errorf("left %v, want %v", got, want)
	}
}

func TestOneReplicaPrunesAtATime(t *testing.T) {
	dsn := database(t)
	s := open(t, dsn)
	ctx := context.Background()
	if _, err := s.Keep(ctx, record(t, finished("u-1", 1, t0)), archive.Link{}); err != nil {
		t.Fatal(err)
	}
	other, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	// The lock another replica holds while it prunes ("toolprue").
	if _, err := other.Exec(ctx, `SELECT pg_advisory_lock($1)`, int64(0x746f6f6c70727565)); err != nil {
		t.Fatal(err)
	}
	everything := []archive.Cutoff{{Kind: v1alpha1.KindTool, Namespace: "shop", Name: "charge", Before: t0.Add(time.Hour)}}
	pruned, err := s.Prune(ctx, everything)
	if err != nil || pruned != 0 {
		t.Fatalf("Prune while another replica prunes: %d, %v; want 0, nil", pruned, err)
	}
	if got := uidsLeft(t, dsn); !slices.Equal(got, []string{"u-1"}) {
		t.Errorf("left %v while another replica pruned, want u-1", got)
	}
	if _, err := other.Exec(ctx, `SELECT pg_advisory_unlock($1)`, int64(0x746f6f6c70727565)); err != nil {
		t.Fatal(err)
	}
	if pruned, err = s.Prune(ctx, everything); err != nil || pruned != 1 {
		t.Fatalf("Prune once the lock is free: %d, %v; want 1, nil", pruned, err)
	}
}
