package notify_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
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

const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func action(phase v1alpha1.Phase) *v1alpha1.ToolAction {
	a := &v1alpha1.ToolAction{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "order-1001-charge", UID: "1d7c5d8e-0000-4000-8000-000000000001",
		Annotations: map[string]string{v1alpha1.RequestedByAnnotation: "alice"}}}
	a.Spec.ToolRef = v1alpha1.ToolReference{Name: "charge"}
	a.Status.Phase = phase
	a.Status.RequestDigest = "sha256:" + strings.Repeat("ab", 32)
	return a
}

// An event owed (the transition rules say which) is recorded for every
// sink, with the facts of the transition; none is for no type, or for a
// manager without sinks.
func TestOwe(t *testing.T) {
	at := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	sinks := []string{"audit", "broker"}
	for _, tc := range []struct {
		to    v1alpha1.Phase
		owed  string
		sinks []string
	}{
		{v1alpha1.PhaseAwaitingApproval, notify.TypeAwaitingApproval, sinks},
		{v1alpha1.PhaseEscalated, notify.TypeEscalated, sinks},
		{v1alpha1.PhaseSucceeded, notify.TypeSucceeded, sinks},
		{v1alpha1.PhaseFailed, notify.TypeFailed, sinks},
		{v1alpha1.PhaseExecuting, "", sinks},
		{v1alpha1.PhaseSucceeded, notify.TypeSucceeded, nil},
	} {
		next := action(tc.to)
		next.Status.ExternalRef = "ch_1"
		owed := notify.Owe(tc.owed, next, tc.sinks, at, traceparent, "")
		want := tc.owed != "" && len(tc.sinks) > 0
		if owed != want || len(next.Status.Notifications) != map[bool]int{true: 1}[owed] || next.Status.NotificationsPending != owed {
			t.Errorf("%q to %s with sinks %v: owed %v, %+v, want %v", tc.owed, tc.to, tc.sinks, owed, next.Status, want)
			continue
		}
		if !owed {
			continue
		}
		wantOwed := v1alpha1.Notification{ID: notify.ID("shop", "order-1001-charge", next.UID, tc.owed, 0),
			Type: tc.owed, Time: metav1.NewTime(at), Pending: sinks, ExternalRef: "ch_1", Traceparent: traceparent}
		if diff := cmp.Diff(wantOwed, next.Status.Notifications[0]); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.to, diff)
		}
		if notify.TypeOf(tc.to) != tc.owed {
			t.Errorf("TypeOf(%s) = %q, want %q", tc.to, notify.TypeOf(tc.to), tc.owed)
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
		if !notify.Owe(notify.TypeEscalated, next, []string{"audit"}, at, "", "") {
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
	notify.Owe(notify.TypeOf(a.Status.Phase), a, []string{"audit"}, time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC), traceparent, "")
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
	notify.Owe(notify.TypeEscalated, escalated, []string{"audit"}, time.Now(), "", "")
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
// refusal, while the sink works); only a 2xx acknowledges, and a redirect
// is neither followed nor an acknowledgement.
func TestSendTellsTheEventFromTheSink(t *testing.T) {
	a := action(v1alpha1.PhaseSucceeded)
	notify.Owe(notify.TypeOf(a.Status.Phase), a, []string{"audit"}, time.Now(), "", "")
	ev, err := notify.Event(a, a.Status.Notifications[0])
	if err != nil {
		t.Fatal(err)
	}
	delivery, err := notify.Encode(ev)
	if err != nil {
		t.Fatal(err)
	}
	var redirected atomic.Int32
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		redirected.Add(1)
		w.WriteHeader(http.StatusAccepted)
	}))
	defer elsewhere.Close()
	answering := func(status int) string {
		sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			if status >= 300 && status < 400 {
				w.Header().Set("Location", elsewhere.URL+"/events")
			}
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
		http.StatusMovedPermanently: sinkFailed, http.StatusFound: sinkFailed, http.StatusTemporaryRedirect: sinkFailed, http.StatusPermanentRedirect: sinkFailed,
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
	if n := redirected.Load(); n != 0 {
		t.Errorf("the redirects' target got %d requests, want none", n)
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
	err = notify.NewSender(5*time.Second).Send(context.Background(), notify.Sink{Name: "audit", URL: answering(http.StatusTemporaryRedirect)}, delivery)
	if want := "sink audit did not acknowledge event " + ev.ID() + ": 307 Temporary Redirect: a redirect is not followed; configure the sink with the URL it redirects to"; err == nil || err.Error() != want {
		t.Errorf("a redirect: %v, want %q", err, want)
	}
}

// An event that carries a value no HTTP header may hold (a traceparent
// with a line break, as an older manager stored it) is malformed: no
// request is built from it, for any sink.
func TestEncodeMalformed(t *testing.T) {
	a := action(v1alpha1.PhaseSucceeded)
	notify.Owe(notify.TypeOf(a.Status.Phase), a, []string{"audit"}, time.Now(), "", "")
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

// verifyStandardWebhook checks a request's signature as the Standard
// Webhooks specification has a receiver do, apart from the sender's code:
// the key is what follows whsec_, in base64; the signed content the id,
// the timestamp and the body joined by dots; webhook-signature a
// space-separated list of version,base64 signatures, one of which must be
// v1's HMAC-SHA256; and the timestamp within five minutes of now.
func verifyStandardWebhook(secret string, h http.Header, body []byte) error {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return err
	}
	id, timestamp := h.Get("webhook-id"), h.Get("webhook-timestamp")
	seconds, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil {
		return fmt.Errorf("webhook-timestamp %q: %w", timestamp, err)
	}
	if skew := time.Since(time.Unix(seconds, 0)); skew > 5*time.Minute || skew < -5*time.Minute {
		return fmt.Errorf("webhook-timestamp %s is %s away", timestamp, skew)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + timestamp + "." + string(body)))
	expected := mac.Sum(nil)
	for _, versioned := range strings.Fields(h.Get("webhook-signature")) {
		version, signature, _ := strings.Cut(versioned, ",")
		decoded, err := base64.StdEncoding.DecodeString(signature)
		if version == "v1" && err == nil && hmac.Equal(decoded, expected) {
			return nil
		}
	}
	return errors.New("no v1 signature matches")
}

// A sink read from its directory (as a mounted Secret holds it) is sent
// deliveries signed with its key: a receiver that verifies them as the
// standard says acknowledges them, and one holding another key refuses
// them, which is the sink's failure (a 401 says its configuration is
// wrong), not the event's.
func TestSendSigned(t *testing.T) {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	var verified, unverified atomic.Int32
	receiver := func(secret string) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			if err := verifyStandardWebhook(secret, r.Header, body); err != nil {
				unverified.Add(1)
				http.Error(w, err.Error(), http.StatusUnauthorized)
				return
			}
			// Structured mode: the event's attributes are in the signed body,
			// none in headers a proxy could change unnoticed.
			var event struct {
				ID      string          `json:"id"`
				Type    string          `json:"type"`
				Subject string          `json:"subject"`
				Data    json.RawMessage `json:"data"`
			}
			if err := json.Unmarshal(body, &event); err != nil || r.Header.Get("Content-Type") != "application/cloudevents+json; charset=UTF-8" {
				http.Error(w, "not a CloudEvent in structured mode", http.StatusBadRequest)
				return
			}
			for name := range r.Header {
				if strings.HasPrefix(strings.ToLower(name), "ce-") {
					http.Error(w, "an attribute outside the signed body: "+name, http.StatusBadRequest)
					return
				}
			}
			if r.Header.Get("webhook-id") != event.ID || event.Type != notify.TypeSucceeded || event.Subject == "" || len(event.Data) == 0 {
				http.Error(w, "webhook-id is not the event's id, or the event lacks its attributes", http.StatusBadRequest)
				return
			}
			verified.Add(1)
			w.WriteHeader(http.StatusNoContent)
		}))
	}
	good, other := receiver(secret), receiver("whsec_"+base64.StdEncoding.EncodeToString([]byte("another key of twenty-four bytes")))
	defer good.Close()
	defer other.Close()
	sinkIn := func(url string) notify.Sink {
		dir := t.TempDir()
		for file, content := range map[string]string{"url": url + "\n", "signing-key": secret + "\n"} {
			if err := os.WriteFile(filepath.Join(dir, file), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		sink, err := notify.LoadSink("audit", dir)
		if err != nil {
			t.Fatal(err)
		}
		return sink
	}
	a := action(v1alpha1.PhaseSucceeded)
	notify.Owe(notify.TypeOf(a.Status.Phase), a, []string{"audit"}, time.Now(), traceparent, "")
	ev, err := notify.Event(a, a.Status.Notifications[0])
	if err != nil {
		t.Fatal(err)
	}
	delivery, err := notify.Encode(ev)
	if err != nil {
		t.Fatal(err)
	}
	sender := notify.NewSender(5 * time.Second)
	if err := sender.Send(context.Background(), sinkIn(good.URL), delivery); err != nil {
		t.Errorf("a receiver holding the key: %v", err)
	}
	err = sender.Send(context.Background(), sinkIn(other.URL), delivery)
	if want := "sink audit did not acknowledge event " + ev.ID() + ": 401 Unauthorized"; err == nil || err.Error() != want || errors.Is(err, notify.ErrRefused) {
		t.Errorf("a receiver holding another key: %v, want %q, a failure of the sink", err, want)
	}
	if verified.Load() != 1 || unverified.Load() != 1 {
		t.Errorf("%d deliveries verified and %d not, want one each", verified.Load(), unverified.Load())
	}
}

// A sink's directory holds its URL and, optionally, its signing key; what
// is wrong is named without showing the URL, which may carry a token, and
// a name is taken once, by either flag.
func TestLoadSink(t *testing.T) {
	const token = "https://hooks.example.com/services/T0/B0/secret-token"
	dir := func(files map[string]string) string {
		d := t.TempDir()
		for name, content := range files {
			if err := os.WriteFile(filepath.Join(d, name), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	unsigned, err := notify.LoadSink("relay", dir(map[string]string{"url": token + "\n"}))
	if err != nil || unsigned.URL != token || unsigned.SigningKey != nil {
		t.Errorf("a directory with a url alone: %+v, %v; want the URL, unsigned", unsigned, err)
	}
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"no url", map[string]string{}, "notification sink relay: cannot read its URL: open DIR/url: no such file or directory"},
		{"not a URL", map[string]string{"url": "ftp" + token[5:]}, "notification sink relay: DIR/url does not hold an http or https URL"},
		{"a key without its prefix", map[string]string{"url": token, "signing-key": "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"},
			"notification sink relay: DIR/signing-key: a signing key is whsec_ followed by the key in base64"},
		{"a key not in base64", map[string]string{"url": token, "signing-key": "whsec_not base64!"},
			"notification sink relay: DIR/signing-key: the signing key after whsec_ is not base64: illegal base64 data at input byte 3"},
		{"a short key", map[string]string{"url": token, "signing-key": "whsec_" + base64.StdEncoding.EncodeToString([]byte("short"))},
			"notification sink relay: DIR/signing-key: the signing key holds 5 bytes, and Standard Webhooks keys hold 24 to 64"},
	} {
		d := dir(tc.files)
		_, err := notify.LoadSink("relay", d)
		if err == nil || strings.ReplaceAll(err.Error(), d, "DIR") != tc.want || strings.Contains(err.Error(), "secret-token") {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}

	var sinks []notify.Sink
	byDir, byURL := notify.SinkDirFlag(&sinks), notify.SinkFlag(&sinks)
	if err := byDir("relay=" + dir(map[string]string{"url": token, "signing-key": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"})); err != nil {
		t.Fatal(err)
	}
	if err := byURL("relay=http://127.0.0.1:8089/events"); err == nil || err.Error() != "notification sink relay is named twice" {
		t.Errorf("a name given by both flags: %v", err)
	}
	if err := byDir("relay"); err == nil || err.Error() != `notification sink directory "relay": want NAME=DIR` {
		t.Errorf("a directory flag without a directory: %v", err)
	}
	if len(sinks) != 1 || len(sinks[0].SigningKey) != 24 {
		t.Errorf("sinks = %+v, want the signed relay alone", sinks)
	}
}
