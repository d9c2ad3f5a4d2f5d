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

// exchange is one expected request ("PATCH", "LIST", "WATCH <version>") and
// the answer: a status code and JSON documents written one after another.
type exchange struct {
	request string
	status  int
	body    []string
}

type scriptedAPIServer struct {
	t        *testing.T
	mu       sync.Mutex
	script   []exchange
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
	s.mu.Unlock()

	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(next.status)
	for _, document := range next.body {
		_, _ = fmt.Fprintln(w, document)
		_ = http.NewResponseController(w).Flush()
	}
}

func (s *scriptedAPIServer) Received() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.received
}

func describe(r *http.Request) string {
	const path = "/apis/toolledger.dev/v1alpha1/namespaces/shop/toolactions"
	query := r.URL.Query()
	switch {
	case r.Method == http.MethodPatch && r.URL.Path == path+"/order-1" && query.Get("fieldManager") == sdk.DefaultFieldManager:
		return "PATCH"
	case r.Method != http.MethodGet || r.URL.Path != path || query.Get("fieldSelector") != "metadata.name=order-1":
		return r.Method + " " + r.URL.String()
	case query.Get("watch") == "true":
		return "WATCH " + query.Get("resourceVersion")
	default:
		return "LIST"
	}
}

func action(uid, resourceVersion string, phase v1alpha1.Phase) string {
	return fmt.Sprintf(`{"apiVersion":"toolledger.dev/v1alpha1","kind":"ToolAction","metadata":{"name":"order-1","namespace":"shop",`+
		`"uid":%q,"resourceVersion":%q,"creationTimestamp":"2026-11-30T12:00:00Z"},`+
		`"spec":{"toolRef":{"name":"charge"}},"status":{"phase":%q,"externalRef":"ch_1"}}`, uid, resourceVersion, phase)
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
			{"PATCH", 200, []string{action("u1", "10", v1alpha1.PhaseExecuting)}},
			{"WATCH 10", 200, []string{event("MODIFIED", action("u1", "11", v1alpha1.PhaseUnknown))}},
			{"WATCH 11", 200, []string{event("ERROR", status(410, "Expired", "too old resource version: 11 (40)"))}},
			{"LIST", 200, []string{`{"apiVersion":"toolledger.dev/v1alpha1","kind":"ToolActionList","metadata":{"resourceVersion":"40"},"items":[` +
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
			{"PATCH", 200, []string{action("u1", "10", v1alpha1.PhaseExecuting)}},
			{"WATCH 10", 410, []string{status(410, "Gone", "too old resource version")}},
			{"LIST", 200, []string{`{"apiVersion":"toolledger.dev/v1alpha1","kind":"ToolActionList","metadata":{"resourceVersion":"40"},"items":[` +
				action("u1", "30", v1alpha1.PhaseEscalated) + `]}`}},
		},
		wantPhase: v1alpha1.PhaseEscalated,
		wantErr:   func(err error) bool { return err == nil },
	}, {
		name: "deleted and created again under the same name while the watch was expired",
		script: []exchange{
			{"PATCH", 200, []string{action("u1", "10", v1alpha1.PhaseExecuting)}},
			{"WATCH 10", 200, []string{event("ERROR", status(410, "Expired", "too old resource version"))}},
			{"LIST", 200, []string{`{"apiVersion":"toolledger.dev/v1alpha1","kind":"ToolActionList","metadata":{"resourceVersion":"40"},"items":[` +
				action("u2", "35", v1alpha1.PhaseSucceeded) + `]}`}},
		},
		wantPhase: v1alpha1.PhaseExecuting,
		wantErr:   func(err error) bool { return errors.Is(err, sdk.ErrDeleted) },
	}, {
		name: "refused watch: the error, with the last outcome",
		script: []exchange{
			{"PATCH", 201, []string{action("u1", "10", v1alpha1.PhaseAccepted)}},
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
			httpServer := httptest.NewServer(server)
			defer httpServer.Close()
			invoker, err := sdk.NewClient(&rest.Config{Host: httpServer.URL})
			if err != nil {
				t.Fatalf("NewClient: %v", err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()

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
