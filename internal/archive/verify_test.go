package archive_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/toolledger/toolledger/internal/archive"
)

// A superuser of the database can rewrite a chain whole, heads included,
// so that it verifies on its own; the checkpoints the cluster took before
// show it.
func TestACheckpointShowsAChainRewrittenWhole(t *testing.T) {
	ctx := context.Background()
	dsn := database(t)
	s := open(t, dsn)
	keepInOrder(t, s, "shop", "k1", "k2", "k3", "k4", "k5")
	third, err := s.Read(ctx, namespaceOf("shop"), "k3")
	if err != nil {
		t.Fatal(err)
	}
	fourth, err := s.Read(ctx, namespaceOf("shop"), "k4")
	if err != nil {
		t.Fatal(err)
	}
	taken := time.Date(2026, 12, 4, 9, 0, 0, 0, time.UTC)
	anchors := []archive.Anchor{{Link: third.Chain, Taken: taken}}
	if v, err := s.Verify(ctx, "shop", archive.VerifyFrom{Anchors: anchors}); err != nil || v.Broken != nil || v.Anchors != 1 {
		t.Fatalf("the chain against its checkpoint: %+v, %v", v, err)
	}

	// The superuser deletes the chain and makes it again, with record 2's
	// reference changed: every link and the head are consistent.
	exec(t, dsn, `DELETE FROM toolledger_records WHERE namespace = 'shop'; DELETE FROM toolledger_chain_heads WHERE namespace = 'shop'`)
	for i, key := range []string{"k1", "k2", "k3", "k4", "k5"} {
		a := finished("u-"+key, 1, t0.Add(time.Duration(i)*time.Hour))
		a.Name = key
		if key == "k2" {
			a.Status.ExternalRef = "ch_forged"
		}
		if _, err := s.Keep(ctx, record(t, a), archive.Link{}); err != nil {
			t.Fatal(err)
		}
	}
	if v := verify(t, s, "shop"); v.Broken != nil || v.Records != 5 {
		t.Fatalf("the rewritten chain on its own: %+v, want it to hold (nothing in the database shows it)", v)
	}
	v, err := s.Verify(ctx, "shop", archive.VerifyFrom{Anchors: anchors})
	if err != nil {
		t.Fatal(err)
	}
	wantBreak(t, v, archive.Break{Sequence: 3, Problem: "its hash is not the one the cluster's checkpoint of 2026-12-04T09:00:00Z kept: the chain was rewritten up to here"})
	// An incremental verification, from where an earlier one reached
	// before the rewrite, finds that link gone; from the rewritten chain's
	// own link there, the checkpoint before it.
	v, err = s.Verify(ctx, "shop", archive.VerifyFrom{After: fourth.Chain, Anchors: anchors})
	if err != nil {
		t.Fatal(err)
	}
	wantBreak(t, v, archive.Break{Sequence: 4, Problem: "its hash is not the one the last verification reached: the chain was rewritten up to here"})
	rewritten, err := s.Read(ctx, namespaceOf("shop"), "k4")
	if err != nil {
		t.Fatal(err)
	}
	v, err = s.Verify(ctx, "shop", archive.VerifyFrom{After: rewritten.Chain, Anchors: anchors})
	if err != nil {
		t.Fatal(err)
	}
	wantBreak(t, v, archive.Break{Sequence: 3, Problem: "its hash is not the one the cluster's checkpoint of 2026-12-04T09:00:00Z kept: the chain was rewritten up to here"})
	// A checkpoint past the head: records deleted with the head.
	v, err = s.Verify(ctx, "shop", archive.VerifyFrom{Anchors: []archive.Anchor{{Link: archive.Link{Sequence: 9, Hash: "h9"}, Taken: taken}}})
	if err != nil {
		t.Fatal(err)
	}
	wantBreak(t, v, archive.Break{Sequence: 9, Problem: "the cluster's checkpoint of 2026-12-04T09:00:00Z is past the chain's head, record 5: records after it were deleted, and the head with them"})
}

// A verification bounded in time stops, incomplete, and the next goes on
// from where it stopped; each reads a page at least.
func TestAVerificationGoesOnFromWhereTheLastStopped(t *testing.T) {
	ctx := context.Background()
	s := open(t, database(t))
	keys := make([]string, 1200)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%04d", i)
	}
	keepInOrder(t, s, "shop", keys...)
	var (
		after archive.Link
		steps []string
	)
	for range 4 {
		v, err := s.Verify(ctx, "shop", archive.VerifyFrom{After: after, Budget: time.Nanosecond})
		if err != nil || v.Broken != nil {
			t.Fatalf("step after %d: %+v, %v", after.Sequence, v, err)
		}
		steps = append(steps, fmt.Sprintf("%d+%d=%d/%d %t", after.Sequence, v.Checked, v.Head.Sequence, v.Length, v.Complete))
		if v.Complete {
			break
		}
		after = v.Head
	}
	if got, want := fmt.Sprint(steps), "[0+500=500/1200 false 500+500=1000/1200 false 1000+200=1200/1200 true]"; got != want {
		t.Fatalf("steps %s, want %s", got, want)
	}
}

// An incremental verification does not read the records before where it
// starts again, but they must still be there: a deleted one shows.
func TestAnIncrementalVerificationFindsItsStartDeleted(t *testing.T) {
	ctx := context.Background()
	dsn := database(t)
	s := open(t, dsn)
	keepInOrder(t, s, "shop", "k1", "k2")
	first := verify(t, s, "shop")
	exec(t, dsn, `DELETE FROM toolledger_records WHERE namespace = 'shop' AND chain_seq = 2`)
	v, err := s.Verify(ctx, "shop", archive.VerifyFrom{After: first.Head})
	if err != nil {
		t.Fatal(err)
	}
	wantBreak(t, v, archive.Break{Sequence: 2, Problem: "record 2 is missing: deleted, not pruned"})
}
