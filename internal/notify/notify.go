// Package notify turns an action's transitions into CloudEvents
// (https://cloudevents.io) and delivers them to the sinks a cluster admin
// configures: the events an action owes are recorded in its status with the
// transition itself (Owe), and each is sent until every sink acknowledged
// it (Sender), so that a delivery is at least once and a repeated one has
// the same id. Send tells a sink's failure from its refusal of one event,
// and Encode finds an event no request can carry, so that the one event
// can be given up without holding up the sink's others.
package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"golang.org/x/net/http/httpguts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

// The event types, one for each transition that owes an event.
const (
	TypeAwaitingApproval = "dev.toolledger.toolaction.awaitingapproval.v1"
	TypeEscalated        = "dev.toolledger.toolaction.escalated.v1"
	TypeSucceeded        = "dev.toolledger.toolaction.succeeded.v1"
	TypeFailed           = "dev.toolledger.toolaction.failed.v1"
)

// TypeOf is the event type of an arrival at phase; "" for a phase that
// owes none.
func TypeOf(phase v1alpha1.Phase) string {
	switch phase {
	case v1alpha1.PhaseAwaitingApproval:
		return TypeAwaitingApproval
	case v1alpha1.PhaseEscalated:
		return TypeEscalated
	case v1alpha1.PhaseSucceeded:
		return TypeSucceeded
	case v1alpha1.PhaseFailed:
		return TypeFailed
	}
	return ""
}

// Sink is a CloudEvents receiver: a Knative broker, Argo Events' webhook
// source, a relay.
type Sink struct {
	// Name identifies the sink in the actions' status.notifications.
	Name string
	URL  string
	// SigningKey signs every delivery to the sink (Standard Webhooks); none
	// when empty.
	SigningKey []byte
}

// ParseSink reads NAME=URL, the manager's --notification-sink.
func ParseSink(spec string) (Sink, error) {
	name, target, ok := strings.Cut(spec, "=")
	if !ok {
		return Sink{}, fmt.Errorf("notification sink %q: want NAME=URL", spec)
	}
	if err := checkName(name); err != nil {
		return Sink{}, fmt.Errorf("notification sink %q: %w", spec, err)
	}
	if !isHTTPURL(target) {
		return Sink{}, fmt.Errorf("notification sink %s: %q is not an http or https URL", name, target)
	}
	return Sink{Name: name, URL: target}, nil
}

// LoadSink reads the sink name from dir, as a Secret mounted there holds
// it: the URL in the file url, and the signing key, when there is one, in
// signing-key. An error never shows the URL, which may carry a token.
func LoadSink(name, dir string) (Sink, error) {
	if err := checkName(name); err != nil {
		return Sink{}, fmt.Errorf("notification sink %q: %w", name, err)
	}
	target, err := os.ReadFile(filepath.Join(dir, "url"))
	if err != nil {
		return Sink{}, fmt.Errorf("notification sink %s: cannot read its URL: %w", name, err)
	}
	sink := Sink{Name: name, URL: strings.TrimSpace(string(target))}
	if !isHTTPURL(sink.URL) {
		return Sink{}, fmt.Errorf("notification sink %s: %s does not hold an http or https URL", name, filepath.Join(dir, "url"))
	}
	key, err := os.ReadFile(filepath.Join(dir, "signing-key"))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return sink, nil
	case err != nil:
		return Sink{}, fmt.Errorf("notification sink %s: cannot read its signing key: %w", name, err)
	}
	if sink.SigningKey, err = ParseSigningKey(strings.TrimSpace(string(key))); err != nil {
		return Sink{}, fmt.Errorf("notification sink %s: %s: %w", name, filepath.Join(dir, "signing-key"), err)
	}
	return sink, nil
}

func checkName(name string) error {
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
		return fmt.Errorf("the name is not a DNS label: %s", strings.Join(errs, "; "))
	}
	return nil
}

func isHTTPURL(target string) bool {
	u, err := url.Parse(target)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// SinkFlag parses a repeatable NAME=URL flag into *sinks, refusing a
// name given twice.
func SinkFlag(sinks *[]Sink) func(string) error {
	return func(spec string) error {
		sink, err := ParseSink(spec)
		if err != nil {
			return err
		}
		return add(sinks, sink)
	}
}

// SinkDirFlag parses a repeatable NAME=DIR flag into *sinks, each read
// with LoadSink, refusing a name given twice, by either flag.
func SinkDirFlag(sinks *[]Sink) func(string) error {
	return func(spec string) error {
		name, dir, ok := strings.Cut(spec, "=")
		if !ok {
			return fmt.Errorf("notification sink directory %q: want NAME=DIR", spec)
		}
		sink, err := LoadSink(name, dir)
		if err != nil {
			return err
		}
		return add(sinks, sink)
	}
}

func add(sinks *[]Sink, sink Sink) error {
	if slices.ContainsFunc(*sinks, func(s Sink) bool { return s.Name == sink.Name }) {
		return fmt.Errorf("notification sink %s is named twice", sink.Name)
	}
	*sinks = append(*sinks, sink)
	return nil
}

// signingKeyPrefix starts a Standard Webhooks signing key, whose rest is
// the key in base64.
const signingKeyPrefix = "whsec_"

// ParseSigningKey reads a Standard Webhooks signing key, whsec_ and the
// key's 24 to 64 bytes in base64.
func ParseSigningKey(text string) ([]byte, error) {
	encoded, ok := strings.CutPrefix(text, signingKeyPrefix)
	if !ok {
		return nil, fmt.Errorf("a signing key is %s followed by the key in base64", signingKeyPrefix)
	}
	key, err := base64.StdEncoding.DecodeString(encoded)
	if err != nil {
		return nil, fmt.Errorf("the signing key after %s is not base64: %w", signingKeyPrefix, err)
	}
	if len(key) < 24 || len(key) > 64 {
		return nil, fmt.Errorf("the signing key holds %d bytes, and Standard Webhooks keys hold 24 to 64", len(key))
	}
	return key, nil
}

// Names are the sinks' names, sorted, as an action's pending list holds them.
func Names(sinks []Sink) []string {
	names := make([]string, 0, len(sinks))
	for _, s := range sinks {
		names = append(names, s.Name)
	}
	slices.Sort(names)
	return names
}

// Owe records in next the event of eventType that its transition owes to
// sinks (the transition rules say which, "" for none), and reports whether
// it did. It is called on the status about to be written with the
// transition, so that the event is stored with it: a manager that stops
// right after the write still owes it. traceparent is the span the
// action's calls continue, "" for none; chainHead the newest checkpoint of
// the namespace's archived chain, SEQUENCE:HASH, "" for none.
func Owe(eventType string, next *v1alpha1.ToolAction, sinks []string, at time.Time, traceparent, chainHead string) bool {
	if len(sinks) == 0 || eventType == "" {
		return false
	}
	var seq int32
	for _, n := range next.Status.Notifications {
		if n.Type == eventType && n.Seq >= seq {
			seq = n.Seq + 1
		}
	}
	owed := v1alpha1.Notification{
		ID:   ID(next.Namespace, next.Name, next.UID, eventType, seq),
		Type: eventType, Seq: seq, Time: metav1.NewTime(at), Pending: slices.Clone(sinks),
		ExternalRef: next.Status.ExternalRef, ChainHead: chainHead,
	}
	if e := next.Status.Error; e != nil {
		owed.ErrorClass, owed.ErrorReason = string(e.Class), e.Reason
	}
	if len(traceparent) <= maxTraceparent {
		owed.Traceparent = traceparent
	}
	notifications := append(slices.Clone(next.Status.Notifications), owed)
	// Past the bound the oldest delivered ones go; an action with every
	// one of them undelivered loses its oldest.
	for len(notifications) > v1alpha1.MaxNotifications {
		i := max(slices.IndexFunc(notifications, func(n v1alpha1.Notification) bool { return len(n.Pending) == 0 }), 0)
		notifications = slices.Delete(notifications, i, i+1)
	}
	next.Status.Notifications = notifications
	next.Status.NotificationsPending = Pending(&next.Status)
	return true
}

// ChainHeadExtension is the CloudEvents extension that carries the newest
// checkpoint of the namespace's archived hash chain (docs/audit.md).
const ChainHeadExtension = "toolledgerchainhead"

// maxTraceparent is the longest traceparent a notification keeps, as the
// CRD bounds it.
const maxTraceparent = 256

// ID is an event's id: the SHA-256, in hex, of the namespace, the key, the
// record's uid, the type and seq. It is the same for every delivery of the
// event; the same request run again under a freed key is another record,
// and its events are others.
func ID(namespace, key string, uid types.UID, eventType string, seq int32) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s\x00%s\x00%s\x00%s\x00%d", namespace, key, uid, eventType, seq))
	return hex.EncodeToString(sum[:])
}

// Pending reports whether any notification of the action waits for a sink.
func Pending(status *v1alpha1.ToolActionStatus) bool {
	return slices.ContainsFunc(status.Notifications, func(n v1alpha1.Notification) bool { return len(n.Pending) > 0 })
}

// Data is the event's JSON payload: what a consumer needs to act on the
// transition without reading the ToolAction.
type Data struct {
	Namespace string `json:"namespace"`
	Key       string `json:"key"`
	ToolKind  string `json:"toolKind"`
	Tool      string `json:"tool"`
	// Phase is the phase the transition entered.
	Phase         v1alpha1.Phase `json:"phase"`
	RequestDigest string         `json:"requestDigest,omitempty"`
	Attempts      int32          `json:"attempts,omitempty"`
	ExternalRef   string         `json:"externalRef,omitempty"`
	ErrorClass    string         `json:"errorClass,omitempty"`
	ErrorReason   string         `json:"errorReason,omitempty"`
	Message       string         `json:"message,omitempty"`
	// RequestedBy is the verified creator the API server stamped.
	RequestedBy string `json:"requestedBy,omitempty"`
}

// Source is the events' source: the namespace's ToolActions, as the API
// server serves them; the subject is the key.
func Source(namespace string) string {
	return "/apis/" + v1alpha1.GroupVersion.String() + "/namespaces/" + namespace + "/toolactions"
}

// Event is the CloudEvent of notification n of action: its facts as the
// transition left them, and the action's message while it is still in
// the transition's phase. An error wraps ErrMalformed: the same record
// gives the same error, whatever sink it is meant for.
func Event(action *v1alpha1.ToolAction, n v1alpha1.Notification) (cloudevents.Event, error) {
	ev := cloudevents.NewEvent()
	ev.SetID(n.ID)
	ev.SetType(n.Type)
	ev.SetSource(Source(action.Namespace))
	ev.SetSubject(action.Name)
	ev.SetTime(n.Time.Time)
	if n.Traceparent != "" {
		ev.SetExtension("traceparent", n.Traceparent)
	}
	if n.ChainHead != "" {
		ev.SetExtension(ChainHeadExtension, n.ChainHead)
	}
	data := Data{
		Namespace: action.Namespace, Key: action.Name, ToolKind: action.Spec.ToolRef.KindOrDefault(), Tool: action.Spec.ToolRef.Name,
		Phase: phaseOf(n.Type), RequestDigest: action.Status.RequestDigest, Attempts: action.Status.Attempts,
		RequestedBy: action.Annotations[v1alpha1.RequestedByAnnotation],
		ExternalRef: n.ExternalRef, ErrorClass: n.ErrorClass, ErrorReason: n.ErrorReason,
	}
	if e := action.Status.Error; e != nil && action.Status.Phase == data.Phase {
		data.Message = e.Message
	}
	if err := ev.SetData(cloudevents.ApplicationJSON, data); err != nil {
		return ev, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if err := ev.Validate(); err != nil {
		return ev, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return ev, nil
}

func phaseOf(eventType string) v1alpha1.Phase {
	for _, p := range []v1alpha1.Phase{v1alpha1.PhaseAwaitingApproval, v1alpha1.PhaseEscalated, v1alpha1.PhaseSucceeded, v1alpha1.PhaseFailed} {
		if TypeOf(p) == eventType {
			return p
		}
	}
	return ""
}

// ErrMalformed marks an event that no HTTP request can carry: no sink can
// be sent it, and no retry changes that.
var ErrMalformed = errors.New("no request can carry the event")

// ErrRefused marks a sink's refusal of one event (see refuses): the sink
// works, and it is the event it will not take.
var ErrRefused = errors.New("the sink refused the event")

// Delivery is an event as sinks are sent it: in HTTP binary mode (its
// attributes as ce- headers, its data as the body) to a sink without a
// signing key, and in structured mode (the whole event as the JSON body)
// to one with a key, so that the signature, which covers the body only,
// covers every attribute a consumer relies on.
type Delivery struct {
	ID     string
	Header http.Header
	Body   []byte
	// Structured is the event in structured mode (application/cloudevents+json).
	Structured []byte
}

// structuredContentType is the media type of a CloudEvent in structured mode.
const structuredContentType = "application/cloudevents+json; charset=UTF-8"

// Encode is ev's delivery. An event one of whose values no header may
// hold (a control character) is malformed: net/http would refuse the
// request before it left, for every sink alike.
func Encode(ev cloudevents.Event) (Delivery, error) {
	req := &http.Request{Header: http.Header{}}
	if err := cehttp.WriteRequest(context.Background(), binding.ToMessage(&ev), req); err != nil {
		return Delivery{}, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	for name, values := range req.Header {
		for _, v := range values {
			if !httpguts.ValidHeaderFieldValue(v) {
				return Delivery{}, fmt.Errorf("%w: its %s header would hold a character HTTP does not allow", ErrMalformed, name)
			}
		}
	}
	structured, err := json.Marshal(ev)
	if err != nil {
		return Delivery{}, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	d := Delivery{ID: ev.ID(), Header: req.Header, Structured: structured}
	if req.Body != nil {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return Delivery{}, fmt.Errorf("cannot encode event %s: %w", ev.ID(), err)
		}
		d.Body = body
	}
	return d, nil
}

// refuses reports whether a sink's answer refuses the one event it was
// sent rather than tells of the sink: a request it cannot read (400), too
// large (413, 431), of a type it does not take (415), or that it will not
// process (422). Every other answer but a 2xx tells of the sink: down or
// overloaded (5xx, 408, 429), or configured wrongly (401, 403, 404, a
// redirect), which every event would meet alike.
func refuses(status int) bool {
	switch status {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType,
		http.StatusUnprocessableEntity, http.StatusRequestHeaderFieldsTooLarge:
		return true
	}
	return false
}

// The headers of a signed delivery (Standard Webhooks,
// https://www.standardwebhooks.com).
const (
	HeaderWebhookID        = "webhook-id"
	HeaderWebhookTimestamp = "webhook-timestamp"
	HeaderWebhookSignature = "webhook-signature"
)

// sign sets on h the Standard Webhooks signature of a delivery of event id
// with body, made at: the id, the time in unix seconds, and v1, the
// HMAC-SHA256 under key of id.timestamp.body, in base64. The receiver
// checks it with the same key and refuses a timestamp far from its clock,
// so that a delivery captured on its way cannot be replayed later.
func sign(h http.Header, key []byte, id string, at time.Time, body []byte) {
	timestamp := strconv.FormatInt(at.Unix(), 10)
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + timestamp + "."))
	mac.Write(body)
	h.Set(HeaderWebhookID, id)
	h.Set(HeaderWebhookTimestamp, timestamp)
	h.Set(HeaderWebhookSignature, "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
}

// Sender delivers events over HTTP.
type Sender struct {
	client *http.Client
}

// NewSender sends each event within timeout. It follows no redirect: an
// event goes only where the sink's URL says, and a redirect is not an
// acknowledgement.
func NewSender(timeout time.Duration) *Sender {
	return &Sender{client: &http.Client{Timeout: timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// Send delivers d to sink once, signed when the sink has a signing key;
// nil means the sink acknowledged it (a 2xx). An error wrapping ErrRefused
// is the sink's refusal of this event alone; any other is the sink's
// failure. No error shows the sink's URL, which may carry a token.
func (s *Sender) Send(ctx context.Context, sink Sink, d Delivery) error {
	signed := len(sink.SigningKey) > 0
	body := d.Body
	if signed {
		body = d.Structured
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, sink.URL, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("sink %s: cannot make a request of its URL", sink.Name)
	}
	if signed {
		req.Header.Set("Content-Type", structuredContentType)
		// The receiver's clock judges the timestamp: the real time, not the
		// manager's clock.
		sign(req.Header, sink.SigningKey, d.ID, time.Now(), body)
	} else {
		maps.Copy(req.Header, d.Header)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		var urlErr *url.Error
		if errors.As(err, &urlErr) {
			err = urlErr.Err
		}
		return fmt.Errorf("sink %s did not acknowledge event %s: %w", sink.Name, d.ID, err)
	}
	defer func() { _ = resp.Body.Close() }()
	// Read so that the connection is reused, within bounds.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxAnswer))
	switch status := resp.StatusCode; {
	case status >= 200 && status < 300:
		return nil
	case refuses(status):
		return fmt.Errorf("sink %s refused event %s: %s: %w", sink.Name, d.ID, resp.Status, ErrRefused)
	case status >= 300 && status < 400:
		return fmt.Errorf("sink %s did not acknowledge event %s: %s: a redirect is not followed; configure the sink with the URL it redirects to",
			sink.Name, d.ID, resp.Status)
	}
	return fmt.Errorf("sink %s did not acknowledge event %s: %s", sink.Name, d.ID, resp.Status)
}

// maxAnswer bounds what is read of a sink's answer.
const maxAnswer = 64 << 10
