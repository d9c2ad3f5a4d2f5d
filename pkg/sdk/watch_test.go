package sdk_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/pkg/sdk"
)

// A real API server keeps watch events for minutes, longer than a test
// should run, so the paths where a watch ends, expires (410) or fails are
// proven against a scripted API server that answers each request in turn.

// exchange is one expected request ("PATCH <key>", "LIST <key>", "WATCH
// <version>") and the answer: a status code and JSON documents written one
// after another.
type exchange struct {
	request string
	status  int
	body    []string
}

// gate holds the answer to a request before its document at (0: before the
// status) until the test closes open.
type gate struct {
	at   int
	open chan struct{}
}

type scriptedAPIServer struct {
	t        *testing.T
	mu       sync.Mutex
	script   []exchange
	gates    map[string]gate
	received []string
}

func (s *scriptedAPIServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	request := describe(r)
	s.mu.Lock()
	s.received = append(s.received, request)
	if len(s.script) == 0 || s.script[0].request != request {
		s.mu.Unlock()
		s.t.Errorf("unexpected request %q (%s %s)", request, r.Method, r.URL)
		http.Error(w, "unexpected request", http.StatusTeapot)
		return
	}
	next := s.script[0]
	s.script = s.script[1:]
	g, gated := s.gates[request]
	s.mu.Unlock()

	if gated && g.at == 0 {
		<-g.open
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(next.status)
	_ = http.NewResponseController(w).Flush()
	for i, document := range next.body {
		if gated && i == g.at && i > 0 {
			<-g.open
		}
		_, _ = fmt.Fprintln(w, document)
		_ = http.NewResponseController(w).Flush()
	}
}

// invoker serves the script over HTTP for the rest of the test and returns
// an SDK client of it, with a context that bounds the test.
func (s *scriptedAPIServer) invoker() (*sdk.Client, context.Context) {
	httpServer := httptest.NewServer(s)
	s.t.Cleanup(httpServer.Close)
	invoker, err := sdk.NewClient(&rest.Config{Host: httpServer.URL})
	if err != nil {
		s.t.Fatalf("NewClient: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	s.t.Cleanup(cancel)
	return invoker, ctx
}

// awaitRequests waits until n requests have arrived.
func (s *scriptedAPIServer) awaitRequests(n int) {
	for range 500 {
		if len(s.Received()) >= n {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.t.Fatalf("%d requests arrived, want %d: %q", len(s.Received()), n, s.Received())
}

func (s *scriptedAPIServer) Received() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.received
}

func describe(r *http.Request) string {
	const path = "/apis/toolledger.dev/v1alpha1/namespaces/shop/toolactions"
	query := r.URL.Query()
	key, named := strings.CutPrefix(query.Get("fieldSelector"), "metadata.name=")
	switch {
	case r.Method == http.MethodPatch && strings.HasPrefix(r.URL.Path, path+"/") && query.Get("fieldManager") == sdk.DefaultFieldManager:
		return "PATCH " + strings.TrimPrefix(r.URL.Path, path+"/")
	case r.Method != http.MethodGet || r.URL.Path != path:
		return r.Method + " " + r.URL.String()
	case query.Get("watch") == "true" && !query.Has("fieldSelector"):
		return "WATCH " + query.Get("resourceVersion")
	case query.Get("watch") == "" && named:
		return "LIST " + key
	default:
		return r.Method + " " + r.URL.String()
	}
}

func action(uid, resourceVersion string, phase v1alpha1.Phase) string {
	return namedAction("order-1", uid, resourceVersion, phase)
}

func namedAction(name, uid, resourceVersion string, phase v1alpha1.Phase) string {
	return fmt.Sprintf(`{"apiVersion":"toolledger.dev/v1alpha1","kind":"ToolAction","metadata":{"name":%q,"namespace":"shop",`+
		`"uid":%q,"resourceVersion":%q,"creationTimestamp":"2026-11-30T12:00:00Z"},`+
		`"spec":{"toolRef":{"name":"charge"}},"status":{"phase":%q,"externalRef":"ch_1"}}`, name, uid, resourceVersion, phase)
}

func event(kind, object string) string {
	return fmt.Sprintf(`{"type":%q,"object":%s}`, kind, object)
}

func status(code int, reason, message string) string {
	return fmt.Sprintf(`{"kind":"Status","apiVersion":"v1","status":"Failure","code":%d,"reason":%q,"message":%q}`, code, reason, message)
}

func TestInvokeFollowsTheActionAcrossWatchEndsAndExpiry(t *testing.T) {
	for _, tc := range []struct {
		name      string
		script    []exchange
		wantPhase v1alpha1.Phase
		wantErr   func(error) bool
	}{{
		name: "stream ended, then expired: re-watch from the last version, then re-list and watch from the list's version",
		script: []exchange{
			{"PATCH order-1", 200, []string{action("u1", "10", v1alpha1.PhaseExecuting)}},
			{"WATCH 10", 200, []string{event("MODIFIED", action("u1", "11", v1alpha1.PhaseUnknown))}},
			{"WATCH 11", 200, []string{event("ERROR", status(410, "Expired", "too old resource version: 11 (40)"))}},
			{"LIST order-1", 200, []string{`{"apiVersion":"toolledger.dev/v1alpha1","kind":"ToolActionList","metadata":{"resourceVersion":"40"},"items":[` +
				action("u1", "15", v1alpha1.PhaseUnknown) + `]}`}},
			{"WATCH 40", 503, []string{status(503, "ServiceUnavailable", "the API server is restarting")}},
			{"WATCH 40", 200, []string{event("BOOKMARK", `{"apiVersion":"toolledger.dev/v1alpha1","kind":"ToolAction","metadata":{"resourceVersion":"45"}}`)}},
			{"WATCH 45", 200, []string{event("MODIFIED", action("u1", "46", v1alpha1.PhaseSucceeded))}},
		},
		wantPhase: v1alpha1.PhaseSucceeded,
		wantErr:   func(err error) bool { return err == nil },
	}, {
		name: "expired and settled meanwhile: the re-list is the answer",
		script: []exchange{
			{"PATCH order-1", 200, []string{action("u1", "10", v1alpha1.PhaseExecuting)}},
			{"WATCH 10", 410, []string{status(410, "Gone", "too old resource version")}},
			{"LIST order-1", 200, []string{`{"apiVersion":"toolledger.dev/v1alpha1","kind":"ToolActionList","metadata":{"resourceVersion":"40"},"items":[` +
				action("u1", "30", v1alpha1.PhaseEscalated) + `]}`}},
		},
		wantPhase: v1alpha1.PhaseEscalated,
		wantErr:   func(err error) bool { return err == nil },
	}, {
		name: "deleted and created again under the same name while the watch was expired",
		script: []exchange{
			{"PATCH order-1", 200, []string{action("u1", "10", v1alpha1.PhaseExecuting)}},
			{"WATCH 10", 200, []string{event("ERROR", status(410, "Expired", "too old resource version"))}},
			{"LIST order-1", 200, []string{`{"apiVersion":"toolledger.dev/v1alpha1","kind":"ToolActionList","metadata":{"resourceVersion":"40"},"items":[` +
				action("u2", "35", v1alpha1.PhaseSucceeded) + `]}`}},
		},
		wantPhase: v1alpha1.PhaseExecuting,
		wantErr:   func(err error) bool { return errors.Is(err, sdk.ErrDeleted) },
	}, {
		name: "refused watch: the error, with the last outcome",
		script: []exchange{
			{"PATCH order-1", 201, []string{action("u1", "10", v1alpha1.PhaseAccepted)}},
			{"WATCH 10", 403, []string{status(403, "Forbidden", `toolactions.toolledger.dev is forbidden: User "agent" cannot watch resource "toolactions"`)}},
		},
		wantPhase: v1alpha1.PhaseAccepted,
		wantErr:   apierrors.IsForbidden,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			expected := make([]string, 0, len(tc.script))
			for _, e := range tc.script {
				expected = append(expected, e.request)
			}
			server := &scriptedAPIServer{t: t, script: tc.script}
			invoker, ctx := server.invoker()

			outcome, err := invoker.Invoke(ctx, sdk.Request{Namespace: "shop", Key: "order-1", Tool: "charge"})
			if !tc.wantErr(err) {
				t.Fatalf("Invoke error: %v", err)
			}
			if outcome == nil || outcome.Phase != tc.wantPhase {
				t.Fatalf("Invoke outcome = %+v, want phase %s", outcome, tc.wantPhase)
			}
			if got := server.Received(); strings.Join(got, ", ") != strings.Join(expected, ", ") {
				t.Errorf("requests\n got %q\nwant %q", got, expected)
			}
		})
	}
}

// Invokes of one Client wait in one watch of the namespace: a second Invoke
// while the first waits costs its apply alone.
func TestConcurrentInvokesShareOneWatch(t *testing.T) {
	release := make(chan struct{})
	server := &scriptedAPIServer{t: t,
		script: []exchange{
			{"PATCH order-1", 201, []string{namedAction("order-1", "u1", "10", v1alpha1.PhaseAccepted)}},
			{"WATCH 10", 200, []string{
				event("MODIFIED", namedAction("order-1", "u1", "11", v1alpha1.PhaseExecuting)),
				event("MODIFIED", namedAction("order-2", "u2", "13", v1alpha1.PhaseSucceeded)),
				event("MODIFIED", namedAction("order-1", "u1", "14", v1alpha1.PhaseSucceeded)),
			}},
			{"PATCH order-2", 201, []string{namedAction("order-2", "u2", "12", v1alpha1.PhaseAccepted)}},
		},
		gates: map[string]gate{"WATCH 10": {at: 1, open: release}},
	}
	invoker, ctx := server.invoker()

	type result struct {
		outcome *sdk.Outcome
		err     error
	}
	first := make(chan result, 1)
	go func() {
		o, err := invoker.Invoke(ctx, sdk.Request{Namespace: "shop", Key: "order-1", Tool: "charge"})
		first <- result{o, err}
	}()
	server.awaitRequests(2)
	second := make(chan result, 1)
	go func() {
		o, err := invoker.Invoke(ctx, sdk.Request{Namespace: "shop", Key: "order-2", Tool: "charge"})
		second <- result{o, err}
	}()
	server.awaitRequests(3)
	close(release)

	for key, results := range map[string]chan result{"order-1": first, "order-2": second} {
		r := <-results
		if r.err != nil || r.outcome == nil || r.outcome.Phase != v1alpha1.PhaseSucceeded || r.outcome.Key != key {
			t.Errorf("Invoke %s = %+v, %v; want Succeeded", key, r.outcome, r.err)
		}
	}
	want := "PATCH order-1, WATCH 10, PATCH order-2"
	if got := strings.Join(server.Received(), ", "); got != want {
		t.Errorf("requests\n got %q\nwant %q", got, want)
	}
}

// When the shared watch expires, every waiting action is read afresh and the
// watch resumes from the oldest of those reads: what happened after each
// read is still to come.
func TestAnExpiredSharedWatchReadsEveryWaitingActionAndResumesFromTheOldestRead(t *testing.T) {
	release := make(chan struct{})
	list := func(resourceVersion, item string) string {
		return `{"apiVersion":"toolledger.dev/v1alpha1","kind":"ToolActionList","metadata":{"resourceVersion":"` + resourceVersion + `"},"items":[` + item + `]}`
	}
	server := &scriptedAPIServer{t: t,
		script: []exchange{
			{"PATCH order-1", 201, []string{namedAction("order-1", "u1", "10", v1alpha1.PhaseAccepted)}},
			{"WATCH 10", 200, []string{
				event("MODIFIED", namedAction("order-1", "u1", "11", v1alpha1.PhaseExecuting)),
				event("ERROR", status(410, "Expired", "too old resource version: 11 (35)")),
			}},
			{"PATCH order-2", 201, []string{namedAction("order-2", "u2", "12", v1alpha1.PhaseAccepted)}},
			{"LIST order-1", 200, []string{list("40", namedAction("order-1", "u1", "30", v1alpha1.PhaseSucceeded))}},
			{"LIST order-2", 200, []string{list("41", namedAction("order-2", "u2", "12", v1alpha1.PhaseAccepted))}},
			{"WATCH 40", 200, []string{event("MODIFIED", namedAction("order-2", "u2", "42", v1alpha1.PhaseSucceeded))}},
		},
		gates: map[string]gate{"WATCH 10": {at: 1, open: release}},
	}
	invoker, ctx := server.invoker()

	results := make(chan error, 2)
	invoke := func(key string) {
		o, err := invoker.Invoke(ctx, sdk.Request{Namespace: "shop", Key: key, Tool: "charge"})
		if err == nil && (o.Phase != v1alpha1.PhaseSucceeded || o.Key != key) {
			err = fmt.Errorf("outcome %+v, want %s Succeeded", o, key)
		}
		results <- err
	}
	go invoke("order-1")
	server.awaitRequests(2)
	go invoke("order-2")
	server.awaitRequests(3)
	close(release)
	for range 2 {
		if err := <-results; err != nil {
			t.Errorf("Invoke: %v", err)
		}
	}
	want := "PATCH order-1, WATCH 10, PATCH order-2, LIST order-1, LIST order-2, WATCH 40"
	if got := strings.Join(server.Received(), ", "); got != want {
		t.Errorf("requests\n got %q\nwant %q", got, want)
	}
}
