package chainstate

import (
	"testing"
	"time"

	"github.com/toolledger/toolledger/internal/archive"
)

func TestCheckpoint(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 9, 0, 0, 0, time.UTC)
	var s State
	link := func(n int64) archive.Link { return archive.Link{Sequence: n, Hash: "h"} }
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
		if got := Checkpoint(&s, step.head, step.at, 5*time.Minute); got != step.want {
			t.Errorf("%s: Checkpoint = %t, want %t", step.name, got, step.want)
		}
	}
	if latest := s.Latest(); latest == nil || latest.Sequence != 5 || len(s.Checkpoints) != 2 {
		t.Fatalf("checkpoints %+v", s.Checkpoints)
	}
	for i := range 2 * MaxCheckpoints {
		Checkpoint(&s, link(int64(10+i)), t0.Add(time.Duration(i+2)*time.Hour), 5*time.Minute)
	}
	if len(s.Checkpoints) != MaxCheckpoints || s.Checkpoints[0].Sequence != int64(10+MaxCheckpoints) {
		t.Errorf("kept %d checkpoints from %d, want the newest %d", len(s.Checkpoints), s.Checkpoints[0].Sequence, MaxCheckpoints)
	}
}
