package mcpgateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/pkg/sdk"
)

func TestIdempotencyKeyTakesAStructuredStringOrTheBareValue(t *testing.T) {
	for _, tc := range []struct {
		values []string
		want   string
		err    string
	}{
		{[]string{"8e03978e-40d5-43e8-bc93-6894a57f9324"}, "8e03978e-40d5-43e8-bc93-6894a57f9324", ""},
		{[]string{`"8e03978e-40d5-43e8-bc93-6894a57f9324"`}, "8e03978e-40d5-43e8-bc93-6894a57f9324", ""},
		{[]string{"1733300000000000000_AbC-d_"}, "1733300000000000000_AbC-d_", ""},
		{[]string{`"say \"hi\" \\ bye"`}, `say "hi" \ bye`, ""},
		{[]string{" \tpadded\t "}, "padded", ""},
		{nil, "", "an Idempotency-Key header is required on every POST"},
		{[]string{"a", "b"}, "", "2 Idempotency-Key fields were sent; send one"},
		{[]string{""}, "", "the Idempotency-Key is not a valid key: the client key is empty"},
		{[]string{`""`}, "", "the Idempotency-Key is not a valid key: the client key is empty"},
		{[]string{`"open`}, "", "the Idempotency-Key is a quoted string without its closing quote"},
		{[]string{`"a"b`}, "", "the Idempotency-Key has text after its quoted string"},
		{[]string{`"a\n"`}, "", `the Idempotency-Key is a quoted string with an escape other than \" or \\`},
		{[]string{strings.Repeat("k", 256)}, "", "the Idempotency-Key is not a valid key: the client key is 256 characters long; at most 255 are allowed"},
		{[]string{"clé"}, "", "the Idempotency-Key is not a valid key: the client key has a character other than printable ASCII at byte 2"},
	} {
		got, err := idempotencyKey(tc.values)
		if got != tc.want || fmt.Sprint(err) != map[bool]string{true: "<nil>", false: tc.err}[tc.err == ""] {
			t.Errorf("idempotencyKey(%q) = %q, %v; want %q, %q", tc.values, got, err, tc.want, tc.err)
		}
	}
}

func TestFormObjectNestsAndTypesByTheSchema(t *testing.T) {
	var schema apiextensionsv1.JSONSchemaProps
	if err := json.Unmarshal([]byte(`{"type":"object","properties":{
		"amount":{"type":"integer"},"rate":{"type":"number"},"capture":{"type":"boolean"},
		"expand":{"type":"array","items":{"type":"string"}},
		"limits":{"type":"object","additionalProperties":{"type":"integer"}}}}`), &schema); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ form, want, err string }{
		{"amount=2000&currency=usd&metadata[order]=7&metadata[channel]=agent", `{"amount":2000,"currency":"usd","metadata":{"channel":"agent","order":"7"}}`, ""},
		{"rate=0.5&capture=true&expand[]=customer&expand[]=invoice&limits[daily]=3", `{"capture":true,"expand":["customer","invoice"],"limits":{"daily":3},"rate":0.5}`, ""},
		{"amount=twenty&capture=yes", `{"amount":"twenty","capture":"yes"}`, ""},
		{"a[b][c]=1", `{"a":{"b":{"c":"1"}}}`, ""},
		{"amount=1&amount=2", "", `the form field "amount" is sent more than once`},
		{"a=1&a[b]=2", "", `the form field "a[b]" is both a value and an object`},
		{"a[=1", "", `the form field "a[" has an unclosed [`},
		{"a[b]c=1", "", `the form field "a[b]c" has text after a ]`},
		{"[b]=1", "", `the form field "[b]" has no name`},
		{"a[][b]=1", "", `the form field "a[][b]" nests below a list, which forms cannot say unambiguously`},
	} {
		form, err := url.ParseQuery(tc.form)
		if err != nil {
			t.Fatal(err)
		}
		got, err := formObject(form, &schema)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("formObject(%s) error = %v, want %q", tc.form, err, tc.err)
			}
			continue
		}
		encoded, _ := json.Marshal(got)
		if err != nil || string(encoded) != tc.want {
			t.Errorf("formObject(%s) = %s, %v; want %s", tc.form, encoded, err, tc.want)
		}
	}
}

func TestFormObjectRefusesDeepNamesAndBytesThatAreNotText(t *testing.T) {
	deep := "a" + strings.Repeat("[b]", maxFormDepth+1)
	for form, want := range map[string]string{
		url.Values{deep: {"1"}}.Encode(): `the form field "a[b][b][b][b][b][b][b][b][b][b][b][b][b][b][b][b][b][b][b][b][b]"… nests deeper than 32 levels`,
		"customer=%FF":                   `the form field "customer" is not UTF-8 text`,
		"%FE=1":                          `the form field "\xfe" is not UTF-8 text`,
	} {
		values, err := url.ParseQuery(form)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := formObject(values, nil); err == nil || err.Error() != want {
			t.Errorf("formObject(%.40s…) error = %v, want %q", form, err, want)
		}
	}
	shallow := "a" + strings.Repeat("[b]", maxFormDepth-1)
	if _, err := formObject(url.Values{shallow: {"1"}}, nil); err != nil {
		t.Errorf("a form %d levels deep: %v", maxFormDepth, err)
	}
}

// The front's answer to each kind of outcome: a key the ledger cannot
// check fails closed with 503, every unfinished phase is 409, and a
// finished one states until when the key is kept.
func TestAnswerFrontStatesTheKeysWindowsAndFailsClosed(t *testing.T) {
	kept := time.Date(2026, 12, 8, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name        string
		outcome     sdk.Outcome
		status      int
		code        string
		retryAfter  string
		keptUntil   string
		downstreams string
	}{
		{name: "archive down: 503, nothing executed", outcome: sdk.Outcome{Phase: v1alpha1.PhaseAccepted, KeyUncheckable: true},
			status: http.StatusServiceUnavailable, code: codeUnavailable, retryAfter: "5"},
		{name: "accepted, checkable: 409 in flight", outcome: sdk.Outcome{Phase: v1alpha1.PhaseAccepted},
			status: http.StatusConflict, code: codeInFlight, retryAfter: "1"},
		{name: "succeeded: the windows stated", outcome: sdk.Outcome{Phase: v1alpha1.PhaseSucceeded, KeptUntil: kept, DownstreamKeptUntil: kept.Add(-24 * time.Hour)},
			status: http.StatusOK, keptUntil: "Tue, 08 Dec 2026 10:00:00 GMT", downstreams: "Mon, 07 Dec 2026 10:00:00 GMT"},
		{name: "failed: the window stated with the failure", outcome: sdk.Outcome{Phase: v1alpha1.PhaseFailed, ErrorClass: v1alpha1.ErrorClassInvalidInput, KeptUntil: kept},
			status: http.StatusBadRequest, code: string(v1alpha1.ErrorClassInvalidInput), keptUntil: "Tue, 08 Dec 2026 10:00:00 GMT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			(&Gateway{}).answerFront(w, "k-1", "action-1", answer{verdict: verdictOutcome, outcome: &tc.outcome})
			var body acpError
			_ = json.Unmarshal(w.Body.Bytes(), &body)
			got := []string{fmt.Sprint(w.Code), body.Code, w.Header().Get("Retry-After"), w.Header().Get(headerKeptUntil), w.Header().Get(headerDownstreamKeptUntil)}
			want := []string{fmt.Sprint(tc.status), tc.code, tc.retryAfter, tc.keptUntil, tc.downstreams}
			if !slices.Equal(got, want) {
				t.Errorf("status, code, Retry-After, kept until, downstream's = %q; want %q (body %s)", got, want, w.Body)
			}
		})
	}
}

// A downstream-chosen external reference with a control byte stays out of
// the header, so Go's client still reads the answer; a clean one is sent.
func TestAnswerFrontSendsOnlyPrintableExternalRefs(t *testing.T) {
	for ref, want := range map[string]string{"ch_1": "ch_1", "ch_\x01evil": "", "ch_\u00e9": ""} {
		server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			(&Gateway{}).answerFront(w, "k", "name", answer{outcome: &sdk.Outcome{Phase: v1alpha1.PhaseSucceeded, ExternalRef: ref, Result: []byte(`{"id":"x"}`)}})
		}))
		req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, server.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		server.Close()
		if err != nil {
			t.Fatalf("external reference %q: the answer cannot be read: %v", ref, err)
		}
		_ = resp.Body.Close()
		if got := resp.Header.Get(headerExternalRef); got != want || resp.StatusCode != http.StatusOK {
			t.Errorf("external reference %q: header %q, status %d; want %q, 200", ref, got, resp.StatusCode, want)
		}
	}
}
