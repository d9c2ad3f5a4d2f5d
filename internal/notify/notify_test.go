package notify_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/notify"
	"github.com/toolledger/toolledger/internal/testenv"
)

func TestParseSink(t *testing.T) {
	for spec, want := range map[string]string{
		"broker=http://broker-ingress.knative-eventing.svc/shop/default": "",
		"relay=https://relay.example.com/hooks/toolledger":               "",
		"relay":                           `notification sink "relay": want NAME=URL`,
		"Relay=https://relay.example.com": "the name is not a DNS label",
		"relay=ftp://relay.example.com":   `notification sink relay: "ftp://relay.example.com" is not an http or https URL`,
		"relay=https://":                  "is not an http or https URL",
	} {
		sink, err := notify.ParseSink(spec)
		switch {
		case want == "" && err != nil:
			t.Errorf("ParseSink(%q): %v", spec, err)
		case want == "" && sink.Name+"="+sink.URL != spec:
			t.Errorf("ParseSink(%q) = %+v", spec, sink)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("ParseSink(%q) = %v, want an error containing %q", spec, err, want)
		}
	}
}

const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func action(phase v1alpha1.Phase) *v1alpha1.ToolAction {
	a := &v1alpha1.ToolAction{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "order-1001-charge", UID: "1d7c5d8e-0000-4000-8000-000000000001",
		Annotations: map[string]string{v1alpha1.RequestedByAnnotation: "alice"}}}
	a.Spec.ToolRef = v1alpha1.ToolReference{Name: "charge"}
	a.Status.Phase = phase
	a.Status.RequestDigest = "sha256:" + strings.Repeat("ab", 32)
	return a
}

// A transition into AwaitingApproval, Escalated, Succeeded or Failed owes
// one event to every sink, with the facts of the transition; any other, a
// write within the phase, a record answered by its key's tombstone or
// archived record, or a manager without sinks owes none.
func TestOwe(t *testing.T) {
	at := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	sinks := []string{"audit", "broker"}
	settled := func(reason string) func(*v1alpha1.ToolAction) {
		return func(a *v1alpha1.ToolAction) {
			meta.SetStatusCondition(&a.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionSucceeded, Status: metav1.ConditionTrue, Reason: reason})
		}
	}
	for _, tc := range []struct {
		from, to v1alpha1.Phase
		sinks    []string
		adjust   func(*v1alpha1.ToolAction)
		want     string
	}{
		{v1alpha1.PhaseAccepted, v1alpha1.PhaseAwaitingApproval, sinks, nil, notify.TypeAwaitingApproval},
		{v1alpha1.PhaseUnknown, v1alpha1.PhaseEscalated, sinks, nil, notify.TypeEscalated},
		{v1alpha1.PhaseExecuting, v1alpha1.PhaseSucceeded, sinks, settled("Succeeded"), notify.TypeSucceeded},
		{v1alpha1.PhaseUnknown, v1alpha1.PhaseSucceeded, sinks, settled(v1alpha1.ReasonFoundByLookup), notify.TypeSucceeded},
		{v1alpha1.PhaseExecuting, v1alpha1.PhaseFailed, sinks, nil, notify.TypeFailed},
		{"", v1alpha1.PhaseSucceeded, sinks, settled(v1alpha1.ReasonSettledByTombstone), ""},
		{"", v1alpha1.PhaseSucceeded, sinks, settled(v1alpha1.ReasonSettledByArchive), ""},
		{v1alpha1.PhaseAccepted, v1alpha1.PhaseExecuting, sinks, nil, ""},
		{v1alpha1.PhaseExecuting, v1alpha1.PhaseUnknown, sinks, nil, ""},
		{v1alpha1.PhaseSucceeded, v1alpha1.PhaseSucceeded, sinks, nil, ""},
		{v1alpha1.PhaseExecuting, v1alpha1.PhaseSucceeded, nil, nil, ""},
	} {
		next := action(tc.to)
		next.Status.ExternalRef = "ch_1"
		if tc.adjust != nil {
			tc.adjust(next)
		}
		owed := notify.Owe(tc.from, next, tc.sinks, at, traceparent)
		if owed != (tc.want != "") || len(next.Status.Notifications) != map[bool]int{true: 1}[owed] || next.Status.NotificationsPending != owed {
			t.Errorf("%s → %s with sinks %v: owed %v, %+v, want %q", tc.from, tc.to, tc.sinks, owed, next.Status, tc.want)
			continue
		}
		if !owed {
			continue
		}
		want := v1alpha1.Notification{ID: notify.ID("shop", "order-1001-charge", next.UID, tc.want, 0),
			Type: tc.want, Time: metav1.NewTime(at), Pending: sinks, ExternalRef: "ch_1", Traceparent: traceparent}
		if diff := cmp.Diff(want, next.Status.Notifications[0]); diff != "" {
			t.Errorf("%s → %s (-want +got):\n%s", tc.from, tc.to, diff)
		}
	}

	first := notify.ID("shop", "order-1001-charge", "uid-1", notify.TypeSucceeded, 0)
	if len(first) != 64 || first != notify.ID("shop", "order-1001-charge", "uid-1", notify.TypeSucceeded, 0) {
		t.Fatalf("ID = %q: want 64 hex digits, the same every time", first)
	}
	for _, other := range []string{
		notify.ID("shop", "order-1001-charge", "uid-2", notify.TypeSucceeded, 0),
		notify.ID("shop", "order-1001-charge", "uid-1", notify.TypeFailed, 0),
		notify.ID("shop", "order-1001-charge", "uid-1", notify.TypeSucceeded, 1),
		notify.ID("shop2", "order-1001-charge", "uid-1", notify.TypeSucceeded, 0),
		notify.ID("shop", "order-1002-charge", "uid-1", notify.TypeSucceeded, 0),
	} {
		if other == first {
			t.Errorf("two transitions share the id %s", first)
		}
	}
}

// Each escalation of an action is another event, numbered among its type;
// past the bound the oldest delivered events make room, and an id is never
// given twice, however many were dropped.
func TestOweRepeatedEscalations(t *testing.T) {
	at := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	next := action(v1alpha1.PhaseEscalated)
	ids := map[string]bool{}
	for i := range 3 * v1alpha1.MaxNotifications {
		if !notify.Owe(v1alpha1.PhaseUnknown, next, []string{"audit"}, at, "") {
			t.Fatalf("escalation %d owed nothing", i)
		}
		newest := next.Status.Notifications[len(next.Status.Notifications)-1]
		if newest.Seq != int32(i) || ids[newest.ID] {
			t.Fatalf("escalation %d: seq %d, id %s seen before: %v", i, newest.Seq, newest.ID, ids[newest.ID])
		}
		ids[newest.ID] = true
		// All but the newest two are delivered.
		for j := range next.Status.Notifications[:max(len(next.Status.Notifications)-2, 0)] {
			next.Status.Notifications[j].Pending = nil
		}
		if n := len(next.Status.Notifications); n > v1alpha1.MaxNotifications {
			t.Fatalf("%d notifications, more than the bound %d", n, v1alpha1.MaxNotifications)
		}
		for _, n := range next.Status.Notifications[:len(next.Status.Notifications)-1] {
			if len(n.Pending) > 0 && n.Seq < int32(i)-1 {
				t.Fatalf("a pending notification (seq %d) was dropped before delivered ones", n.Seq)
			}
		}
	}
}

// An event goes in binary mode to a real receiver: its attributes as ce-
// headers, the transition's facts as JSON, as the transition left them; the
// receiver's acknowledgement is a nil error, any other answer an error
// naming the sink.
func TestSendBinaryMode(t *testing.T) {
	receiver, err := testenv.StartCloudEventsReceiver()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = receiver.Close() }()
	a := action(v1alpha1.PhaseFailed)
	a.Status.Attempts = 2
	a.Status.Error = &v1alpha1.ActionError{Class: v1alpha1.ErrorClassInvalidInput, Reason: "HTTP422", Message: "currency not supported"}
	notify.Owe(v1alpha1.PhaseExecuting, a, []string{"audit"}, time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC), traceparent)
	owed := a.Status.Notifications[0]
	ev, err := notify.Event(a, owed)
	if err != nil {
		t.Fatal(err)
	}
	delivery, err := notify.Encode(ev)
	if err != nil {
		t.Fatal(err)
	}
	sender := notify.NewSender(5 * time.Second)
	if err := sender.Send(context.Background(), notify.Sink{Name: "audit", URL: receiver.URL}, delivery); err != nil {
		t.Fatalf("Send: %v", err)
	}
	got := receiver.Received()
	if len(got) != 1 || !got[0].Binary {
		t.Fatalf("received %+v, want one event in binary mode", got)
	}
	e := got[0].Event
	for attr, pair := range map[string][2]string{
		"id": {e.ID(), owed.ID}, "type": {e.Type(), notify.TypeFailed}, "source": {e.Source(), "/apis/toolledger.dev/v1alpha1/namespaces/shop/toolactions"},
		"subject": {e.Subject(), "order-1001-charge"}, "specversion": {e.SpecVersion(), "1.0"}, "datacontenttype": {e.DataContentType(), "application/json"},
		"time": {e.Time().UTC().Format(time.RFC3339), "2026-12-04T12:00:00Z"}, "traceparent": {e.Extensions()["traceparent"].(string), traceparent},
	} {
		if pair[0] != pair[1] {
			t.Errorf("%s = %q, want %q", attr, pair[0], pair[1])
		}
	}
	var data notify.Data
	if err := json.Unmarshal(e.Data(), &data); err != nil {
		t.Fatal(err)
	}
	want := notify.Data{Namespace: "shop", Key: "order-1001-charge", ToolKind: "Tool", Tool: "charge", Phase: v1alpha1.PhaseFailed,
		RequestDigest: a.Status.RequestDigest, Attempts: 2, ErrorClass: "InvalidInput", ErrorReason: "HTTP422", Message: "currency not supported", RequestedBy: "alice"}
	if diff := cmp.Diff(want, data); diff != "" {
		t.Errorf("data (-want +got):\n%s", diff)
	}

	// An escalation told after its resolution says what the escalation
	// said, not what the resolution did.
	escalated := action(v1alpha1.PhaseEscalated)
	escalated.Status.Error = &v1alpha1.ActionError{Class: v1alpha1.ErrorClassOutcomeUnknown, Reason: "LeaseExpired", Message: "nobody knows"}
	notify.Owe(v1alpha1.PhaseUnknown, escalated, []string{"audit"}, time.Now(), "")
	escalated.Status.Phase, escalated.Status.Error, escalated.Status.ExternalRef = v1alpha1.PhaseSucceeded, nil, "ch_found"
	late, err := notify.Event(escalated, escalated.Status.Notifications[0])
	if err != nil {
		t.Fatal(err)
	}
	var lateData notify.Data
	if err := json.Unmarshal(late.Data(), &lateData); err != nil {
		t.Fatal(err)
	}
	if lateData.Phase != v1alpha1.PhaseEscalated || lateData.ErrorClass != "OutcomeUnknown" || lateData.ErrorReason != "LeaseExpired" || lateData.ExternalRef != "" || lateData.Message != "" {
		t.Errorf("an escalation told after its resolution: %+v", lateData)
	}

	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) }))
	defer failing.Close()
	err = sender.Send(context.Background(), notify.Sink{Name: "broker", URL: failing.URL}, delivery)
	if want := "sink broker did not acknowledge event " + owed.ID + ": 503 Service Unavailable"; err == nil || err.Error() != want {
		t.Errorf("Send to a sink answering 503: %v, want %q", err, want)
	}
}

// A sink's answer tells either of the sink (down, overloaded, configured
// wrongly: every event would meet it) or of the one event it was sent (a
// refusal, while the sink works); only a 2xx acknowledges.
func TestSendTellsTheEventFromTheSink(t *testing.T) {
	a := action(v1alpha1.PhaseSucceeded)
	notify.Owe(v1alpha1.PhaseExecuting, a, []string{"audit"}, time.Now(), "")
	ev, err := notify.Event(a, a.Status.Notifications[0])
	if err != nil {
		t.Fatal(err)
	}
	delivery, err := notify.Encode(ev)
	if err != nil {
		t.Fatal(err)
	}
	answering := func(status int) string {
		sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(status)
		}))
		t.Cleanup(sink.Close)
		return sink.URL
	}
	const (
		acknowledged = iota
		refused
		sinkFailed
	)
	for status, want := range map[int]int{
		http.StatusOK: acknowledged, http.StatusAccepted: acknowledged, http.StatusNoContent: acknowledged,
		http.StatusBadRequest: refused, http.StatusRequestEntityTooLarge: refused, http.StatusUnsupportedMediaType: refused,
		http.StatusUnprocessableEntity: refused, http.StatusRequestHeaderFieldsTooLarge: refused,
		http.StatusUnauthorized: sinkFailed, http.StatusForbidden: sinkFailed, http.StatusNotFound: sinkFailed, http.StatusMethodNotAllowed: sinkFailed,
		http.StatusRequestTimeout: sinkFailed, http.StatusTooManyRequests: sinkFailed,
		http.StatusInternalServerError: sinkFailed, http.StatusBadGateway: sinkFailed, http.StatusServiceUnavailable: sinkFailed,
	} {
		err := notify.NewSender(5*time.Second).Send(context.Background(), notify.Sink{Name: "audit", URL: answering(status)}, delivery)
		got := map[bool]int{true: refused, false: sinkFailed}[errors.Is(err, notify.ErrRefused)]
		if err == nil {
			got = acknowledged
		}
		if got != want {
			t.Errorf("a sink answering %d: %v; want %s", status, err, []string{"an acknowledgement", "a refusal of the event", "a failure of the sink"}[want])
		}
	}

	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	if err := notify.NewSender(5*time.Second).Send(context.Background(), notify.Sink{Name: "audit", URL: down.URL}, delivery); err == nil || errors.Is(err, notify.ErrRefused) {
		t.Errorf("a sink that refuses connections: %v, want a failure of the sink", err)
	}

	err = notify.NewSender(5*time.Second).Send(context.Background(), notify.Sink{Name: "audit", URL: answering(http.StatusUnprocessableEntity)}, delivery)
	if want := "sink audit refused event " + ev.ID() + ": 422 Unprocessable Entity: the sink refused the event"; err == nil || err.Error() != want {
		t.Errorf("a refusal: %v, want %q", err, want)
	}
}

// An event that carries a value no HTTP header may hold (a traceparent
// with a line break, as an older manager stored it) is malformed: no
// request is built from it, for any sink.
func TestEncodeMalformed(t *testing.T) {
	a := action(v1alpha1.PhaseSucceeded)
	notify.Owe(v1alpha1.PhaseExecuting, a, []string{"audit"}, time.Now(), "")
	a.Status.Notifications[0].Traceparent = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-a\nb"
	ev, err := notify.Event(a, a.Status.Notifications[0])
	if err != nil {
		t.Fatal(err)
	}
	_, err = notify.Encode(ev)
	if want := "no request can carry the event: its Ce-Traceparent header would hold a character HTTP does not allow"; !errors.Is(err, notify.ErrMalformed) || err.Error() != want {
		t.Errorf("Encode = %v, want %q", err, want)
	}
}

// The flag takes each NAME=URL once: a bad one, or a name given twice, is
// refused and not added.
func TestSinkFlag(t *testing.T) {
	var sinks []notify.Sink
	set := notify.SinkFlag(&sinks)
	if err := set("audit=http://127.0.0.1:8089/events"); err != nil {
		t.Fatal(err)
	}
	if err := set("audit=http://127.0.0.1:9999/events"); err == nil || err.Error() != "notification sink audit is named twice" {
		t.Errorf("a name given twice: %v", err)
	}
	if err := set("relay"); err == nil {
		t.Error("a sink without a URL was taken")
	}
	if len(sinks) != 1 || sinks[0].URL != "http://127.0.0.1:8089/events" {
		t.Errorf("sinks = %+v, want the first alone", sinks)
	}
}
