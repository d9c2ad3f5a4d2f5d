package chainstate

import (
	"errors"
	"testing"
	"time"

	"github.com/toolledger/toolledger/internal/archive"
)

var t0 = time.Date(2026, 12, 4, 9, 0, 0, 0, time.UTC)

func link(n int64) archive.Link { return archive.Link{Sequence: n, Hash: "h"} }

func TestCheckpoint(t *testing.T) {
	var s State
	for _, step := range []struct {
		name string
		head archive.Link
		at   time.Time
		want bool
	}{
		{"an empty chain has nothing to keep", archive.Link{}, t0, false},
		{"the first head is kept at once", link(3), t0, true},
		{"a head that did not move is not kept again", link(3), t0.Add(time.Hour), false},
		{"a head that moved within the interval waits", link(5), t0.Add(4 * time.Minute), false},
		{"a head that moved is kept once the interval passed", link(5), t0.Add(5 * time.Minute), true},
	} {
		if got, err := Checkpoint(&s, step.head, step.at, 5*time.Minute, 0); got != step.want || err != nil {
			t.Errorf("%s: Checkpoint = %t, %v; want %t", step.name, got, err, step.want)
		}
	}
	if latest := s.Latest(); latest == nil || latest.Sequence != 5 || len(s.Checkpoints) != 2 {
		t.Fatalf("checkpoints %+v", s.Checkpoints)
	}
}

// A checkpoint only moves forward: a head behind the newest checkpoint, or
// at its sequence with another hash, is the archive gone back (a restore,
// a failover to a standby that lagged), never a new checkpoint.
func TestACheckpointOnlyMovesForward(t *testing.T) {
	var s State
	if _, err := Checkpoint(&s, link(20), t0, time.Minute, 0); err != nil {
		t.Fatal(err)
	}
	for _, head := range []archive.Link{link(17), link(10), {Sequence: 20, Hash: "another"}} {
		taken, err := Checkpoint(&s, head, t0.Add(time.Hour), time.Minute, 0)
		if taken || !errors.Is(err, ErrCheckpointBehind) {
			t.Errorf("head %+v behind checkpoint 20: taken %t, %v; want refused, ErrCheckpointBehind", head, taken, err)
		}
	}
	if len(s.Checkpoints) != 1 || s.Latest().Sequence != 20 {
		t.Errorf("checkpoints %+v, want the one of 20", s.Checkpoints)
	}
}

// The checkpoints cover the key retention: the newest RecentCheckpoints
// whole, and of the older ones the first of each day, so that a rewrite of
// any record whose key is still kept shows against one.
func TestCheckpointsCoverTheKeyRetention(t *testing.T) {
	var s State
	const cover = 30 * 24 * time.Hour
	// Four checkpoints a day for 60 days.
	end := t0.Add(60 * 24 * time.Hour)
	seq := int64(0)
	for at := t0; at.Before(end); at = at.Add(6 * time.Hour) {
		seq++
		if _, err := Checkpoint(&s, link(seq), at, time.Minute, cover); err != nil {
			t.Fatal(err)
		}
	}
	now := end.Add(-6 * time.Hour)
	oldest := s.Checkpoints[0].Time.Time
	if oldest.Before(now.Add(-cover)) || now.Add(-cover).Add(24*time.Hour).Before(oldest) {
		t.Errorf("the oldest checkpoint is of %s; want the first day within the key retention, from %s", oldest, now.Add(-cover))
	}
	recent := s.Checkpoints[len(s.Checkpoints)-RecentCheckpoints:]
	for i := 1; i < len(recent); i++ {
		if recent[i].Sequence != recent[i-1].Sequence+1 {
			t.Fatalf("the newest %d checkpoints are not whole: %+v", RecentCheckpoints, recent)
		}
	}
	older := s.Checkpoints[:len(s.Checkpoints)-RecentCheckpoints]
	for i := 1; i < len(older); i++ {
		if sameDay(older[i].Time.Time, older[i-1].Time.Time) {
			t.Errorf("two older checkpoints of one day: %s and %s", older[i-1].Time, older[i].Time)
		}
	}
	if want := 30 - RecentCheckpoints/4 + RecentCheckpoints; len(s.Checkpoints) < want-2 || len(s.Checkpoints) > want+2 {
		t.Errorf("%d checkpoints kept, want about %d: one a day for the key retention, and the newest %d", len(s.Checkpoints), want, RecentCheckpoints)
	}
	for i := 1; i < len(s.Checkpoints); i++ {
		if s.Checkpoints[i].Sequence <= s.Checkpoints[i-1].Sequence {
			t.Fatalf("checkpoints out of order: %+v", s.Checkpoints)
		}
	}
}
