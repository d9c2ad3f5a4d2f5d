package kubernetesapply

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/pkg/adapter"
)

// These tests run the adapter against a stand-in for the API server on
// 127.0.0.1 that answers as the API server does; the envtest specs in
// controllers/ run it against a real one.

var request = adapter.Request{
	IdempotencyKey: "shop/set-mode-1",
	RequestDigest:  "sha256:abc",
	Parameters:     json.RawMessage(`{"mode": "fast"}`),
}

func settingsTool() *v1alpha1.Tool {
	return &v1alpha1.Tool{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "settings"},
		Spec: v1alpha1.ToolSpec{KubernetesApply: &v1alpha1.KubernetesApplyAdapter{
			ServiceAccountName: "editor",
			Template: apiextensionsv1.JSON{Raw: []byte(
				`{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}, "data": {"mode": "{{mode}}"}}`)},
			Timeout: &metav1.Duration{Duration: 300 * time.Millisecond},
		}},
	}
}

// connect connects the settings tool to a server that answers with handler.
func connect(t *testing.T, handler http.HandlerFunc) adapter.Executor {
	t.Helper()
	server := httptest.NewServer(handler)
	t.Cleanup(server.Close)
	return connectTo(t, server.URL)
}

func connectTo(t *testing.T, host string) adapter.Executor {
	t.Helper()
	return connectTool(t, host, settingsTool())
}

func connectTool(t *testing.T, host string, tool *v1alpha1.Tool) adapter.Executor {
	t.Helper()
	c, err := New(&rest.Config{Host: host})
	if err != nil {
		t.Fatal(err)
	}
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, meta.RESTScopeNamespace)
	mapper.Add(schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}, meta.RESTScopeRoot)
	c.mapper = mapper
	conn, err := c.Connect(context.Background(), tool)
	if err != nil {
		t.Fatal(err)
	}
	return conn.Executor
}

// status answers as the API server does: a Status, whose details repeat
// the Retry-After header.
func status(w http.ResponseWriter, code int, reason, message string) {
	answer := metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure, Code: int32(code), Reason: metav1.StatusReason(reason), Message: message,
	}
	if after, err := strconv.Atoi(w.Header().Get("Retry-After")); err == nil {
		answer.Details = &metav1.StatusDetails{RetryAfterSeconds: int32(after)}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(answer)
}

func configMap(w http.ResponseWriter, annotations map[string]string) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "settings", "namespace": "shop", "uid": "u-1", "resourceVersion": "42", "annotations": annotations},
	})
}

func TestExecuteAppliesAsTheServiceAccount(t *testing.T) {
	var got *http.Request
	var body []byte
	executor := connect(t, func(w http.ResponseWriter, r *http.Request) {
		got, body = r, must(io.ReadAll(r.Body))
		configMap(w, nil)
	})
	out, err := executor.Execute(context.Background(), request)
	if err != nil {
		t.Fatal(err)
	}
	if got.Method != http.MethodPatch || got.URL.Path != "/api/v1/namespaces/shop/configmaps/settings" {
		t.Errorf("request %s %s, want PATCH of the ConfigMap", got.Method, got.URL.Path)
	}
	if q := got.URL.Query(); q.Get("fieldManager") != "toolledger-settings" || q.Get("force") == "true" {
		t.Errorf("query %q: want the default field manager and no force", got.URL.RawQuery)
	}
	if ct := got.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/apply-patch") {
		t.Errorf("Content-Type %q is not server-side apply", ct)
	}
	if user := got.Header.Get("Impersonate-User"); user != "system:serviceaccount:shop:editor" {
		t.Errorf("Impersonate-User %q, want the Tool's ServiceAccount", user)
	}
	var sent map[string]any
	if err := json.Unmarshal(body, &sent); err != nil {
		t.Fatalf("body %s: %v", body, err)
	}
	metadata := sent["metadata"].(map[string]any)
	annotations := metadata["annotations"].(map[string]any)
	if metadata["namespace"] != "shop" || annotations[v1alpha1.IdempotencyKeyAnnotation] != request.IdempotencyKey ||
		annotations[v1alpha1.RequestDigestAnnotation] != request.RequestDigest || sent["data"].(map[string]any)["mode"] != "fast" {
		t.Errorf("applied %s", body)
	}
	if out.ExternalRef != "configmaps/shop/settings" || string(out.Result) != `{"uid":"u-1","resourceVersion":"42"}` {
		t.Errorf("outcome %q %s", out.ExternalRef, out.Result)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestExecuteClassifiesTheAnswer(t *testing.T) {
	conflict := `Apply failed with 1 conflict: conflict with "ops" using v1: .data.mode`
	for _, c := range []struct {
		name    string
		answer  func(w http.ResponseWriter)
		check   func(err error) bool
		message string
	}{
		{"field manager conflict", func(w http.ResponseWriter) { status(w, 409, "Conflict", conflict) },
			permanent(adapter.InvalidInput, "ApplyConflict"), conflict},
		{"forbidden", func(w http.ResponseWriter) { status(w, 403, "Forbidden", `configmaps "settings" is forbidden`) },
			permanent(adapter.Denied, "Forbidden"), "is forbidden"},
		{"invalid", func(w http.ResponseWriter) { status(w, 422, "Invalid", `ConfigMap "settings" is invalid`) },
			permanent(adapter.InvalidInput, "Invalid"), "is invalid"},
		{"no such namespace", func(w http.ResponseWriter) { status(w, 404, "NotFound", `namespaces "shop" not found`) },
			permanent(adapter.InvalidInput, "NotFound"), "not found"},
		{"racing create", func(w http.ResponseWriter) { status(w, 409, "AlreadyExists", "already exists") },
			retryable("AlreadyExists", 0), "already exists"},
		{"throttled", func(w http.ResponseWriter) {
			w.Header().Set("Retry-After", "7")
			status(w, 429, "TooManyRequests", "too many requests")
		}, retryable("TooManyRequests", 7*time.Second), "too many requests"},
		{"internal error", func(w http.ResponseWriter) {
			w.Header().Set("Retry-After", "1")
			status(w, 500, "InternalError", "etcd is slow")
		}, ambiguous("InternalError"), "etcd is slow"},
		{"long message", func(w http.ResponseWriter) { status(w, 422, "Invalid", strings.Repeat("x", 5000)) },
			func(err error) bool { return len(err.Error()) < maxMessageLength+64 }, "xxx…"},
	} {
		var requests atomic.Int32
		executor := connect(t, func(w http.ResponseWriter, _ *http.Request) {
			requests.Add(1)
			c.answer(w)
		})
		_, err := executor.Execute(context.Background(), request)
		if !c.check(err) || !strings.Contains(err.Error(), c.message) {
			t.Errorf("%s: err = %#v (%v)", c.name, err, err)
		}
		// client-go would send again after a Retry-After; one Execute is one attempt.
		if n := requests.Load(); n != 1 {
			t.Errorf("%s: %d requests, want 1", c.name, n)
		}
	}
}

func TestExecuteTellsWhetherTheRequestWasSent(t *testing.T) {
	refused := httptest.NewServer(http.NotFoundHandler())
	refused.Close()
	_, err := connectTo(t, refused.URL).Execute(context.Background(), request)
	if !retryable("RequestNotSent", 0)(err) {
		t.Errorf("connection refused: err = %v, want retryable RequestNotSent", err)
	}

	_, err = connect(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		conn, _, hijackErr := w.(http.Hijacker).Hijack()
		if hijackErr == nil {
			_ = conn.Close()
		}
	}).Execute(context.Background(), request)
	if !ambiguous("ConnectionLost")(err) {
		t.Errorf("connection closed after the request: err = %v, want ambiguous ConnectionLost", err)
	}

	_, err = connect(t, func(_ http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body) // the server notices the client leave only once the body is read
		<-r.Context().Done()
	}).Execute(context.Background(), request)
	if !ambiguous("Timeout")(err) {
		t.Errorf("no answer: err = %v, want ambiguous Timeout", err)
	}
}

func TestExecuteRefusesParametersThatMakeNoObject(t *testing.T) {
	tool := settingsTool()
	tool.Spec.KubernetesApply.Template.Raw = []byte(`{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "{{name}}"}}`)
	server := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { t.Error("a request was sent") }))
	t.Cleanup(server.Close)
	executor := connectTool(t, server.URL, tool)
	for params, reason := range map[string]string{
		`{}`:                "MissingParameter",
		`{"name": 7}`:       "InvalidParameter",
		`{"name": "a/b"}`:   "InvalidParameter",
		`{"name": ".."}`:    "InvalidParameter",
		`["not", "object"]`: "InvalidParameter",
	} {
		_, err := executor.Execute(context.Background(), adapter.Request{Parameters: json.RawMessage(params)})
		if !permanent(adapter.InvalidInput, reason)(err) {
			t.Errorf("parameters %s: err = %v, want InvalidInput %s", params, err, reason)
		}
	}
}

// An object without the key proves that no attempt applied only for a
// tool whose repeat cannot cause a second effect: objects vanish because
// they applied (a Job's TTL, garbage collection).
func TestLookupProvesAbsenceOnlyWhereARepeatIsHarmless(t *testing.T) {
	withoutKey := []struct {
		name   string
		answer func(w http.ResponseWriter)
	}{
		{"absent", func(w http.ResponseWriter) { status(w, 404, "NotFound", "not found") }},
		{"another key", func(w http.ResponseWriter) {
			configMap(w, map[string]string{v1alpha1.IdempotencyKeyAnnotation: "shop/other", v1alpha1.RequestDigestAnnotation: "sha256:abc"})
		}},
		{"no key", func(w http.ResponseWriter) { configMap(w, nil) }},
	}
	for _, class := range []v1alpha1.IdempotencyClass{v1alpha1.NaturallyIdempotent, v1alpha1.ReadOnly,
		v1alpha1.KeyProtected, v1alpha1.Compensatable, v1alpha1.NonRepeatable, ""} {
		proves := class == v1alpha1.NaturallyIdempotent || class == v1alpha1.ReadOnly
		for _, c := range withoutKey {
			server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { c.answer(w) }))
			tool := settingsTool()
			tool.Spec.IdempotencyClass = class
			_, err := connectTool(t, server.URL, tool).Lookup(context.Background(), request)
			server.Close()
			switch {
			case err == nil:
				t.Errorf("%s, class %q: found, want absent or inconclusive", c.name, class)
			case proves && !errors.Is(err, adapter.ErrNotFound):
				t.Errorf("%s, class %q: err = %v, want ErrNotFound", c.name, class, err)
			case !proves && errors.Is(err, adapter.ErrNotFound):
				t.Errorf("%s, class %q: err = %v, want inconclusive: absence proves nothing for this class", c.name, class, err)
			case !proves && !strings.Contains(err.Error(), "proves nothing for a tool of this class"):
				t.Errorf("%s, class %q: err = %v, want it to say why absence proves nothing", c.name, class, err)
			}
		}
	}
}

func TestLookupFindsTheKeyAndDigest(t *testing.T) {
	for _, c := range []struct {
		name   string
		answer func(w http.ResponseWriter)
		found  bool
	}{
		{"the key and digest", func(w http.ResponseWriter) {
			configMap(w, map[string]string{v1alpha1.IdempotencyKeyAnnotation: request.IdempotencyKey, v1alpha1.RequestDigestAnnotation: request.RequestDigest})
		}, true},
		{"the key, another digest", func(w http.ResponseWriter) {
			configMap(w, map[string]string{v1alpha1.IdempotencyKeyAnnotation: request.IdempotencyKey, v1alpha1.RequestDigestAnnotation: "sha256:def"})
		}, false},
		{"forbidden", func(w http.ResponseWriter) { status(w, 403, "Forbidden", "forbidden") }, false},
		{"internal error", func(w http.ResponseWriter) { status(w, 500, "InternalError", "etcd") }, false},
	} {
		var method string
		out, err := connect(t, func(w http.ResponseWriter, r *http.Request) {
			method = r.Method
			c.answer(w)
		}).Lookup(context.Background(), request)
		if method != http.MethodGet {
			t.Errorf("%s: lookup sent %s", c.name, method)
		}
		switch {
		case c.found && (err != nil || out.ExternalRef != "configmaps/shop/settings"):
			t.Errorf("%s: %+v, %v; want the ConfigMap", c.name, out, err)
		case !c.found && (err == nil || errors.Is(err, adapter.ErrNotFound)):
			t.Errorf("%s: err = %v, want an inconclusive error", c.name, err)
		}
	}
}

func TestConnectRefusesAClusterScopedKind(t *testing.T) {
	c, err := New(&rest.Config{Host: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}, meta.RESTScopeRoot)
	c.mapper = mapper
	tool := settingsTool()
	tool.Spec.KubernetesApply.Template.Raw = []byte(`{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}}`)
	_, err = c.Connect(context.Background(), tool)
	var config *adapter.ConfigError
	if !errors.As(err, &config) || config.Reason != ReasonClusterScoped {
		t.Errorf("err = %v, want ClusterScoped", err)
	}
	tool.Spec.KubernetesApply.Template.Raw = []byte(`{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "x"}}`)
	_, err = c.Connect(context.Background(), tool)
	if !errors.As(err, &config) || config.Reason != ReasonUnknownKind {
		t.Errorf("err = %v, want UnknownKind", err)
	}
}

func permanent(kind adapter.PermanentKind, reason string) func(error) bool {
	return func(err error) bool {
		var p *adapter.PermanentError
		return errors.As(err, &p) && p.Kind == kind && p.Reason == reason
	}
}

func retryable(reason string, after time.Duration) func(error) bool {
	return func(err error) bool {
		var r *adapter.RetryableError
		return errors.As(err, &r) && r.Reason == reason && r.RetryAfter == after
	}
}

func ambiguous(reason string) func(error) bool {
	return func(err error) bool {
		var a *adapter.AmbiguousError
		return errors.As(err, &a) && a.Reason == reason
	}
}
