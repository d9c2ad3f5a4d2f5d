package retention

import (
	"testing"
	"time"
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
	for _, s := range steps {
		if got := s.call(t0.Add(s.at)); got != s.want {
			t.Fatalf("%s: wait %s, want %s", s.name, got, s.want)
		}
	}
	if got := (*Pacer)(nil).Turn("x", t0); got != 0 {
		t.Errorf("a nil Pacer waits %s, want 0", got)
	}
}
