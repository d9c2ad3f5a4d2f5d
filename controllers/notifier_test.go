package controllers

import (
	"testing"
	"time"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

// A sink that does not acknowledge is left alone for 0.5s, then 1s, 2s …
// up to 30s; after each backoff one send probes it while the others wait;
// one acknowledgement ends it. The actions wait only while every sink
// backs off, for as long as the first one still does.
func TestSinkBackoff(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	b := newSinkBackoff([]string{"audit", "broker"})
	if first, second := b.take("audit", now), b.take("audit", now); !first || !second || b.wait(now) != 0 {
		t.Fatal("a sink that never failed is held back")
	}
	for i, want := range []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second} {
		b.failed("audit", now)
		if b.take("audit", now.Add(want-time.Millisecond)) {
			t.Errorf("failure %d: audit taken before its %s backoff ended", i+1, want)
		}
		if !b.take("audit", now.Add(want)) {
			t.Errorf("failure %d: audit not taken once its %s backoff ended", i+1, want)
		}
		if b.take("audit", now.Add(want)) {
			t.Errorf("failure %d: a second send while the probe is out", i+1)
		}
	}
	if b.wait(now) != 0 {
		t.Error("the actions wait although broker may be tried")
	}
	b.failed("broker", now)
	if got := b.wait(now); got != notifyRetryMin {
		t.Errorf("wait = %s with audit's probe out and broker backing off 0.5s, want %s", got, notifyRetryMin)
	}
	for range 40 {
		b.failed("audit", now)
	}
	if b.take("audit", now.Add(notifyRetryMax-time.Millisecond)) || !b.take("audit", now.Add(notifyRetryMax)) {
		t.Errorf("after 44 failures audit backs off for other than %s", notifyRetryMax)
	}
	b.succeeded("audit")
	if first, second := b.take("audit", now), b.take("audit", now); !first || !second || b.wait(now) != 0 {
		t.Error("an acknowledgement did not end the backoff")
	}
}

// The trace context an action's caller supplied is the last invocation's,
// from its annotation, unless that is no W3C traceparent; then the
// provenance's.
func TestCallerTraceparent(t *testing.T) {
	const (
		invocation = "00-4bf92f3577b34da6a3ce929d0e0e4736-b7ad6b7169203331-01"
		provenance = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	)
	for annotation, want := range map[string]string{
		invocation:                    invocation,
		"":                            provenance,
		"not-a-traceparent":           provenance,
		"00-" + invocation[3:] + "-x": provenance,
	} {
		a := &v1alpha1.ToolAction{}
		a.Annotations = map[string]string{v1alpha1.TraceparentAnnotation: annotation}
		a.Spec.Provenance = &v1alpha1.Provenance{TraceID: provenance}
		if got := callerTraceparent(a); got != want {
			t.Errorf("annotation %q: %q, want %q", annotation, got, want)
		}
	}
}
