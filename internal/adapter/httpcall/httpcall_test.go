package httpcall

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	neturl "net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/pkg/adapter"
)

const (
	namespace = "shop"
	testKey   = "shop/order-1"
)

// ---------------------------------------------------------------------------
// Fixtures

func newTransport(t *testing.T) *http.Transport {
	t.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

func newTool(url string, configure ...func(*v1alpha1.HTTPAdapter)) *v1alpha1.Tool {
	tool := &v1alpha1.Tool{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "payments-charge"},
		Spec: v1alpha1.ToolSpec{
			Operation:        "payments.charge",
			Version:          "v1",
			IdempotencyClass: v1alpha1.KeyProtected,
			HTTP:             &v1alpha1.HTTPAdapter{URL: url},
		},
	}
	for _, c := range configure {
		c(tool.Spec.HTTP)
	}
	return tool
}

// secret is a Secret named "stripe", the name every test Tool refers to,
// labelled for Tools.
func secret(ns string, data map[string]string) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "stripe", Labels: map[string]string{v1alpha1.ToolCredentialLabel: "true"}},
		Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

func newConnector(t *testing.T, transport http.RoundTripper, objs ...client.Object) *Connector {
	t.Helper()
	if transport == nil {
		transport = newTransport(t)
	}
	return &Connector{Secrets: fake.NewClientBuilder().WithObjects(objs...).Build(), Transport: transport}
}

func connect(t *testing.T, tool *v1alpha1.Tool, transport http.RoundTripper, objs ...client.Object) adapter.Executor {
	t.Helper()
	conn, err := newConnector(t, transport, objs...).Connect(t.Context(), tool)
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	return conn.Executor
}

func request(params string) adapter.Request {
	return adapter.Request{IdempotencyKey: testKey, Parameters: json.RawMessage(params)}
}

// recorded is what a test server saw of one request.
type recorded struct {
	Method        string
	RequestURI    string
	RawPath       string
	Header        http.Header
	ContentLength int64
	Body          string
}

// server is an httptest server that records every request before handing
// it to the test's handler.
type server struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []recorded
}

func newServer(t *testing.T, handle func(w http.ResponseWriter, r *http.Request)) *server {
	t.Helper()
	s := &server{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.reqs = append(s.reqs, recorded{
			Method:        r.Method,
			RequestURI:    r.RequestURI,
			RawPath:       r.URL.RawPath,
			Header:        r.Header.Clone(),
			ContentLength: r.ContentLength,
			Body:          string(body),
		})
		s.mu.Unlock()
		if handle != nil {
			handle(w, r)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *server) requests() []recorded {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]recorded(nil), s.reqs...)
}

func (s *server) only(t *testing.T) recorded {
	t.Helper()
	reqs := s.requests()
	if len(reqs) != 1 {
		t.Fatalf("server received %d requests, want exactly 1", len(reqs))
	}
	return reqs[0]
}

func respond(status int, body string, header ...string) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, _ *http.Request) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

// errSummary is an adapter error's type and fields, without its cause.
type errSummary struct {
	Type       string
	Kind       adapter.PermanentKind
	Reason     string
	RetryAfter time.Duration
}

func summarize(err error) errSummary {
	var (
		permanent *adapter.PermanentError
		retryable *adapter.RetryableError
		ambiguous *adapter.AmbiguousError
	)
	switch {
	case err == nil:
		return errSummary{}
	case errors.As(err, &permanent):
		return errSummary{Type: "Permanent", Kind: permanent.Kind, Reason: permanent.Reason}
	case errors.As(err, &retryable):
		return errSummary{Type: "Retryable", Reason: retryable.Reason, RetryAfter: retryable.RetryAfter}
	case errors.As(err, &ambiguous):
		return errSummary{Type: "Ambiguous", Reason: ambiguous.Reason}
	default:
		return errSummary{Type: fmt.Sprintf("untyped %T: %v", err, err)}
	}
}

func permanent(kind adapter.PermanentKind, reason string) errSummary {
	return errSummary{Type: "Permanent", Kind: kind, Reason: reason}
}

func retryable(reason string, after time.Duration) errSummary {
	return errSummary{Type: "Retryable", Reason: reason, RetryAfter: after}
}

func ambiguous(reason string) errSummary {
	return errSummary{Type: "Ambiguous", Reason: reason}
}

// ---------------------------------------------------------------------------
// 1. Request shape

func TestExecuteRequestShape(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		method     string
		params     json.RawMessage
		wantMethod string
		wantBody   string
	}{
		{
			name:       "default method is POST",
			params:     json.RawMessage(`{"amount":1200,"currency":"EUR","meta":{"order":"o-1"}}`),
			wantMethod: "POST",
			wantBody:   `{"amount":1200,"currency":"EUR","meta":{"order":"o-1"}}`,
		},
		{
			name:       "configured PUT",
			method:     "PUT",
			params:     json.RawMessage(`{"state":"shipped"}`),
			wantMethod: "PUT",
			wantBody:   `{"state":"shipped"}`,
		},
		{
			name:       "configured PATCH",
			method:     "PATCH",
			params:     json.RawMessage(`{"state":"shipped"}`),
			wantMethod: "PATCH",
			wantBody:   `{"state":"shipped"}`,
		},
		{
			name:       "empty parameters send an empty object",
			params:     json.RawMessage{},
			wantMethod: "POST",
			wantBody:   `{}`,
		},
		{
			name:       "nil parameters send an empty object",
			wantMethod: "POST",
			wantBody:   `{}`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t, respond(200, `{}`))
			ex := connect(t, newTool(srv.URL+"/v1/charges", func(h *v1alpha1.HTTPAdapter) { h.Method = tc.method }), nil)
			out, err := ex.Execute(t.Context(), adapter.Request{IdempotencyKey: testKey, Parameters: tc.params})
			if err != nil {
				t.Fatalf("Execute: %v", err)
			}
			if diff := cmp.Diff(adapter.Outcome{}, out); diff != "" {
				t.Errorf("outcome mismatch (-want +got):\n%s", diff)
			}
			got := srv.only(t)
			if got.Method != tc.wantMethod {
				t.Errorf("method = %s, want %s", got.Method, tc.wantMethod)
			}
			if got.RequestURI != "/v1/charges" {
				t.Errorf("request URI = %s, want /v1/charges", got.RequestURI)
			}
			if got.Body != tc.wantBody {
				t.Errorf("body = %s, want %s", got.Body, tc.wantBody)
			}
			if got.ContentLength != int64(len(tc.wantBody)) {
				t.Errorf("Content-Length = %d, want %d (a fixed-length body)", got.ContentLength, len(tc.wantBody))
			}
			wantHeaders := map[string][]string{
				"Content-Type":    {"application/json"},
				"Accept":          {"application/json"},
				"Idempotency-Key": {`"shop/order-1"`},
			}
			for name, want := range wantHeaders {
				if diff := cmp.Diff(want, got.Header.Values(name)); diff != "" {
					t.Errorf("header %s mismatch (-want +got):\n%s", name, diff)
				}
			}
			for _, name := range []string{"Authorization", RunIDHeader, StepIDHeader, ParentTaskIDHeader, TraceIDHeader, PrincipalsHeader} {
				if v, ok := got.Header[name]; ok {
					t.Errorf("unexpected header %s: %q", name, v)
				}
			}
		})
	}
}

func TestExecuteIdempotencyKeyIsQuoted(t *testing.T) {
	t.Parallel()
	long := v1alpha1.IdempotencyKey(namespace, strings.Repeat("a", 300))
	for _, key := range []string{testKey, "shop/a.b-c", long, `odd"key\`} {
		t.Run(key[:min(len(key), 20)], func(t *testing.T) {
			t.Parallel()
			srv := newServer(t, respond(200, ``))
			ex := connect(t, newTool(srv.URL), nil)
			if _, err := ex.Execute(t.Context(), adapter.Request{IdempotencyKey: key, Parameters: json.RawMessage(`{}`)}); err != nil {
				t.Fatalf("Execute: %v", err)
			}
			got := srv.only(t).Header.Values(IdempotencyKeyHeader)
			// Quoted, the key must fit the default limit of 255 characters.
			sent := v1alpha1.ShortenKey(key, 253)
			if diff := cmp.Diff([]string{strconv.Quote(sent)}, got); diff != "" {
				t.Errorf("Idempotency-Key mismatch (-want +got):\n%s", diff)
			}
			if len(got[0]) > 255 {
				t.Errorf("Idempotency-Key has %d characters, more than 255", len(got[0]))
			}
			if unquoted, err := strconv.Unquote(got[0]); err != nil || unquoted != sent {
				t.Errorf("Idempotency-Key %s does not unquote to the key: %q, %v", got[0], unquoted, err)
			}
		})
	}
}

func TestExecuteStaticHeaders(t *testing.T) {
	t.Parallel()
	srv := newServer(t, respond(200, ``))
	ex := connect(t, newTool(srv.URL, func(h *v1alpha1.HTTPAdapter) {
		h.Headers = []v1alpha1.HTTPHeader{
			{Name: "X-Tenant", Value: "shop"},
			{Name: "stripe-version", Value: "2024-06-20"},
			// The adapter's own headers win over static ones.
			{Name: "Idempotency-Key", Value: "static-key"},
			{Name: "Content-Type", Value: "text/plain"},
			{Name: "Accept", Value: "*/*"},
			// Validate refuses these; an executor never sends them, even
			// where the action has no value of its own.
			{Name: "toolledger-approved-by", Value: "ceo"},
			{Name: "Toolledger-Requested-By", Value: "ceo"},
			{Name: "Toolledger-Run-Id", Value: "run-static"},
			{Name: "Traceparent", Value: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		}
	}), nil)
	req := request(`{"a":1}`)
	req.RequestedBy = "alice"
	if _, err := ex.Execute(t.Context(), req); err != nil {
		t.Fatalf("Execute: %v", err)
	}
	got := srv.only(t).Header
	for name, want := range map[string][]string{
		"X-Tenant":                {"shop"},
		"Stripe-Version":          {"2024-06-20"},
		"Idempotency-Key":         {`"shop/order-1"`},
		"Content-Type":            {"application/json"},
		"Accept":                  {"application/json"},
		"Toolledger-Approved-By":  nil,
		"Toolledger-Requested-By": {"alice"},
		"Toolledger-Run-Id":       nil,
		"Traceparent":             nil,
	} {
		if diff := cmp.Diff(want, got.Values(name)); diff != "" {
			t.Errorf("header %s mismatch (-want +got):\n%s", name, diff)
		}
	}
}

func TestExecuteAuthHeaderFromSecret(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		headerName string
		value      string
		wantHeader string
		wantValue  string
	}{
		{name: "default name", value: "Bearer sk_test_123", wantHeader: "Authorization", wantValue: "Bearer sk_test_123"},
		{name: "custom name", headerName: "X-Api-Key", value: "k-123", wantHeader: "X-Api-Key", wantValue: "k-123"},
		{name: "surrounding whitespace trimmed", value: "  Bearer sk_test_123\n", wantHeader: "Authorization", wantValue: "Bearer sk_test_123"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t, respond(200, ``))
			tool := newTool(srv.URL, func(h *v1alpha1.HTTPAdapter) {
				h.AuthHeader = &v1alpha1.SecretHeader{
					Name:         tc.headerName,
					SecretKeyRef: v1alpha1.SecretKeySelector{Name: "stripe", Key: "token"},
				}
			})
			ex := connect(t, tool, nil,
				secret(namespace, map[string]string{"token": tc.value, "other": "x"}),
				secret("other-tenant", map[string]string{"token": "WRONG"}))
			if _, err := ex.Execute(t.Context(), request(`{}`)); err != nil {
				t.Fatalf("Execute: %v", err)
			}
			got := srv.only(t).Header
			if diff := cmp.Diff([]string{tc.wantValue}, got.Values(tc.wantHeader)); diff != "" {
				t.Errorf("header %s mismatch (-want +got):\n%s", tc.wantHeader, diff)
			}
			if tc.wantHeader != "Authorization" {
				if v, ok := got["Authorization"]; ok {
					t.Errorf("unexpected Authorization header %q", v)
				}
			}
		})
	}
}

func TestConnectSecretErrors(t *testing.T) {
	t.Parallel()
	tool := newTool("http://127.0.0.1:1/", func(h *v1alpha1.HTTPAdapter) {
		h.AuthHeader = &v1alpha1.SecretHeader{SecretKeyRef: v1alpha1.SecretKeySelector{Name: "stripe", Key: "token"}}
	})
	tests := []struct {
		name string
		objs []client.Object
		want string
	}{
		{
			name: "missing Secret",
			want: notUsable,
		},
		{
			name: "Secret only in another namespace",
			objs: []client.Object{secret("other-tenant", map[string]string{"token": "t"})},
			want: notUsable,
		},
		{
			name: "Secret without the label",
			objs: []client.Object{unlabelled(secret(namespace, map[string]string{"token": "t"}))},
			want: notUsable,
		},
		{
			name: "missing key",
			objs: []client.Object{secret(namespace, map[string]string{"api-key": "t"})},
			want: `Secret shop/stripe has no key "token"`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			conn, err := newConnector(t, nil, tc.objs...).Connect(t.Context(), tool)
			if err == nil {
				t.Fatal("Connect succeeded, want an error")
			}
			if conn.Executor != nil {
				t.Errorf("Connect returned executor %v with an error", conn.Executor)
			}
			if err.Error() != tc.want {
				t.Errorf("error = %q, want %q", err, tc.want)
			}
		})
	}
}

func unlabelled(s *corev1.Secret) *corev1.Secret {
	s.Labels = nil
	return s
}

func TestConnectDefaults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		timeout     *metav1.Duration
		wantTimeout time.Duration
	}{
		{name: "unset", wantTimeout: 10 * time.Second},
		{name: "zero", timeout: &metav1.Duration{}, wantTimeout: 10 * time.Second},
		{name: "negative", timeout: &metav1.Duration{Duration: -time.Second}, wantTimeout: 10 * time.Second},
		{name: "set", timeout: &metav1.Duration{Duration: 200 * time.Millisecond}, wantTimeout: 200 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ex := connect(t, newTool("http://127.0.0.1:1/", func(h *v1alpha1.HTTPAdapter) { h.Timeout = tc.timeout }), nil)
			e := ex.(*executor)
			if e.timeout != tc.wantTimeout {
				t.Errorf("timeout = %v, want %v", e.timeout, tc.wantTimeout)
			}
			if e.method != "POST" {
				t.Errorf("method = %q, want POST", e.method)
			}
			if e.lookup != nil {
				t.Errorf("lookup = %+v, want none", e.lookup)
			}
			wantKey := keyEncoding{in: v1alpha1.KeyInHeader, header: "Idempotency-Key", format: v1alpha1.KeyStructuredString, maxLength: 255}
			if e.key != wantKey || e.encoding != v1alpha1.EncodingJSON {
				t.Errorf("key = %+v, encoding = %q; want %+v and JSON", e.key, e.encoding, wantKey)
			}
		})
	}
}

func TestExecuteProvenanceHeaders(t *testing.T) {
	t.Parallel()
	all := []string{RunIDHeader, StepIDHeader, ParentTaskIDHeader, TraceIDHeader, PrincipalsHeader, "Traceparent"}
	tests := []struct {
		name        string
		provenance  *v1alpha1.Provenance
		traceparent string
		want        map[string]string
	}{
		{name: "nil", want: map[string]string{}},
		{name: "empty", provenance: &v1alpha1.Provenance{Principals: []string{}}, want: map[string]string{}},
		{
			name: "all set",
			provenance: &v1alpha1.Provenance{
				RunID:        "run-1",
				StepID:       "step-2",
				ParentTaskID: "task-3",
				TraceID:      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
				Principals:   []string{"user:alice@example.com", "agent:planner", "agent:payments"},
			},
			traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-b7ad6b7169203331-01",
			want: map[string]string{
				RunIDHeader:        "run-1",
				StepIDHeader:       "step-2",
				ParentTaskIDHeader: "task-3",
				TraceIDHeader:      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
				PrincipalsHeader:   "user:alice@example.com, agent:planner, agent:payments",
				// The attempt's span, a child of the agent's, continues
				// the trace downstream.
				"Traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-b7ad6b7169203331-01",
			},
		},
		{
			name:       "only some set",
			provenance: &v1alpha1.Provenance{RunID: "run-1", Principals: []string{"user:alice"}},
			want:       map[string]string{RunIDHeader: "run-1", PrincipalsHeader: "user:alice"},
		},
		{
			name:       "a traceparent only where the request has one",
			provenance: &v1alpha1.Provenance{TraceID: "t-1"},
			want:       map[string]string{TraceIDHeader: "t-1"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t, respond(200, ``))
			ex := connect(t, newTool(srv.URL), nil)
			req := request(`{"a":1}`)
			req.Provenance = tc.provenance
			req.Traceparent = tc.traceparent
			if _, err := ex.Execute(t.Context(), req); err != nil {
				t.Fatalf("Execute: %v", err)
			}
			header := srv.only(t).Header
			got := map[string]string{}
			for _, name := range all {
				values, ok := header[name]
				if !ok {
					continue
				}
				if len(values) != 1 {
					t.Errorf("header %s has %d values %q, want 1", name, len(values), values)
				}
				got[name] = values[0]
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("provenance headers mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// The verified identities go beside the claimed principals, each in its
// own header, and only when there is one.
func TestExecuteIdentityHeaders(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                    string
		requestedBy, approvedBy string
		want                    map[string]string
	}{
		{name: "unstamped", want: map[string]string{PrincipalsHeader: "user:alice"}},
		{name: "requested", requestedBy: "system:serviceaccount:shop:agent",
			want: map[string]string{PrincipalsHeader: "user:alice", RequestedByHeader: "system:serviceaccount:shop:agent"}},
		{name: "requested and approved", requestedBy: "alice", approvedBy: "bob",
			want: map[string]string{PrincipalsHeader: "user:alice", RequestedByHeader: "alice", ApprovedByHeader: "bob"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t, respond(200, ``))
			ex := connect(t, newTool(srv.URL), nil)
			req := request(`{"a":1}`)
			req.Provenance = &v1alpha1.Provenance{Principals: []string{"user:alice"}}
			req.RequestedBy, req.ApprovedBy = tc.requestedBy, tc.approvedBy
			if _, err := ex.Execute(t.Context(), req); err != nil {
				t.Fatalf("Execute: %v", err)
			}
			header := srv.only(t).Header
			got := map[string]string{}
			for _, name := range []string{PrincipalsHeader, RequestedByHeader, ApprovedByHeader} {
				if v := header.Get(name); v != "" {
					got[name] = v
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("identity headers mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// A header value net/http refuses to send can never be sent, so it is a
// permanent error, not a retryable one, and nothing reaches the server.
func TestExecuteInvalidHeaderValueIsPermanent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		provenance *v1alpha1.Provenance
		authValue  string
		wantHeader string
	}{
		{name: "provenance with CRLF", provenance: &v1alpha1.Provenance{RunID: "run-1\r\nX-Injected: yes"}, wantHeader: RunIDHeader},
		{name: "principal with NUL", provenance: &v1alpha1.Provenance{Principals: []string{"alice\x00"}}, wantHeader: PrincipalsHeader},
		{name: "secret with inner newline", authValue: "Bearer sk_secret\nsecond-line", wantHeader: "Authorization"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t, respond(200, ``))
			tool := newTool(srv.URL)
			var objs []client.Object
			if tc.authValue != "" {
				tool.Spec.HTTP.AuthHeader = &v1alpha1.SecretHeader{SecretKeyRef: v1alpha1.SecretKeySelector{Name: "stripe", Key: "token"}}
				objs = append(objs, secret(namespace, map[string]string{"token": tc.authValue}))
			}
			ex := connect(t, tool, nil, objs...)
			req := request(`{}`)
			req.Provenance = tc.provenance
			_, err := ex.Execute(t.Context(), req)
			if diff := cmp.Diff(permanent(adapter.InvalidInput, "InvalidRequest"), summarize(err)); diff != "" {
				t.Errorf("error mismatch (-want +got):\n%s", diff)
			}
			if err != nil {
				if !strings.Contains(err.Error(), tc.wantHeader) {
					t.Errorf("error %q does not name header %s", err, tc.wantHeader)
				}
				if strings.Contains(err.Error(), "sk_secret") {
					t.Errorf("error %q leaks the header value", err)
				}
			}
			if n := len(srv.requests()); n != 0 {
				t.Errorf("server received %d requests, want 0", n)
			}
		})
	}
}

// The executor is shared by concurrent reconciles; requests must not bleed
// into each other.
func TestExecuteConcurrent(t *testing.T) {
	t.Parallel()
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		key, _ := strconv.Unquote(r.Header.Get(IdempotencyKeyHeader))
		_, _ = fmt.Fprintf(w, `{"id":%q,"run":%q}`, key, r.Header.Get(RunIDHeader))
	})
	ex := connect(t, newTool(srv.URL, func(h *v1alpha1.HTTPAdapter) {
		h.Headers = []v1alpha1.HTTPHeader{{Name: "X-Tenant", Value: "shop"}}
		h.Response.ExternalIDPointer = "/id"
		h.Response.ResultPointers = []string{"/run"}
	}), nil)
	const n = 16
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			key := fmt.Sprintf("shop/order-%d", i)
			run := fmt.Sprintf("run-%d", i)
			out, err := ex.Execute(t.Context(), adapter.Request{
				IdempotencyKey: key,
				Parameters:     json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)),
				Provenance:     &v1alpha1.Provenance{RunID: run},
			})
			if err != nil {
				t.Errorf("Execute %d: %v", i, err)
				return
			}
			want := adapter.Outcome{ExternalRef: key, Result: json.RawMessage(fmt.Sprintf(`{"run":%q}`, run))}
			if diff := cmp.Diff(want, out); diff != "" {
				t.Errorf("Execute %d outcome mismatch (-want +got):\n%s", i, diff)
			}
		})
	}
	wg.Wait()
	reqs := srv.requests()
	if len(reqs) != n {
		t.Fatalf("server received %d requests, want %d", len(reqs), n)
	}
	for _, r := range reqs {
		key, _ := strconv.Unquote(r.Header.Get(IdempotencyKeyHeader))
		var i int
		if _, err := fmt.Sscanf(key, "shop/order-%d", &i); err != nil {
			t.Errorf("unexpected key %q", key)
			continue
		}
		if want := fmt.Sprintf(`{"i":%d}`, i); r.Body != want {
			t.Errorf("key %s carried body %s, want %s", key, r.Body, want)
		}
		if want := fmt.Sprintf("run-%d", i); r.Header.Get(RunIDHeader) != want {
			t.Errorf("key %s carried run %q, want %q", key, r.Header.Get(RunIDHeader), want)
		}
		if diff := cmp.Diff([]string{"shop"}, r.Header.Values("X-Tenant")); diff != "" {
			t.Errorf("X-Tenant mismatch (-want +got):\n%s", diff)
		}
	}
}

// ---------------------------------------------------------------------------
// 2. Classification of HTTP answers

func TestExecuteClassifiesStatus(t *testing.T) {
	t.Parallel()
	const body = `{"error":{"message":"nope"}}`
	type retryHeader int
	const (
		noRetryAfter retryHeader = iota
		retryAfterSeconds
		retryAfterDate
	)
	tests := []struct {
		code        int
		retryHeader retryHeader
		want        errSummary
		// For an HTTP-date Retry-After the exact value depends on the clock.
		minRetryAfter, maxRetryAfter time.Duration
	}{
		{code: 200},
		{code: 201},
		{code: 202},
		{code: 204},
		{code: 400, want: permanent(adapter.InvalidInput, "HTTP400")},
		{code: 422, want: permanent(adapter.InvalidInput, "HTTP422")},
		{code: 401, want: permanent(adapter.Denied, "HTTP401")},
		{code: 403, want: permanent(adapter.Denied, "HTTP403")},
		{code: 404, want: permanent(adapter.InvalidInput, "HTTP404")},
		{code: 405, want: permanent(adapter.InvalidInput, "HTTP405")},
		{code: 410, want: permanent(adapter.InvalidInput, "HTTP410")},
		{code: 413, want: permanent(adapter.InvalidInput, "HTTP413")},
		{code: 304, want: permanent(adapter.InvalidInput, "HTTP304")},
		// Retry-After is ignored outside the retryable codes.
		{code: 400, retryHeader: retryAfterSeconds, want: permanent(adapter.InvalidInput, "HTTP400")},
		{code: 408, want: retryable("HTTP408", 0)},
		{code: 408, retryHeader: retryAfterSeconds, want: retryable("HTTP408", 7*time.Second)},
		{code: 408, retryHeader: retryAfterDate, want: retryable("HTTP408", 0), minRetryAfter: 25 * time.Second, maxRetryAfter: 31 * time.Second},
		{code: 409, want: retryable("HTTP409", 0)},
		{code: 409, retryHeader: retryAfterSeconds, want: retryable("HTTP409", 7*time.Second)},
		{code: 409, retryHeader: retryAfterDate, want: retryable("HTTP409", 0), minRetryAfter: 25 * time.Second, maxRetryAfter: 31 * time.Second},
		{code: 429, want: retryable("HTTP429", 0)},
		{code: 429, retryHeader: retryAfterSeconds, want: retryable("HTTP429", 7*time.Second)},
		{code: 429, retryHeader: retryAfterDate, want: retryable("HTTP429", 0), minRetryAfter: 25 * time.Second, maxRetryAfter: 31 * time.Second},
		{code: 503, want: retryable("HTTP503", 0)},
		{code: 503, retryHeader: retryAfterSeconds, want: retryable("HTTP503", 7*time.Second)},
		{code: 503, retryHeader: retryAfterDate, want: retryable("HTTP503", 0), minRetryAfter: 25 * time.Second, maxRetryAfter: 31 * time.Second},
		{code: 500, want: ambiguous("HTTP500")},
		{code: 500, retryHeader: retryAfterSeconds, want: ambiguous("HTTP500")},
		{code: 501, want: permanent(adapter.InvalidInput, "HTTP501")}, // not implemented: nothing applied
		{code: 502, want: ambiguous("HTTP502")},
		{code: 504, want: ambiguous("HTTP504")},
		{code: 507, want: ambiguous("HTTP507")},
	}
	for _, tc := range tests {
		name := fmt.Sprintf("%d/%s", tc.code, [...]string{"no Retry-After", "Retry-After seconds", "Retry-After date"}[tc.retryHeader])
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t, func(w http.ResponseWriter, _ *http.Request) {
				switch tc.retryHeader {
				case retryAfterSeconds:
					w.Header().Set("Retry-After", "7")
				case retryAfterDate:
					w.Header().Set("Retry-After", time.Now().Add(30*time.Second).UTC().Format(http.TimeFormat))
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tc.code)
				_, _ = io.WriteString(w, body)
			})
			ex := connect(t, newTool(srv.URL), nil)
			out, err := ex.Execute(t.Context(), request(`{"amount":1200}`))

			got := summarize(err)
			if tc.minRetryAfter > 0 {
				if got.RetryAfter < tc.minRetryAfter || got.RetryAfter > tc.maxRetryAfter {
					t.Errorf("RetryAfter = %v, want between %v and %v", got.RetryAfter, tc.minRetryAfter, tc.maxRetryAfter)
				}
				got.RetryAfter = 0
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("error mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(adapter.Outcome{}, out); diff != "" {
				t.Errorf("outcome mismatch (-want +got):\n%s", diff)
			}
			if err != nil {
				// 304 has no body by definition; other bodies are
				// stored only as their size and hash.
				want := fmt.Sprintf("HTTP%d: downstream answered %d; body of 28 bytes, sha256:add03bc17a7edbd8, not stored", tc.code, tc.code)
				if tc.code == 304 {
					want = "HTTP304: downstream answered 304 with an empty body"
				}
				if err.Error() != want {
					t.Errorf("error message = %q, want %q", err.Error(), want)
				}
			}
			if n := len(srv.requests()); n != 1 {
				t.Errorf("server received %d requests, want 1", n)
			}
		})
	}
}

func TestExecuteDoesNotFollowRedirects(t *testing.T) {
	t.Parallel()
	for _, code := range []int{301, 302, 303, 307, 308} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			t.Parallel()
			target := newServer(t, respond(200, `{"id":"ch_elsewhere"}`))
			origin := newServer(t, respond(code, `moved`, "Location", target.URL+"/v1/charges"))
			ex := connect(t, newTool(origin.URL, func(h *v1alpha1.HTTPAdapter) { h.Response.ExternalIDPointer = "/id" }), nil)
			out, err := ex.Execute(t.Context(), request(`{"amount":1200}`))
			want := permanent(adapter.InvalidInput, "HTTP"+strconv.Itoa(code))
			if diff := cmp.Diff(want, summarize(err)); diff != "" {
				t.Errorf("error mismatch (-want +got):\n%s", diff)
			}
			if out.ExternalRef != "" {
				t.Errorf("ExternalRef = %q, want empty", out.ExternalRef)
			}
			if n := len(origin.requests()); n != 1 {
				t.Errorf("origin received %d requests, want 1", n)
			}
			if n := len(target.requests()); n != 0 {
				t.Errorf("redirect target received %d requests, want 0", n)
			}
		})
	}
}

// TestExecuteBodyOverTheReadLimit: what is longer than is read is only
// measured, stored or not; a success still succeeds, without its fields.
func TestExecuteBodyOverTheReadLimit(t *testing.T) {
	t.Parallel()
	huge := `{"id": "ch_1", "pad": "` + strings.Repeat("z", 10<<20) + `"}`
	for _, storeErrorBody := range []bool{false, true} {
		srv := newServer(t, respond(400, huge))
		_, err := connect(t, newTool(srv.URL, func(h *v1alpha1.HTTPAdapter) { h.Response.StoreErrorBody = storeErrorBody }), nil).Execute(t.Context(), request(`{}`))
		var perr *adapter.PermanentError
		if !errors.As(err, &perr) || perr.Err.Error() != "downstream answered 400; body of more than 1048576 bytes, not read further" {
			t.Errorf("storeErrorBody %t: error = %v, want the 400 measured only", storeErrorBody, err)
		}
	}
	srv := newServer(t, respond(201, huge))
	out, err := connect(t, newTool(srv.URL, func(h *v1alpha1.HTTPAdapter) { h.Response.ExternalIDPointer = "/id" }), nil).Execute(t.Context(), request(`{}`))
	if err != nil {
		t.Fatalf("Execute = %v, want a success: the request applied", err)
	}
	want := adapter.Outcome{Warnings: []string{"response exceeds 1048576 bytes; no external id or result recorded"}}
	if diff := cmp.Diff(want, out); diff != "" {
		t.Errorf("outcome mismatch (-want +got):\n%s", diff)
	}
}

func TestExecuteErrorBodyIsStoredOnlyWhenTheToolOptsIn(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		body string
		want string
	}{
		{name: "short", body: `{"error":"bad amount"}`, want: `{"error":"bad amount"}`},
		{name: "trimmed", body: "  \n bad amount \n", want: "bad amount"},
		{name: "empty", body: "", want: "(empty body)"},
		{name: "whitespace only", body: " \n\t", want: "(empty body)"},
		{name: "exactly 256 bytes", body: strings.Repeat("x", 256), want: strings.Repeat("x", 256)},
		{name: "257 bytes", body: strings.Repeat("x", 257), want: strings.Repeat("x", 256) + "…"},
		{name: "long", body: strings.Repeat("y", 5000), want: strings.Repeat("y", 256) + "…"},
		// 1 + 127*2 = 255 bytes of whole runes; the 128th é straddles the cut.
		{name: "cut inside a rune", body: "a" + strings.Repeat("é", 200), want: "a" + strings.Repeat("é", 127) + "…"},
		{name: "terminal escapes", body: "\x1b]0;owned\x07\x1b[2Jbad\r\namount", want: `\x1b]0;owned\a\x1b[2Jbad\r\namount`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t, respond(400, tc.body))
			stored := connect(t, newTool(srv.URL, func(h *v1alpha1.HTTPAdapter) { h.Response.StoreErrorBody = true }), nil)
			_, err := stored.Execute(t.Context(), request(`{}`))
			var perr *adapter.PermanentError
			if !errors.As(err, &perr) {
				t.Fatalf("error = %v (%T), want *PermanentError", err, err)
			}
			if want := "downstream answered 400: " + tc.want; perr.Err.Error() != want {
				t.Errorf("message = %q\nwant      %q", perr.Err.Error(), want)
			}

			_, err = connect(t, newTool(srv.URL), nil).Execute(t.Context(), request(`{}`))
			if !errors.As(err, &perr) {
				t.Fatalf("error = %v (%T), want *PermanentError", err, err)
			}
			sum := sha256.Sum256([]byte(tc.body))
			want := fmt.Sprintf("downstream answered 400; body of %d bytes, sha256:%s, not stored", len(tc.body), hex.EncodeToString(sum[:8]))
			if len(tc.body) == 0 {
				want = "downstream answered 400 with an empty body"
			}
			if perr.Err.Error() != want {
				t.Errorf("message without storeErrorBody = %q\nwant %q", perr.Err.Error(), want)
			}
		})
	}
}

// ---------------------------------------------------------------------------
// 3. Transport faults

// rawServer speaks HTTP/1.1 by hand so that tests can break a connection at
// a precise point.
type rawServer struct {
	addr     string
	requests atomic.Int32 // requests read in full, across all connections
	conns    atomic.Int32 // connections accepted
}

// newRawServer calls respond after each request has been read in full, with
// its sequence number across all connections (from 1). respond writes what
// it wants and returns whether to keep serving the connection.
func newRawServer(t *testing.T, respond func(seq int32, conn net.Conn) bool) *rawServer {
	t.Helper()
	ln := listen(t)
	s := &rawServer{addr: ln.Addr().String()}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		open []net.Conn
	)
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			s.conns.Add(1)
			mu.Lock()
			open = append(open, conn)
			mu.Unlock()
			wg.Go(func() {
				defer func() { _ = conn.Close() }()
				br := bufio.NewReader(conn)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					if _, err := io.Copy(io.Discard, req.Body); err != nil {
						return
					}
					if !respond(s.requests.Add(1), conn) {
						return
					}
				}
			})
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range open {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return s
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// refusedAddr returns a local address nothing listens on: the port was just
// free, and is closed again.
func refusedAddr(t *testing.T) string {
	t.Helper()
	ln := listen(t)
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

func (s *rawServer) url() string { return "http://" + s.addr + "/v1/charges" }

func answerOK(conn net.Conn) bool {
	const body = `{"id":"ch_1"}`
	_, err := fmt.Fprintf(conn, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	return err == nil
}

// closeWithoutAnswer drops the connection after the request was read.
func closeWithoutAnswer(net.Conn) bool { return false }

// hang never answers; it returns when the client gives up and closes.
func hang(conn net.Conn) bool {
	_, _ = io.Copy(io.Discard, conn)
	return false
}

// truncateBody promises 100 bytes, sends 10 and closes.
func truncateBody(conn net.Conn) bool {
	_, _ = io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"id\":\"ch_")
	return false
}

// stallBody promises 100 bytes, sends 10 and waits for the client to give up.
func stallBody(conn net.Conn) bool {
	_, _ = io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"id\":\"ch_")
	return hang(conn)
}

func TestExecuteTransportFaults(t *testing.T) {
	t.Parallel()
	const timeout = 200 * time.Millisecond
	faults := []struct {
		name  string
		fault func(net.Conn) bool
		want  errSummary
	}{
		{name: "connection closed after the request", fault: closeWithoutAnswer, want: ambiguous("ConnectionLost")},
		{name: "no answer before the timeout", fault: hang, want: ambiguous("Timeout")},
		{name: "response body cut short", fault: truncateBody, want: ambiguous("ResponseLost")},
		{name: "response body stalls past the timeout", fault: stallBody, want: ambiguous("ResponseLost")},
	}
	for _, f := range faults {
		for _, reused := range []bool{false, true} {
			name := f.name + "/fresh connection"
			if reused {
				name = f.name + "/reused keep-alive connection"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				srv := newRawServer(t, func(seq int32, conn net.Conn) bool {
					if reused && seq == 1 {
						return answerOK(conn)
					}
					return f.fault(conn)
				})
				ex := connect(t, newTool(srv.url(), func(h *v1alpha1.HTTPAdapter) {
					h.Timeout = &metav1.Duration{Duration: timeout}
					h.Response.ExternalIDPointer = "/id"
				}), nil)
				var before int32
				if reused {
					out, err := ex.Execute(t.Context(), adapter.Request{IdempotencyKey: "shop/order-0", Parameters: json.RawMessage(`{}`)})
					if err != nil || out.ExternalRef != "ch_1" {
						t.Fatalf("first Execute = %+v, %v; want ch_1", out, err)
					}
					before = 1
				}

				start := time.Now()
				out, err := ex.Execute(t.Context(), request(`{"amount":1200}`))
				elapsed := time.Since(start)

				if diff := cmp.Diff(f.want, summarize(err)); diff != "" {
					t.Errorf("error mismatch (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff(adapter.Outcome{}, out); diff != "" {
					t.Errorf("outcome mismatch (-want +got):\n%s", diff)
				}
				if n := srv.requests.Load() - before; n != 1 {
					t.Errorf("server received %d requests for the attempt, want exactly 1", n)
				}
				if n := srv.conns.Load(); n != 1 {
					t.Errorf("server accepted %d connections, want 1", n)
				}
				if f.want.Reason == "Timeout" && (elapsed < timeout || elapsed > 5*time.Second) {
					t.Errorf("Execute took %v, want about the %v timeout", elapsed, timeout)
				}
			})
		}
	}
}

func TestExecuteResponseLostWrapsCause(t *testing.T) {
	t.Parallel()
	srv := newRawServer(t, func(_ int32, conn net.Conn) bool { return truncateBody(conn) })
	ex := connect(t, newTool(srv.url()), nil)
	_, err := ex.Execute(t.Context(), request(`{}`))
	var aerr *adapter.AmbiguousError
	if !errors.As(err, &aerr) || aerr.Reason != "ResponseLost" {
		t.Fatalf("error = %v, want AmbiguousError ResponseLost", err)
	}
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("error %v does not wrap io.ErrUnexpectedEOF", err)
	}
}

// countingTransport counts dial attempts, to show that a failed connection is
// not transparently retried.
func countingTransport(t *testing.T) (*http.Transport, *atomic.Int32) {
	tr := newTransport(t)
	var dials atomic.Int32
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return dialer.DialContext(ctx, network, addr)
	}
	return tr, &dials
}

func TestExecuteConnectionRefused(t *testing.T) {
	t.Parallel()
	addr := refusedAddr(t)
	tr, dials := countingTransport(t)
	ex := connect(t, newTool("http://"+addr+"/v1/charges"), tr)
	out, err := ex.Execute(t.Context(), request(`{"amount":1200}`))
	if diff := cmp.Diff(retryable("RequestNotSent", 0), summarize(err)); diff != "" {
		t.Errorf("error mismatch (-want +got):\n%s", diff)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("error %v does not wrap ECONNREFUSED", err)
	}
	if diff := cmp.Diff(adapter.Outcome{}, out); diff != "" {
		t.Errorf("outcome mismatch (-want +got):\n%s", diff)
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("dialed %d times, want 1", n)
	}
}

func TestExecuteCanceledContextSendsNothing(t *testing.T) {
	t.Parallel()
	srv := newServer(t, respond(200, ``))
	ex := connect(t, newTool(srv.URL), nil)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := ex.Execute(ctx, request(`{}`))
	if diff := cmp.Diff(retryable("RequestNotSent", 0), summarize(err)); diff != "" {
		t.Errorf("error mismatch (-want +got):\n%s", diff)
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v does not wrap context.Canceled", err)
	}
	if n := len(srv.requests()); n != 0 {
		t.Errorf("server received %d requests, want 0", n)
	}
}

func TestExecuteInvalidURLIsPermanent(t *testing.T) {
	t.Parallel()
	ex := connect(t, newTool("http://127.0.0.1:1/%zz"), nil)
	_, err := ex.Execute(t.Context(), request(`{}`))
	if diff := cmp.Diff(permanent(adapter.InvalidInput, "InvalidRequest"), summarize(err)); diff != "" {
		t.Errorf("error mismatch (-want +got):\n%s", diff)
	}
}

func TestClassifyTransportError(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	alert := func(words string) error { return &net.OpError{Op: "remote error", Err: errors.New(words)} }
	tests := []struct {
		name    string
		cause   error
		written bool
		ctxErr  error
		want    errSummary
	}{
		{name: "not written", want: retryable("RequestNotSent", 0)},
		// A TLS 1.3 server refuses a client certificate after the request went out.
		{name: "written, then the handshake refused", cause: alert("tls: certificate required"), written: true, want: retryable("RequestNotSent", 0)},
		{name: "written, then an unknown CA", cause: alert("tls: unknown certificate authority"), written: true, want: retryable("RequestNotSent", 0)},
		{name: "written, then an alert that may follow a read request", cause: alert("tls: internal error"), written: true, want: ambiguous("ConnectionLost")},
		{name: "not written, deadline", ctxErr: context.DeadlineExceeded, want: retryable("RequestNotSent", 0)},
		{name: "written", written: true, want: ambiguous("ConnectionLost")},
		{name: "written, deadline", written: true, ctxErr: context.DeadlineExceeded, want: ambiguous("Timeout")},
		{name: "written, canceled", written: true, ctxErr: context.Canceled, want: ambiguous("ConnectionLost")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cause := tc.cause
			if cause == nil {
				cause = boom
			}
			err := adapter.TransportError(cause, tc.written, tc.ctxErr)
			if diff := cmp.Diff(tc.want, summarize(err)); diff != "" {
				t.Errorf("mismatch (-want +got):\n%s", diff)
			}
			if !errors.Is(err, cause) {
				t.Errorf("%v does not wrap the cause", err)
			}
		})
	}
}

// ---------------------------------------------------------------------------
// 4. Outcome extraction

func TestExecuteOutcome(t *testing.T) {
	t.Parallel()
	const charge = `{
		"id": "ch_1",
		"status": "succeeded",
		"amount": 1200,
		"secret": "sk_live_do_not_store",
		"card": {"last4": "4242", "number": "4242424242424242"}
	}`
	bigBlob := func(n int) string { return fmt.Sprintf(`{"id":"ch_1","blob":%q}`, strings.Repeat("b", n)) }
	tests := []struct {
		name     string
		status   int
		body     string
		response v1alpha1.HTTPResponse
		want     adapter.Outcome
	}{
		{
			name:     "string id",
			body:     charge,
			response: v1alpha1.HTTPResponse{ExternalIDPointer: "/id"},
			want:     adapter.Outcome{ExternalRef: "ch_1"},
		},
		{
			name:     "numeric id",
			body:     `{"id": 12345}`,
			response: v1alpha1.HTTPResponse{ExternalIDPointer: "/id"},
			want:     adapter.Outcome{ExternalRef: "12345"},
		},
		{
			name:     "numeric id beyond 2^53 keeps every digit",
			body:     `{"id": 9007199254740993}`,
			response: v1alpha1.HTTPResponse{ExternalIDPointer: "/id"},
			want:     adapter.Outcome{ExternalRef: "9007199254740993"},
		},
		{
			name:     "nested id with escaped slash",
			body:     `{"data": {"charge/id": "ch_2", "charge": {"id": "WRONG"}}}`,
			response: v1alpha1.HTTPResponse{ExternalIDPointer: "/data/charge~1id"},
			want:     adapter.Outcome{ExternalRef: "ch_2"},
		},
		{
			name:     "nested id with escaped tilde and space",
			body:     `{"data": {"charge ~id": "ch_3"}}`,
			response: v1alpha1.HTTPResponse{ExternalIDPointer: "/data/charge ~0id"},
			want:     adapter.Outcome{ExternalRef: "ch_3"},
		},
		{
			name:     "id inside an array",
			body:     `{"charges": [{"id": "ch_a"}, {"id": "ch_b"}]}`,
			response: v1alpha1.HTTPResponse{ExternalIDPointer: "/charges/1/id"},
			want:     adapter.Outcome{ExternalRef: "ch_b"},
		},
		{
			name:     "missing id is a success with a warning",
			status:   201,
			body:     `{"status": "succeeded"}`,
			response: v1alpha1.HTTPResponse{ExternalIDPointer: "/id"},
			want:     adapter.Outcome{Warnings: []string{"response has no external id at /id"}},
		},
		{
			name:     "id of the wrong type",
			body:     `{"id": {"value": "ch_1"}}`,
			response: v1alpha1.HTTPResponse{ExternalIDPointer: "/id"},
			want:     adapter.Outcome{Warnings: []string{"external id at /id is not a string or number"}},
		},
		{
			name:     "null id",
			body:     `{"id": null}`,
			response: v1alpha1.HTTPResponse{ExternalIDPointer: "/id"},
			want:     adapter.Outcome{Warnings: []string{"external id at /id is not a string or number"}},
		},
		{
			name:     "result keeps only the allowed fields",
			body:     charge,
			response: v1alpha1.HTTPResponse{ExternalIDPointer: "/id", ResultPointers: []string{"/status", "/amount", "/card/last4"}},
			want: adapter.Outcome{
				ExternalRef: "ch_1",
				Result:      json.RawMessage(`{"amount":1200,"card":{"last4":"4242"},"status":"succeeded"}`),
			},
		},
		{
			name:     "result numbers keep their digits",
			body:     `{"amount": 12345678901234567890, "rate": 0.10}`,
			response: v1alpha1.HTTPResponse{ResultPointers: []string{"/amount", "/rate"}},
			want:     adapter.Outcome{Result: json.RawMessage(`{"amount":12345678901234567890,"rate":0.10}`)},
		},
		{
			name:     "result with a missing field",
			body:     charge,
			response: v1alpha1.HTTPResponse{ResultPointers: []string{"/status", "/receipt_url"}},
			want: adapter.Outcome{
				Result:   json.RawMessage(`{"status":"succeeded"}`),
				Warnings: []string{"response has no result field at /receipt_url"},
			},
		},
		{
			name:     "result with no field found",
			body:     charge,
			response: v1alpha1.HTTPResponse{ExternalIDPointer: "/nope", ResultPointers: []string{"/receipt_url"}},
			want: adapter.Outcome{Warnings: []string{
				"response has no external id at /nope",
				"response has no result field at /receipt_url",
			}},
		},
		{
			name:     "result of exactly 8 KiB is stored",
			body:     bigBlob(8192 - len(`{"blob":""}`)),
			response: v1alpha1.HTTPResponse{ExternalIDPointer: "/id", ResultPointers: []string{"/blob"}},
			want: adapter.Outcome{
				ExternalRef: "ch_1",
				Result:      json.RawMessage(fmt.Sprintf(`{"blob":%q}`, strings.Repeat("b", 8192-len(`{"blob":""}`)))),
			},
		},
		{
			name:     "result over 8 KiB is dropped with a warning",
			body:     bigBlob(8193 - len(`{"blob":""}`)),
			response: v1alpha1.HTTPResponse{ExternalIDPointer: "/id", ResultPointers: []string{"/blob"}},
			want: adapter.Outcome{
				ExternalRef: "ch_1",
				Warnings:    []string{"result of 8193 bytes exceeds 8192 bytes; not stored"},
			},
		},
		{
			name:     "much larger result",
			body:     bigBlob(100 << 10),
			response: v1alpha1.HTTPResponse{ResultPointers: []string{"/blob"}},
			want:     adapter.Outcome{Warnings: []string{fmt.Sprintf("result of %d bytes exceeds 8192 bytes; not stored", (100<<10)+len(`{"blob":""}`))}},
		},
		{
			name:     "non-JSON body with pointers",
			body:     `<html>ok</html>`,
			response: v1alpha1.HTTPResponse{ExternalIDPointer: "/id", ResultPointers: []string{"/status"}},
			want:     adapter.Outcome{Warnings: []string{"response is not JSON; no external id or result recorded"}},
		},
		{
			name:     "JSON followed by garbage is not JSON",
			body:     `{"id":"ch_1"} trailing`,
			response: v1alpha1.HTTPResponse{ExternalIDPointer: "/id"},
			want:     adapter.Outcome{Warnings: []string{"response is not JSON; no external id or result recorded"}},
		},
		{
			name:     "two JSON documents are not JSON",
			body:     `{"id":"ch_1"}{"id":"ch_2"}`,
			response: v1alpha1.HTTPResponse{ExternalIDPointer: "/id"},
			want:     adapter.Outcome{Warnings: []string{"response is not JSON; no external id or result recorded"}},
		},
		{
			name:     "trailing whitespace is fine",
			body:     "{\"id\":\"ch_1\"}\n\n",
			response: v1alpha1.HTTPResponse{ExternalIDPointer: "/id"},
			want:     adapter.Outcome{ExternalRef: "ch_1"},
		},
		{
			name:     "204 with pointers",
			status:   204,
			response: v1alpha1.HTTPResponse{ExternalIDPointer: "/id"},
			want:     adapter.Outcome{Warnings: []string{"response is not JSON; no external id or result recorded"}},
		},
		{
			name: "no pointers: empty outcome",
			body: charge,
			want: adapter.Outcome{},
		},
		{
			name: "no pointers, non-JSON body: empty outcome",
			body: `not json`,
			want: adapter.Outcome{},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			status := tc.status
			if status == 0 {
				status = 200
			}
			srv := newServer(t, respond(status, tc.body, "Content-Type", "application/json"))
			ex := connect(t, newTool(srv.URL, func(h *v1alpha1.HTTPAdapter) { h.Response = tc.response }), nil)
			out, err := ex.Execute(t.Context(), request(`{"amount":1200}`))
			if err != nil {
				t.Fatalf("Execute: %v", err)
			}
			if diff := cmp.Diff(tc.want, out); diff != "" {
				t.Errorf("outcome mismatch (-want +got):\n%s", diff)
			}
			if strings.Contains(string(out.Result), "sk_live") || strings.Contains(string(out.Result), "4242424242424242") {
				t.Errorf("result %s contains fields that were not allowed", out.Result)
			}
			if n := len(srv.requests()); n != 1 {
				t.Errorf("server received %d requests, want 1", n)
			}
		})
	}
}

// ---------------------------------------------------------------------------
// 5. Lookup

func TestLookupUnsupported(t *testing.T) {
	t.Parallel()
	srv := newServer(t, respond(200, `{"id":"ch_1"}`))
	ex := connect(t, newTool(srv.URL), nil)
	out, err := ex.Lookup(t.Context(), adapter.Request{IdempotencyKey: testKey})
	if !errors.Is(err, adapter.ErrLookupUnsupported) {
		t.Errorf("Lookup error = %v, want ErrLookupUnsupported", err)
	}
	if diff := cmp.Diff(adapter.Outcome{}, out); diff != "" {
		t.Errorf("outcome mismatch (-want +got):\n%s", diff)
	}
	if n := len(srv.requests()); n != 0 {
		t.Errorf("server received %d requests, want 0", n)
	}
}

func lookupTool(executeURL, lookupURL string) *v1alpha1.Tool {
	return newTool(executeURL, func(h *v1alpha1.HTTPAdapter) {
		h.Headers = []v1alpha1.HTTPHeader{{Name: "X-Tenant", Value: "shop"}}
		h.AuthHeader = &v1alpha1.SecretHeader{SecretKeyRef: v1alpha1.SecretKeySelector{Name: "stripe", Key: "token"}}
		h.Timeout = &metav1.Duration{Duration: 2 * time.Second}
		h.Lookup = &v1alpha1.HTTPLookup{URL: lookupURL}
		h.Response = v1alpha1.HTTPResponse{ExternalIDPointer: "/id", ResultPointers: []string{"/status"}}
	})
}

// stripeSecret is fresh per call: the fake client writes to the objects it is given.
func stripeSecret() *corev1.Secret {
	return secret(namespace, map[string]string{"token": "Bearer sk_test_123"})
}

func TestLookupFound(t *testing.T) {
	t.Parallel()
	execute := newServer(t, respond(500, ``))
	lookup := newServer(t, respond(200, `{"id":"ch_1","status":"succeeded","secret":"sk_live_x"}`, "Content-Type", "application/json"))
	ex := connect(t, lookupTool(execute.URL, lookup.URL+"/v1/charges/by-key/{key}"), nil, stripeSecret())

	// The lookup's span continues downstream, as an attempt's does.
	traceparent := "00-4bf92f3577b34da6a3ce929d0e0e4736-b7ad6b7169203331-01"
	out, err := ex.Lookup(t.Context(), adapter.Request{IdempotencyKey: testKey, Traceparent: traceparent})
	if err != nil {
		t.Fatalf("Lookup: %v", err)
	}
	want := adapter.Outcome{ExternalRef: "ch_1", Result: json.RawMessage(`{"status":"succeeded"}`)}
	if diff := cmp.Diff(want, out); diff != "" {
		t.Errorf("outcome mismatch (-want +got):\n%s", diff)
	}

	got := lookup.only(t)
	if got.Method != http.MethodGet {
		t.Errorf("method = %s, want GET", got.Method)
	}
	if got.RequestURI != "/v1/charges/by-key/shop%2Forder-1" {
		t.Errorf("request URI = %s, want the path-escaped key", got.RequestURI)
	}
	if got.RawPath != "/v1/charges/by-key/shop%2Forder-1" {
		t.Errorf("raw path = %s, want the path-escaped key", got.RawPath)
	}
	if got.Body != "" {
		t.Errorf("body = %q, want none", got.Body)
	}
	for name, want := range map[string][]string{
		"Idempotency-Key": {`"shop/order-1"`},
		"Accept":          {"application/json"},
		"Authorization":   {"Bearer sk_test_123"},
		"X-Tenant":        {"shop"},
		"Traceparent":     {traceparent},
	} {
		if diff := cmp.Diff(want, got.Header.Values(name)); diff != "" {
			t.Errorf("header %s mismatch (-want +got):\n%s", name, diff)
		}
	}
	if n := len(execute.requests()); n != 0 {
		t.Errorf("execute endpoint received %d requests during lookup, want 0", n)
	}
}

func TestLookupKeyInQuery(t *testing.T) {
	t.Parallel()
	lookup := newServer(t, respond(200, `{"id":"ch_1"}`, "Content-Type", "application/json"))
	ex := connect(t, lookupTool("http://127.0.0.1:1/", lookup.URL+"/v1/charges?key={key}"), nil, stripeSecret())
	out, err := ex.Lookup(t.Context(), adapter.Request{IdempotencyKey: testKey})
	if err != nil {
		t.Fatalf("Lookup: %v", err)
	}
	if out.ExternalRef != "ch_1" {
		t.Errorf("ExternalRef = %q, want ch_1", out.ExternalRef)
	}
	uri := lookup.only(t).RequestURI
	if uri != "/v1/charges?key=shop%2Forder-1" {
		t.Errorf("request URI = %s", uri)
	}
	if u, err := neturl.ParseRequestURI(uri); err != nil || u.Query().Get("key") != testKey {
		t.Errorf("query key of %s does not decode to %q (%v)", uri, testKey, err)
	}
}

func TestLookupFoundWithWarnings(t *testing.T) {
	t.Parallel()
	lookup := newServer(t, respond(200, `{"id":"ch_1","state":"done"}`, "Content-Type", "application/json"))
	ex := connect(t, lookupTool("http://127.0.0.1:1/", lookup.URL+"/{key}"), nil, stripeSecret())
	out, err := ex.Lookup(t.Context(), adapter.Request{IdempotencyKey: testKey})
	if err != nil {
		t.Fatalf("Lookup: %v", err)
	}
	want := adapter.Outcome{ExternalRef: "ch_1", Warnings: []string{"response has no result field at /status"}}
	if diff := cmp.Diff(want, out); diff != "" {
		t.Errorf("outcome mismatch (-want +got):\n%s", diff)
	}
}

func TestLookupNotFound(t *testing.T) {
	t.Parallel()
	lookup := newServer(t, respond(404, `{"error":"no such key"}`))
	tool := lookupTool("http://127.0.0.1:1/", lookup.URL+"/v1/charges/by-key/{key}")
	tool.Spec.HTTP.Lookup.NotFoundMeansAbsent = true
	ex := connect(t, tool, nil, stripeSecret())
	out, err := ex.Lookup(t.Context(), adapter.Request{IdempotencyKey: testKey})
	if !errors.Is(err, adapter.ErrNotFound) {
		t.Errorf("Lookup error = %v, want ErrNotFound", err)
	}
	if diff := cmp.Diff(adapter.Outcome{}, out); diff != "" {
		t.Errorf("outcome mismatch (-want +got):\n%s", diff)
	}
	if n := len(lookup.requests()); n != 1 {
		t.Errorf("lookup received %d requests, want 1", n)
	}
}

func TestLookupFailures(t *testing.T) {
	t.Parallel()
	refused := func(t *testing.T) string { return "http://" + refusedAddr(t) + "/{key}" }
	tests := []struct {
		name    string
		handler func(http.ResponseWriter, *http.Request)
		url     func(t *testing.T) string
		raw     func(int32, net.Conn) bool
		wantMsg string
	}{
		{name: "503", handler: respond(503, `busy`, "Retry-After", "7"), wantMsg: "lookup answered 503"},
		{name: "500", handler: respond(500, `oops`), wantMsg: "lookup answered 500"},
		{name: "410", handler: respond(410, ``), wantMsg: "lookup answered 410"},
		{name: "400", handler: respond(400, `bad key`), wantMsg: "lookup answered 400"},
		{name: "302 is not followed", handler: respond(302, ``, "Location", "/elsewhere"), wantMsg: "lookup answered 302"},
		{name: "connection refused", url: refused, wantMsg: "lookup failed: "},
		{name: "timeout", raw: func(_ int32, c net.Conn) bool { return hang(c) }, wantMsg: "lookup failed: "},
		{name: "body cut short", raw: func(_ int32, c net.Conn) bool { return truncateBody(c) }, wantMsg: "lookup response lost: "},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var (
				url   string
				count func() int
			)
			switch {
			case tc.handler != nil:
				srv := newServer(t, tc.handler)
				url, count = srv.URL+"/{key}", func() int { return len(srv.requests()) }
			case tc.raw != nil:
				srv := newRawServer(t, tc.raw)
				url, count = "http://"+srv.addr+"/{key}", func() int { return int(srv.requests.Load()) }
			default:
				url = tc.url(t) // nothing listens; nothing to count
			}
			tool := lookupTool("http://127.0.0.1:1/", url)
			tool.Spec.HTTP.Timeout = &metav1.Duration{Duration: 200 * time.Millisecond}
			ex := connect(t, tool, nil, stripeSecret())
			out, err := ex.Lookup(t.Context(), adapter.Request{IdempotencyKey: testKey})
			if err == nil {
				t.Fatalf("Lookup succeeded with %+v, want an error", out)
			}
			if errors.Is(err, adapter.ErrNotFound) || errors.Is(err, adapter.ErrLookupUnsupported) {
				t.Errorf("Lookup error = %v, must not be ErrNotFound or ErrLookupUnsupported", err)
			}
			if !strings.HasPrefix(err.Error(), tc.wantMsg) {
				t.Errorf("Lookup error = %q, want prefix %q", err, tc.wantMsg)
			}
			if count == nil {
				return
			}
			if n := count(); n != 1 {
				t.Errorf("lookup server received %d requests, want 1", n)
			}
		})
	}
}

// ---------------------------------------------------------------------------
// 7. Retry-After

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		value string
		want  time.Duration
	}{
		{"", 0},
		{"0", 0},
		{"7", 7 * time.Second},
		{" 7 ", 7 * time.Second},
		{"120", 2 * time.Minute},
		{"86400", 24 * time.Hour},
		{"-1", 0},
		{"-120", 0},
		{"7.5", 0},
		{"7s", 0},
		{"soon", 0},
		{"Fri, 02 Jan 2026 03:04:35 GMT", 30 * time.Second},  // IMF-fixdate
		{"Friday, 02-Jan-26 03:04:35 GMT", 30 * time.Second}, // RFC 850
		{"Fri Jan  2 03:04:35 2026", 30 * time.Second},       // asctime
		{"Fri, 02 Jan 2026 04:04:05 GMT", time.Hour},         // further ahead
		{"Fri, 02 Jan 2026 03:04:05 GMT", 0},                 // now
		{"Fri, 02 Jan 2026 03:03:35 GMT", 0},                 // past
		{"Thu, 01 Jan 1970 00:00:00 GMT", 0},                 // long past
		{"Fri, 02 Jan 2026 03:04:35", 0},                     // no zone
		{"9223372036", 9223372036 * time.Second},             // largest whole-second Duration
		{"9223372037", time.Duration(math.MaxInt64)},         // saturates instead of wrapping negative
		{"18446744074", time.Duration(math.MaxInt64)},        // would wrap to about 0.26s
		{strconv.Itoa(math.MaxInt), time.Duration(math.MaxInt64)},
	}
	for _, tc := range tests {
		if got := retryAfter(tc.value, now); got != tc.want {
			t.Errorf("retryAfter(%q) = %v, want %v", tc.value, got, tc.want)
		}
	}
}

func TestQuote(t *testing.T) {
	t.Parallel()
	tests := []struct {
		body string
		want string
	}{
		{"", "(empty body)"},
		{"   ", "(empty body)"},
		{" x ", "x"},
		{strings.Repeat("a", 256), strings.Repeat("a", 256)},
		{strings.Repeat("a", 257), strings.Repeat("a", 256) + "…"},
		{strings.Repeat("a", 255) + "€", strings.Repeat("a", 255) + "…"}, // € is 3 bytes
		{strings.Repeat("a", 253) + "€", strings.Repeat("a", 253) + "€"},
		{strings.Repeat("a", 254) + "€x", strings.Repeat("a", 254) + "…"},
	}
	for _, tc := range tests {
		if got := quote([]byte(tc.body)); got != tc.want {
			t.Errorf("quote(%q) = %q, want %q", tc.body, got, tc.want)
		}
	}
}
