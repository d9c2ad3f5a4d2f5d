package demo

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/notify"
)

// The server is a notification sink: the manager's sender delivers an
// event in binary mode (or, to a signed sink, in structured mode), the
// server acknowledges and lists it; a request that is not a CloudEvent is
// refused.
func TestEventsSink(t *testing.T) {
	ts := newTestServer(t)
	a := &v1alpha1.ToolAction{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "order-1001-charge"}}
	a.Spec.ToolRef.Name = "charge"
	a.Status.Phase = v1alpha1.PhaseSucceeded
	a.Status.ExternalRef = "ch_1"
	notify.Owe(notify.TypeOf(a.Status.Phase), a, []string{"demo"}, time.Now(), "", "")
	ev, err := notify.Event(a, a.Status.Notifications[0])
	if err != nil {
		t.Fatal(err)
	}
	delivery, err := notify.Encode(ev)
	if err != nil {
		t.Fatal(err)
	}
	if err := notify.NewSender(5*time.Second).Send(context.Background(), notify.Sink{Name: "demo", URL: ts.url + "/events"}, delivery); err != nil {
		t.Fatalf("Send: %v", err)
	}
	listed := ts.do(t, http.MethodGet, "/_admin/events", "", nil)
	var events []Event
	if err := json.Unmarshal(listed.body, &events); err != nil {
		t.Fatal(err)
	}
	if len(events) != 1 || events[0].ID != ev.ID() || events[0].Type != notify.TypeSucceeded || events[0].Subject != "order-1001-charge" ||
		!strings.Contains(string(events[0].Data), `"externalRef":"ch_1"`) {
		t.Errorf("events = %+v, want the one sent", events)
	}

	// A sink with a signing key is sent the event in structured mode.
	signed := notify.Sink{Name: "demo", URL: ts.url + "/events", SigningKey: []byte("a key of twenty-four byte")}
	if err := notify.NewSender(5*time.Second).Send(context.Background(), signed, delivery); err != nil {
		t.Fatalf("Send signed: %v", err)
	}
	if events := ts.Events(); len(events) != 2 || events[1].ID != ev.ID() || events[1].Type != notify.TypeSucceeded || events[1].Subject != "order-1001-charge" ||
		!strings.Contains(string(events[1].Data), `"externalRef":"ch_1"`) {
		t.Errorf("events = %+v, want the structured one like the first", events)
	}

	plain := ts.do(t, http.MethodPost, "/events", `{}`, http.Header{"Content-Type": {"application/json"}})
	structuredWithout := ts.do(t, http.MethodPost, "/events", `{"id":"1"}`, http.Header{"Content-Type": {"application/cloudevents+json"}})
	if plain.status != http.StatusBadRequest || structuredWithout.status != http.StatusBadRequest || len(ts.Events()) != 2 {
		t.Errorf("a plain POST: %d, a structured one without its attributes: %d, %d events kept; want 400, 400 and none more",
			plain.status, structuredWithout.status, len(ts.Events()))
	}
}
