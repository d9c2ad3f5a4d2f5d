package controllers

import (
	"testing"
	"time"
)

// A sink that does not acknowledge is left alone for 0.5s, then 1s, 2s …
// up to 30s; one acknowledgement ends it. The actions wait only while
// every sink backs off, for as long as the first one still does.
func TestSinkBackoff(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	b := newSinkBackoff([]string{"audit", "broker"})
	if b.backingOff("audit", now) || b.wait(now) != 0 {
		t.Fatal("a sink that never failed backs off")
	}
	for i, want := range []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second} {
		b.failed("audit", now)
		if !b.backingOff("audit", now.Add(want-time.Millisecond)) || b.backingOff("audit", now.Add(want)) {
			t.Errorf("failure %d: audit backs off for other than %s", i+1, want)
		}
	}
	if b.wait(now) != 0 {
		t.Error("the actions wait although broker may be tried")
	}
	b.failed("broker", now)
	if got := b.wait(now); got != 500*time.Millisecond {
		t.Errorf("wait = %s with audit backing off 4s and broker 0.5s, want 0.5s", got)
	}
	for range 40 {
		b.failed("audit", now)
	}
	if !b.backingOff("audit", now.Add(notifyRetryMax-time.Millisecond)) || b.backingOff("audit", now.Add(notifyRetryMax)) {
		t.Errorf("after 44 failures audit backs off for other than %s", notifyRetryMax)
	}
	b.succeeded("audit")
	if b.backingOff("audit", now) || b.wait(now) != 0 {
		t.Error("an acknowledgement did not end the backoff")
	}
}
