package retention

import (
	"fmt"
	"math"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

func TestPacerSpreadsRetentionWork(t *testing.T) {
	p := NewPacer(2, 1) // one turn every 500ms
	steps := []struct {
		name string
		call func(time.Time) time.Duration
		at   time.Duration
		want time.Duration
	}{
		{"a: the burst", func(now time.Time) time.Duration { return p.Turn("a", now) }, 0, 0},
		{"b: next turn", func(now time.Time) time.Duration { return p.Turn("b", now) }, 0, 500 * time.Millisecond},
		{"b, early: the same turn, not another", func(now time.Time) time.Duration { return p.Turn("b", now) }, 250 * time.Millisecond, 250 * time.Millisecond},
		{"b, at its turn", func(now time.Time) time.Duration { return p.Turn("b", now) }, 500 * time.Millisecond, 0},
		{"c: reserved by a sweep", func(now time.Time) time.Duration { return p.Reserve("c", now) }, 500 * time.Millisecond, 500 * time.Millisecond},
		{"c: its own call at the turn takes no other", func(now time.Time) time.Duration { return p.Turn("c", now) }, time.Second, 0},
		{"d: after c, one turn later", func(now time.Time) time.Duration { return p.Turn("d", now) }, time.Second, 500 * time.Millisecond},
	}
	// The records asking for a turn on their own raise the pace a little
	// (one sixtieth of a turn a second each): the waits are a few tens of ms short.
	for _, s := range steps {
		if got := s.call(t0.Add(s.at)); got > s.want || got < s.want-40*time.Millisecond {
			t.Fatalf("%s: wait %s, want %s", s.name, got, s.want)
		}
	}
	if got := (*Pacer)(nil).Turn("x", t0); got != 0 {
		t.Errorf("a nil Pacer waits %s, want 0", got)
	}
}

// Records coming due on their own faster than the configured rate raise
// the pace by their own rate over the last minute, so that the steady flow
// live actions leave behind keeps up; turns the sweep reserves for its
// backlog do not.
func TestPacerKeepsUpWithRecordsComingDueOnTheirOwn(t *testing.T) {
	p := NewPacer(1, 1)
	for i := range 100 {
		p.Reserve(types.UID(fmt.Sprintf("backlog-%d", i)), t0.Add(time.Duration(i)*10*time.Millisecond))
	}
	if got := p.Rate(t0.Add(time.Second)); got != 1 {
		t.Fatalf("pace after the sweep reserved 100 turns: %.2f/s, want the configured 1/s", got)
	}

	p = NewPacer(1, 1)
	var wait time.Duration
	// Three a second for two minutes: what a steady flow of live actions
	// leaves behind, one record each, a retention later.
	for i := range 360 {
		now := t0.Add(time.Duration(i) * time.Second / 3)
		wait = p.Turn(types.UID(fmt.Sprintf("due-%d", i)), now)
	}
	end := t0.Add(120 * time.Second)
	if got := p.Rate(end); math.Abs(got-4) > 0.1 {
		t.Errorf("pace after two minutes of 3 records a second coming due: %.2f/s, want 1 + 3", got)
	}
	if wait > 5*time.Second {
		t.Errorf("the last record waits %s for its turn: the pace falls behind the records coming due", wait)
	}
	if got := p.Rate(end.Add(2 * time.Minute)); got != 1 {
		t.Errorf("pace a minute after the last came due: %.2f/s, want the configured 1/s", got)
	}
}
