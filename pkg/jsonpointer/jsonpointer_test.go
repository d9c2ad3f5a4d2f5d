package jsonpointer

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// decode parses a JSON document keeping numbers exact, as the adapter does.
func decode(t *testing.T, doc string) any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(doc))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decode %s: %v", doc, err)
	}
	return v
}

const pointerDoc = `{
	"id": "ch_1",
	"amount": 1200,
	"nested": {"deep": {"value": true}},
	"items": [{"sku": "a"}, {"sku": "b"}],
	"a/b": "slash",
	"m~n": "tilde",
	"~1": "literal tilde-one",
	"": "empty key",
	"nil": null
}`

func TestResolve(t *testing.T) {
	t.Parallel()
	doc := decode(t, pointerDoc)
	tests := []struct {
		pointer string
		want    any
		found   bool
	}{
		{pointer: "/id", want: "ch_1", found: true},
		{pointer: "/amount", want: json.Number("1200"), found: true},
		{pointer: "/nested/deep/value", want: true, found: true},
		{pointer: "/nested/deep", want: map[string]any{"value": true}, found: true},
		{pointer: "/items/0/sku", want: "a", found: true},
		{pointer: "/items/1", want: map[string]any{"sku": "b"}, found: true},
		{pointer: "/a~1b", want: "slash", found: true},
		{pointer: "/m~0n", want: "tilde", found: true},
		// "~01" decodes to "~1", not to "/" (RFC 6901 section 4: ~1 first is wrong).
		{pointer: "/~01", want: "literal tilde-one", found: true},
		{pointer: "/", want: "empty key", found: true},
		{pointer: "/nil", want: nil, found: true},
		{pointer: "/missing", found: false},
		{pointer: "/nested/missing", found: false},
		{pointer: "/a/b", found: false}, // unescaped slash is two tokens
		{pointer: "/items/2", found: false},
		{pointer: "/items/-1", found: false},
		{pointer: "/items/-", found: false},
		{pointer: "/items/x", found: false},
		{pointer: "/items/0/sku/more", found: false}, // descends into a string
		{pointer: "/id/0", found: false},
		{pointer: "/amount/x", found: false},
		{pointer: "/nil/x", found: false},
	}
	for _, tc := range tests {
		t.Run(tc.pointer, func(t *testing.T) {
			t.Parallel()
			got, ok := Get(doc, tc.pointer)
			if ok != tc.found {
				t.Fatalf("Get(%q) found = %v, want %v (value %v)", tc.pointer, ok, tc.found, got)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Get(%q) mismatch (-want +got):\n%s", tc.pointer, diff)
			}
		})
	}
}

func TestResolveEmptyPointerIsWholeDocument(t *testing.T) {
	t.Parallel()
	doc := decode(t, `{"a": 1}`)
	got, ok := Get(doc, "")
	if !ok {
		t.Fatal(`Get(doc, "") not found`)
	}
	if diff := cmp.Diff(doc, got); diff != "" {
		t.Errorf("mismatch (-want +got):\n%s", diff)
	}
}

func TestResolveTopLevelArrayAndScalar(t *testing.T) {
	t.Parallel()
	arr := decode(t, `[10, "x"]`)
	if got, ok := Get(arr, "/1"); !ok || got != "x" {
		t.Errorf(`Get([10,"x"], "/1") = %v, %v; want "x", true`, got, ok)
	}
	if got, ok := Get(arr, "/2"); ok {
		t.Errorf(`Get([10,"x"], "/2") = %v, true; want not found`, got)
	}
	if got, ok := Get(decode(t, `"s"`), "/0"); ok {
		t.Errorf(`Get("s", "/0") = %v, true; want not found`, got)
	}
}

func TestTokens(t *testing.T) {
	t.Parallel()
	tests := []struct {
		pointer string
		want    []string
	}{
		{"/a", []string{"a"}},
		{"/a/b/0", []string{"a", "b", "0"}},
		{"/", []string{""}},
		{"//", []string{"", ""}},
		{"/a~1b", []string{"a/b"}},
		{"/a~0b", []string{"a~b"}},
		{"/~01", []string{"~1"}},
		{"/~10", []string{"/0"}},
		{"/~0~1", []string{"~/"}},
		{"/charge id", []string{"charge id"}},
	}
	for _, tc := range tests {
		if diff := cmp.Diff(tc.want, tokens(tc.pointer)); diff != "" {
			t.Errorf("tokens(%q) mismatch (-want +got):\n%s", tc.pointer, diff)
		}
	}
}

func TestProject(t *testing.T) {
	t.Parallel()
	const response = `{
		"id": "ch_1",
		"status": "succeeded",
		"amount": 1200,
		"secret": "sk_live_do_not_store",
		"card": {"last4": "4242", "number": "4242424242424242", "exp": "12/30"},
		"items": [{"sku": "a", "price": 5}, {"sku": "b", "price": 7}],
		"data": {"charge/id": "ch_2", "a~b": "t"}
	}`
	tests := []struct {
		name        string
		pointers    []string
		want        string // JSON of the projected document; "" means nil
		wantMissing []string
	}{
		{
			name:     "scalars and a nested field",
			pointers: []string{"/status", "/amount", "/card/last4"},
			want:     `{"status":"succeeded","amount":1200,"card":{"last4":"4242"}}`,
		},
		{
			name:     "two fields of the same object merge",
			pointers: []string{"/card/last4", "/card/exp"},
			want:     `{"card":{"last4":"4242","exp":"12/30"}}`,
		},
		{
			name:     "whole object",
			pointers: []string{"/card"},
			want:     `{"card":{"last4":"4242","number":"4242424242424242","exp":"12/30"}}`,
		},
		{
			name:     "array elements are keyed by index",
			pointers: []string{"/items/1/sku"},
			want:     `{"items":{"1":{"sku":"b"}}}`,
		},
		{
			name:     "escaped tokens are stored unescaped",
			pointers: []string{"/data/charge~1id", "/data/a~0b"},
			want:     `{"data":{"charge/id":"ch_2","a~b":"t"}}`,
		},
		{
			name:        "missing pointers are reported, present ones kept",
			pointers:    []string{"/status", "/nope", "/card/cvc"},
			want:        `{"status":"succeeded"}`,
			wantMissing: []string{"/nope", "/card/cvc"},
		},
		{
			name:        "nothing found gives a nil result",
			pointers:    []string{"/nope"},
			wantMissing: []string{"/nope"},
		},
		{
			name: "no pointers",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			doc := decode(t, response)
			got, missing := Project(doc, tc.pointers)
			if diff := cmp.Diff(tc.wantMissing, missing); diff != "" {
				t.Errorf("missing pointers mismatch (-want +got):\n%s", diff)
			}
			if tc.want == "" {
				if got != nil {
					t.Fatalf("project = %v, want nil", got)
				}
				return
			}
			want := decode(t, tc.want)
			if diff := cmp.Diff(want, any(got)); diff != "" {
				t.Errorf("project mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestProjectDoesNotAliasUnrequestedFields guards against a projection that
// starts from the response's own objects and so leaks their other fields.
func TestProjectDoesNotAliasUnrequestedFields(t *testing.T) {
	t.Parallel()
	doc := decode(t, `{"card": {"last4": "4242", "number": "4242424242424242"}}`)
	got, _ := Project(doc, []string{"/card/last4"})
	encoded, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"card":{"last4":"4242"}}`; string(encoded) != want {
		t.Errorf("project = %s, want %s", encoded, want)
	}
}

func TestDecode(t *testing.T) {
	doc, err := Decode([]byte(`{"id": 9007199254740993, "tags": ["a"]}`))
	if err != nil {
		t.Fatal(err)
	}
	if id, _ := Get(doc, "/id"); id != json.Number("9007199254740993") {
		t.Errorf("/id = %#v, want the exact json.Number", id)
	}
	for _, bad := range []string{`{"a":1} {"b":2}`, `{"a":1} x`, ``, `{`} {
		if _, err := Decode([]byte(bad)); err == nil {
			t.Errorf("Decode(%q) succeeded, want an error", bad)
		}
	}
}
