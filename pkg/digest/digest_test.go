package digest

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestComputeIgnoresEncoding(t *testing.T) {
	base := Request{Tenant: "shop", Tool: "charge", Operation: "payments.charge", Version: "v1",
		Parameters: json.RawMessage(`{"amount":1000,"currency":"EUR","customer":"c-42","tags":["a","b"]}`)}
	want := mustCompute(t, base)

	spellings := map[string]string{
		"key order":        `{"tags":["a","b"],"customer":"c-42","currency":"EUR","amount":1000}`,
		"whitespace":       "{ \"amount\" : 1000 ,\n \"currency\" : \"EUR\", \"customer\":\"c-42\", \"tags\" : [ \"a\" , \"b\" ] }",
		"1000 as 1000.0":   `{"amount":1000.0,"currency":"EUR","customer":"c-42","tags":["a","b"]}`,
		"1000 as 1e3":      `{"amount":1e3,"currency":"EUR","customer":"c-42","tags":["a","b"]}`,
		"unicode escapes":  `{"amount":1000,"currency":"\u0045\u0055\u0052","customer":"c\u002d42","tags":["\u0061","b"]}`,
		"escaped solidus":  `{"amount":1000,"currency":"EUR","customer":"c-42","tags":["a","b"]}`,
		"escaped key name": `{"\u0061mount":1000,"currency":"EUR","customer":"c-42","tags":["a","b"]}`,
	}
	for name, params := range spellings {
		r := base
		r.Parameters = json.RawMessage(params)
		if got := mustCompute(t, r); got != want {
			t.Errorf("%s changed the digest: got %s, want %s", name, got, want)
		}
	}
}

func TestComputeDetectsEveryValueChange(t *testing.T) {
	base := Request{Tenant: "shop", Tool: "charge", Operation: "payments.charge", Version: "v1",
		Parameters: json.RawMessage(`{"amount":1000,"currency":"EUR","tags":["a","b"]}`)}
	baseDigest := mustCompute(t, base)

	changes := map[string]func(*Request){
		"tenant":    func(r *Request) { r.Tenant = "shop2" },
		"tool":      func(r *Request) { r.Tool = "charge2" },
		"operation": func(r *Request) { r.Operation = "payments.refund" },
		"version":   func(r *Request) { r.Version = "v2" },
		"amount":    func(r *Request) { r.Parameters = json.RawMessage(`{"amount":1001,"currency":"EUR","tags":["a","b"]}`) },
		"amount as text": func(r *Request) {
			r.Parameters = json.RawMessage(`{"amount":"1000","currency":"EUR","tags":["a","b"]}`)
		},
		"array order": func(r *Request) { r.Parameters = json.RawMessage(`{"amount":1000,"currency":"EUR","tags":["b","a"]}`) },
		"added member": func(r *Request) {
			r.Parameters = json.RawMessage(`{"amount":1000,"currency":"EUR","tags":["a","b"],"memo":""}`)
		},
		"renamed member":  func(r *Request) { r.Parameters = json.RawMessage(`{"amont":1000,"currency":"EUR","tags":["a","b"]}`) },
		"null for absent": func(r *Request) { r.Parameters = json.RawMessage(`{"amount":1000,"currency":null,"tags":["a","b"]}`) },
		// Boundaries between the envelope's fields must not be movable.
		"tenant/tool split": func(r *Request) { r.Tenant, r.Tool = "shopc", "harge" },
	}
	seen := map[string]string{baseDigest: "base"}
	for name, change := range changes {
		r := base
		change(&r)
		got := mustCompute(t, r)
		if other, dup := seen[got]; dup {
			t.Errorf("%s gives the same digest as %s: %s", name, other, got)
		}
		seen[got] = name
	}
}

func TestComputeGolden(t *testing.T) {
	// Pinned so that a change of the canonical form is never silent: clients
	// that send spec.requestDigest depend on it.
	r := Request{Tenant: "shop", Tool: "charge", Operation: "payments.charge", Version: "v1",
		Parameters: json.RawMessage(`{"amount":1000,"currency":"EUR"}`)}
	const canonical = `{"operation":"payments.charge","parameters":{"amount":1000,"currency":"EUR"},"tenant":"shop","tool":"charge","version":"v1"}`
	want := sha256Hex(canonical)
	if got := mustCompute(t, r); got != want {
		t.Errorf("Compute = %s, want %s (sha256 of %s)", got, want, canonical)
	}
}

func TestComputeEmptyParameters(t *testing.T) {
	r := Request{Tenant: "shop", Tool: "ping", Operation: "ping", Version: "v1"}
	withEmpty := r
	withEmpty.Parameters = json.RawMessage(`{}`)
	if a, b := mustCompute(t, r), mustCompute(t, withEmpty); a != b {
		t.Errorf("absent parameters = %s, {} = %s; want equal", a, b)
	}
}

func TestComputeRejectsAmbiguousParameters(t *testing.T) {
	r := Request{Tenant: "shop", Tool: "charge", Operation: "payments.charge", Version: "v1",
		Parameters: json.RawMessage(`{"amount":1,"amount":2}`)}
	if d, err := Compute(r); err == nil {
		t.Fatalf("Compute with duplicate members = %s, want an error", d)
	}
}

func TestComputeRejectsInvalidUTF8Names(t *testing.T) {
	// json.Marshal would turn "\xff" into U+FFFD: "shop\xff" and
	// "shop\ufffd" must not share a digest.
	base := Request{Tenant: "shop", Tool: "charge", Operation: "payments.charge", Version: "v1"}
	changes := map[string]func(*Request){
		"tenant":    func(r *Request) { r.Tenant = "shop\xff" },
		"tool":      func(r *Request) { r.Tool = "charge\xff" },
		"operation": func(r *Request) { r.Operation = "payments.\xffcharge" },
		"version":   func(r *Request) { r.Version = "v1\xed\xa0\x80" },
	}
	for name, change := range changes {
		r := base
		change(&r)
		if d, err := Compute(r); err == nil || !strings.Contains(err.Error(), name+" ") {
			t.Errorf("Compute with invalid UTF-8 in the %s = %s, %v; want an error naming it", name, d, err)
		}
	}
	r := base
	r.Tenant = "shop\ufffd" // valid UTF-8, only unusual
	mustCompute(t, r)
}

func mustCompute(t *testing.T, r Request) string {
	t.Helper()
	d, err := Compute(r)
	if err != nil {
		t.Fatalf("Compute(%+v): %v", r, err)
	}
	return d
}
