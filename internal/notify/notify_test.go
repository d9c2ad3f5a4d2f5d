package notify_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
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

func action(phase v1alpha1.Phase) *v1alpha1.ToolAction {
	a := &v1alpha1.ToolAction{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "order-1001-charge",
		Annotations: map[string]string{v1alpha1.RequestedByAnnotation: "alice"}}}
	a.Spec.ToolRef = v1alpha1.ToolReference{Name: "charge"}
	a.Status.Phase = phase
	a.Status.RequestDigest = "sha256:" + strings.Repeat("ab", 32)
	return a
}

// A transition into AwaitingApproval, Escalated, Succeeded or Failed owes
// one event to every sink; any other, a write within the phase, or a
// manager without sinks owes none. The id is the same for the same intent's
// transition and differs for another request, another type, or a second
// event of one type.
func TestOwe(t *testing.T) {
	at := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	sinks := []string{"audit", "broker"}
	for _, tc := range []struct {
		from, to v1alpha1.Phase
		sinks    []string
		want     string
	}{
		{v1alpha1.PhaseAccepted, v1alpha1.PhaseAwaitingApproval, sinks, notify.TypeAwaitingApproval},
		{v1alpha1.PhaseUnknown, v1alpha1.PhaseEscalated, sinks, notify.TypeEscalated},
		{v1alpha1.PhaseExecuting, v1alpha1.PhaseSucceeded, sinks, notify.TypeSucceeded},
		{"", v1alpha1.PhaseSucceeded, sinks, notify.TypeSucceeded},
		{v1alpha1.PhaseExecuting, v1alpha1.PhaseFailed, sinks, notify.TypeFailed},
		{v1alpha1.PhaseAccepted, v1alpha1.PhaseExecuting, sinks, ""},
		{v1alpha1.PhaseExecuting, v1alpha1.PhaseUnknown, sinks, ""},
		{v1alpha1.PhaseSucceeded, v1alpha1.PhaseSucceeded, sinks, ""},
		{v1alpha1.PhaseExecuting, v1alpha1.PhaseSucceeded, nil, ""},
	} {
		next := action(tc.to)
		owed := notify.Owe(tc.from, next, tc.sinks, at)
		if owed != (tc.want != "") || len(next.Status.Notifications) != map[bool]int{true: 1}[owed] || next.Status.NotificationsPending != owed {
			t.Errorf("%s → %s with sinks %v: owed %v, %+v, want %q", tc.from, tc.to, tc.sinks, owed, next.Status, tc.want)
			continue
		}
		if !owed {
			continue
		}
		want := v1alpha1.Notification{ID: notify.ID("shop", "order-1001-charge", next.Status.RequestDigest, tc.want, 0),
			Type: tc.want, Time: metav1.NewTime(at), Pending: sinks}
		if diff := cmp.Diff(want, next.Status.Notifications[0]); diff != "" {
			t.Errorf("%s → %s (-want +got):\n%s", tc.from, tc.to, diff)
		}
	}

	first := notify.ID("shop", "order-1001-charge", "sha256:aa", notify.TypeSucceeded, 0)
	if len(first) != 64 || first != notify.ID("shop", "order-1001-charge", "sha256:aa", notify.TypeSucceeded, 0) {
		t.Fatalf("ID = %q: want 64 hex digits, the same every time", first)
	}
	for _, other := range []string{
		notify.ID("shop", "order-1001-charge", "sha256:bb", notify.TypeSucceeded, 0),
		notify.ID("shop", "order-1001-charge", "sha256:aa", notify.TypeFailed, 0),
		notify.ID("shop", "order-1001-charge", "sha256:aa", notify.TypeSucceeded, 1),
		notify.ID("shop2", "order-1001-charge", "sha256:aa", notify.TypeSucceeded, 0),
		notify.ID("shop", "order-1002-charge", "sha256:aa", notify.TypeSucceeded, 0),
	} {
		if other == first {
			t.Errorf("two transitions share the id %s", first)
		}
	}

	// A second escalation is another event; past the bound the oldest
	// delivered ones make room.
	next := action(v1alpha1.PhaseEscalated)
	notify.Owe(v1alpha1.PhaseUnknown, next, sinks, at)
	next.Status.Notifications[0].Pending = nil
	notify.Owe(v1alpha1.PhaseUnknown, next, sinks, at)
	if got := next.Status.Notifications[1].ID; got != notify.ID("shop", "order-1001-charge", next.Status.RequestDigest, notify.TypeEscalated, 1) {
		t.Errorf("the second escalation's id %s is not the second of its type", got)
	}
	for range v1alpha1.MaxNotifications {
		notify.Owe(v1alpha1.PhaseUnknown, next, sinks, at)
	}
	if n := len(next.Status.Notifications); n != v1alpha1.MaxNotifications {
		t.Fatalf("%d notifications, want the bound %d", n, v1alpha1.MaxNotifications)
	}
	for _, n := range next.Status.Notifications {
		if len(n.Pending) == 0 {
			t.Errorf("the delivered notification %s was kept while pending ones were dropped", n.ID)
		}
	}
}

// An event goes in binary mode to a real receiver: its attributes as ce-
// headers, the transition's facts as JSON; the receiver's acknowledgement
// is a nil error, any other answer an error naming the sink.
func TestSendBinaryMode(t *testing.T) {
	receiver, err := testenv.StartCloudEventsReceiver()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = receiver.Close() }()
	a := action(v1alpha1.PhaseFailed)
	a.Status.Attempts = 2
	a.Status.Error = &v1alpha1.ActionError{Class: v1alpha1.ErrorClassInvalidInput, Reason: "HTTP422", Message: "currency not supported"}
	notify.Owe(v1alpha1.PhaseExecuting, a, []string{"audit"}, time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC))
	owed := a.Status.Notifications[0]
	ev, err := notify.Event(a, owed, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	if err != nil {
		t.Fatal(err)
	}
	sender, err := notify.NewSender(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := sender.Send(context.Background(), notify.Sink{Name: "audit", URL: receiver.URL}, ev); err != nil {
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
		"time": {e.Time().UTC().Format(time.RFC3339), "2026-12-04T12:00:00Z"}, "traceparent": {e.Extensions()["traceparent"].(string), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
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

	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) }))
	defer failing.Close()
	err = sender.Send(context.Background(), notify.Sink{Name: "broker", URL: failing.URL}, ev)
	if err == nil || !strings.Contains(err.Error(), "sink broker did not acknowledge event "+owed.ID) || !strings.Contains(err.Error(), "503") {
		t.Errorf("Send to a sink answering 503: %v", err)
	}
}
