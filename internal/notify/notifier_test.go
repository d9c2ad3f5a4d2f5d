package notify

import (
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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

// What one pass settled leaves each event pending for the sinks that
// neither acknowledged it nor were given up for; an event delivered to its
// last sink says when; a sink given up twice keeps one dead letter, the
// latest.
func TestSettledApply(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 12, 5, 3, 0, 0, 0, time.UTC))
	status := v1alpha1.ToolActionStatus{Notifications: []v1alpha1.Notification{
		{ID: "a", Pending: []string{"audit", "broker"}},
		{ID: "b", Pending: []string{"audit", "broker"}, DeadLetters: []v1alpha1.NotificationDeadLetter{{Sink: "broker", Reason: v1alpha1.DeadLetterRefused, Message: "old"}}},
		{ID: "c", Pending: []string{"audit"}},
	}, NotificationsPending: true}
	out := newSettled()
	out.done["a"] = []string{"audit", "broker"}
	out.done["b"] = []string{"audit"}
	out.giveUp("b", "broker", v1alpha1.DeadLetterMalformed, errors.New(strings.Repeat("x", 600)), at)
	out.Apply(&status, at)

	a, b, c := status.Notifications[0], status.Notifications[1], status.Notifications[2]
	if len(a.Pending) != 0 || a.DeliveredTime == nil || !a.DeliveredTime.Equal(&at) {
		t.Errorf("a: pending %v, delivered %v; want none pending, delivered at %s", a.Pending, a.DeliveredTime, at)
	}
	if len(b.Pending) != 0 || len(b.DeadLetters) != 1 || b.DeadLetters[0].Reason != v1alpha1.DeadLetterMalformed || len(b.DeadLetters[0].Message) > maxDeadLetterMessage {
		t.Errorf("b: pending %v, dead letters %+v; want none pending and one bounded malformed dead letter", b.Pending, b.DeadLetters)
	}
	if len(c.Pending) != 1 || c.DeliveredTime != nil {
		t.Errorf("c: pending %v, delivered %v; want audit still pending", c.Pending, c.DeliveredTime)
	}
	if !status.NotificationsPending {
		t.Error("notificationsPending is false with c still owed")
	}
}
