package sdk

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

// The apply body is what makes a duplicate a no-op for the API server, so it
// must not depend on how the caller spelled or typed the same values.
func TestApplyBodyIsTheSameBytesForTheSameValues(t *testing.T) {
	const want = `{"apiVersion":"toolledger.dev/v1alpha1","kind":"ToolAction",` +
		`"metadata":{"name":"order-1001-charge","namespace":"shop","finalizers":["toolledger.dev/outcome"]},` +
		`"spec":{"toolRef":{"name":"charge"},` +
		`"parameters":{"amount":1000,"currency":"EUR","meta":{"a":"<b>","z":[1.5,2]}},` +
		`"provenance":{"runID":"run-42","principals":["user:alice"]}}}` + "\n"
	for _, tc := range []struct {
		name       string
		parameters map[string]any
	}{
		{"int", map[string]any{"amount": 1000, "currency": "EUR", "meta": map[string]any{"z": []any{1.5, 2}, "a": "<b>"}}},
		{"float64", map[string]any{"amount": 1000.0, "currency": "EUR", "meta": map[string]any{"a": "<b>", "z": []float64{1.5, 2}}}},
		{"int64", map[string]any{"amount": int64(1000), "currency": "EUR", "meta": map[string]any{"a": "<b>", "z": []any{1.5, 2.0}}}},
		{"json.Number", map[string]any{"amount": json.Number("1e3"), "currency": "EUR", "meta": json.RawMessage(`{"z":[15e-1,2.0],"a":"\u003cb>"}`)}},
		{"json.RawMessage", map[string]any{"amount": json.RawMessage(`1000.0`), "currency": json.RawMessage(`"\u0045UR"`), "meta": json.RawMessage(` { "a" : "<b>", "z" : [ 1.50, 2 ] } `)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body, err := applyBody(Request{
				Namespace:  "shop",
				Key:        "order-1001-charge",
				Tool:       "charge",
				Parameters: tc.parameters,
				Provenance: &v1alpha1.Provenance{RunID: "run-42", Principals: []string{"user:alice"}},
			}, "")
			if err != nil {
				t.Fatalf("applyBody: %v", err)
			}
			if string(body) != want {
				t.Errorf("apply body\n got %s\nwant %s", body, want)
			}
		})
	}
}

func TestApplyBodyRefusesInvalidRequests(t *testing.T) {
	valid := Request{Namespace: "shop", Key: "order-1", Tool: "charge"}
	for _, tc := range []struct {
		name   string
		modify func(*Request)
		want   string
	}{
		{"no namespace", func(r *Request) { r.Namespace = "" }, "namespace is empty"},
		{"no key", func(r *Request) { r.Key = "" }, `key "" is not a valid object name`},
		{"key not a name", func(r *Request) { r.Key = "Order 1" }, `key "Order 1" is not a valid object name`},
		{"no tool", func(r *Request) { r.Tool = "" }, "tool is empty"},
		{"integer beyond 2^53", func(r *Request) { r.Parameters = map[string]any{"id": uint64(1) << 60} }, "cannot canonicalize parameters"},
		{"not encodable", func(r *Request) { r.Parameters = map[string]any{"c": make(chan int)} }, "cannot encode parameters"},
		{"a raw value that names a member twice", func(r *Request) {
			r.Parameters = map[string]any{"metadata": json.RawMessage(`{"order":"7","order":"8"}`)}
		}, `duplicate object member "order"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := valid
			tc.modify(&req)
			body, err := applyBody(req, "")
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrInvalidRequest) {
				t.Fatalf("applyBody = %s, %v; want an ErrInvalidRequest containing %q", body, err, tc.want)
			}
		})
	}
}
