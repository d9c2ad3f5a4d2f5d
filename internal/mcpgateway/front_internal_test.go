package mcpgateway

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
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
