package httpcall

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/pkg/adapter"
)

// wire is the part of a recorded request that encodings and key placements
// decide, in a fixed order: the golden form of what was sent.
func wire(r recorded, keyHeaders ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s\n", r.Method, r.RequestURI)
	for _, name := range append([]string{"Content-Type"}, keyHeaders...) {
		for _, v := range r.Header.Values(name) {
			fmt.Fprintf(&b, "%s: %s\n", name, v)
		}
	}
	b.WriteString("\n" + r.Body)
	return b.String()
}

const chargeParams = `{"amount":2000,"currency":"usd","metadata":{"order":"1001","note":"a&b=c"},"expand":["customer","invoice"],` +
	`"items":[{"price":"p_1","quantity":2}],"capture":true,"description":null}`

func TestExecuteGoldenRequests(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		configure  func(*v1alpha1.HTTPAdapter)
		params     string
		keyHeaders []string
		want       string
	}{{
		name:       "JSON, structured-string key (the defaults): parameters as they came",
		params:     `{"b":1,"a":{"y":2,"x":1}}`,
		keyHeaders: []string{"Idempotency-Key"},
		want:       "POST /v1/charges\nContent-Type: application/json\nIdempotency-Key: \"shop/order-1\"\n\n" + `{"b":1,"a":{"y":2,"x":1}}`,
	}, {
		name: "Form with Stripe's bracket notation, raw key",
		configure: func(h *v1alpha1.HTTPAdapter) {
			h.Encoding = v1alpha1.EncodingForm
			h.IdempotencyKey = v1alpha1.HTTPIdempotencyKey{Format: v1alpha1.KeyRaw}
		},
		params:     chargeParams,
		keyHeaders: []string{"Idempotency-Key"},
		want: "POST /v1/charges\nContent-Type: application/x-www-form-urlencoded\nIdempotency-Key: shop/order-1\n\n" +
			"amount=2000&capture=true&currency=usd&description=&expand[]=customer&expand[]=invoice&items[0][price]=p_1&items[0][quantity]=2" +
			"&metadata[note]=a%26b%3Dc&metadata[order]=1001",
	}, {
		name: "a header the Tool names, raw",
		configure: func(h *v1alpha1.HTTPAdapter) {
			h.IdempotencyKey = v1alpha1.HTTPIdempotencyKey{Header: "PayPal-Request-Id", Format: v1alpha1.KeyRaw}
		},
		params:     `{"amount":1}`,
		keyHeaders: []string{"PayPal-Request-Id", "Idempotency-Key"},
		want:       "POST /v1/charges\nContent-Type: application/json\nPayPal-Request-Id: shop/order-1\n\n" + `{"amount":1}`,
	}, {
		name: "a field of the JSON body (Square's idempotency_key), no key header",
		configure: func(h *v1alpha1.HTTPAdapter) {
			h.IdempotencyKey = v1alpha1.HTTPIdempotencyKey{In: v1alpha1.KeyInBodyField, BodyField: "idempotency_key"}
		},
		params:     `{"amount_money":{"amount":100,"currency":"USD"},"source_id":"cnon:card-nonce-ok"}`,
		keyHeaders: []string{"Idempotency-Key"},
		want: "POST /v1/charges\nContent-Type: application/json\n\n" +
			`{"amount_money":{"amount":100,"currency":"USD"},"idempotency_key":"shop/order-1","source_id":"cnon:card-nonce-ok"}`,
	}, {
		name: "a field of a form body",
		configure: func(h *v1alpha1.HTTPAdapter) {
			h.Encoding = v1alpha1.EncodingForm
			h.IdempotencyKey = v1alpha1.HTTPIdempotencyKey{In: v1alpha1.KeyInBodyField, BodyField: "ClientToken"}
		},
		params: `{"Name":"x"}`,
		want:   "POST /v1/charges\nContent-Type: application/x-www-form-urlencoded\n\nClientToken=shop%2Forder-1&Name=x",
	}, {
		name: "Query for a DELETE: no body, parameters in the query",
		configure: func(h *v1alpha1.HTTPAdapter) {
			h.Method = "DELETE"
			h.Encoding = v1alpha1.EncodingQuery
		},
		params:     `{"expand":["customer"],"reason":"duplicate"}`,
		keyHeaders: []string{"Idempotency-Key"},
		want:       "DELETE /v1/charges?expand[]=customer&reason=duplicate\nIdempotency-Key: \"shop/order-1\"\n\n",
	}, {
		name: "URL template: escaped parameters leave the body",
		configure: func(h *v1alpha1.HTTPAdapter) {
			h.URL = strings.Replace(h.URL, "/v1/charges", "/v1/customers/{customer}/balance_transactions?currency={currency}", 1)
			h.Encoding = v1alpha1.EncodingForm
		},
		params: `{"customer":"cus/../1 2","currency":"usd&x=1","amount":-500}`,
		want:   "POST /v1/customers/cus%2F..%2F1%202/balance_transactions?currency=usd%26x%3D1\nContent-Type: application/x-www-form-urlencoded\n\namount=-500",
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t, respond(200, `{"id":"ch_1"}`))
			tool := newTool(srv.URL+"/v1/charges", func(h *v1alpha1.HTTPAdapter) {
				if tc.configure != nil {
					tc.configure(h)
				}
			})
			if _, err := connect(t, tool, nil).Execute(t.Context(), request(tc.params)); err != nil {
				t.Fatalf("Execute: %v", err)
			}
			if diff := cmp.Diff(tc.want, wire(srv.only(t), tc.keyHeaders...)); diff != "" {
				t.Errorf("request mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestExecuteRefusesWhatCannotBeEncoded(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		configure func(*v1alpha1.HTTPAdapter)
		params    string
		want      string
	}{
		{name: "a parameter in the key's field",
			configure: func(h *v1alpha1.HTTPAdapter) {
				h.IdempotencyKey = v1alpha1.HTTPIdempotencyKey{In: v1alpha1.KeyInBodyField, BodyField: "idempotency_key"}
			},
			params: `{"idempotency_key":"mine"}`, want: `InvalidRequest: parameter "idempotency_key" is the field the tool sends the idempotency key in`},
		{name: "a missing URL parameter", configure: func(h *v1alpha1.HTTPAdapter) { h.URL += "/{customer}" },
			params: `{}`, want: "InvalidRequest: url placeholder {customer}: the parameter is missing"},
		{name: "a float in the URL", configure: func(h *v1alpha1.HTTPAdapter) { h.URL += "/{customer}" },
			params: `{"customer":1.5}`, want: "InvalidRequest: url placeholder {customer}: 1.5 is not an integer"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t, respond(200, `{}`))
			_, err := connect(t, newTool(srv.URL, tc.configure), nil).Execute(t.Context(), request(tc.params))
			if got := summarize(err); got != permanent(adapter.InvalidInput, "InvalidRequest") {
				t.Errorf("error = %+v, want permanent InvalidInput", got)
			}
			if err == nil || err.Error() != tc.want {
				t.Errorf("error = %v, want %q", err, tc.want)
			}
			if n := len(srv.requests()); n != 0 {
				t.Errorf("server received %d requests, want 0", n)
			}
		})
	}
}

// TestKeyLengthAfterEncoding: the limit the Tool states holds for the key as
// sent, quotes included; a key that does not fit is shortened by the
// documented hash, and one that fits is sent whole.
func TestKeyLengthAfterEncoding(t *testing.T) {
	t.Parallel()
	long := v1alpha1.IdempotencyKey("shop", strings.Repeat("n", 253)) // 255 characters, already hashed
	fits := "shop/" + strings.Repeat("f", 57)                         // 62 characters
	tests := []struct {
		name string
		key  v1alpha1.HTTPIdempotencyKey
		in   string
		want string
	}{
		{name: "quoted 255-character key within Stripe's 255", key: v1alpha1.HTTPIdempotencyKey{MaxLength: 255}, in: long,
			want: `"` + v1alpha1.ShortenKey(long, 253) + `"`},
		{name: "raw 255-character key fits 255 as it is", key: v1alpha1.HTTPIdempotencyKey{Format: v1alpha1.KeyRaw, MaxLength: 255}, in: long, want: long},
		{name: "raw key within Adyen's and AWS's 64", key: v1alpha1.HTTPIdempotencyKey{Format: v1alpha1.KeyRaw, MaxLength: 64}, in: long,
			want: v1alpha1.ShortenKey(long, 64)},
		{name: "a fitting raw key is not shortened", key: v1alpha1.HTTPIdempotencyKey{Format: v1alpha1.KeyRaw, MaxLength: 64}, in: fits, want: fits},
		{name: "62 characters quoted are 64", key: v1alpha1.HTTPIdempotencyKey{MaxLength: 64}, in: fits, want: `"` + fits + `"`},
		{name: "63 characters quoted would be 65", key: v1alpha1.HTTPIdempotencyKey{MaxLength: 64}, in: fits + "f",
			want: `"` + v1alpha1.ShortenKey(fits+"f", 62) + `"`},
		{name: "a body field counts no quotes", key: v1alpha1.HTTPIdempotencyKey{In: v1alpha1.KeyInBodyField, BodyField: "k", MaxLength: 64}, in: long,
			want: v1alpha1.ShortenKey(long, 64)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := keyEncodingOf(tc.key).value(tc.in)
			if got != tc.want {
				t.Errorf("key sent = %q\nwant        %q", got, tc.want)
			}
			if limit := int(tc.key.MaxLength); len(got) > limit {
				t.Errorf("key sent has %d characters, over the limit of %d", len(got), limit)
			}
			if got != tc.in && got != `"`+tc.in+`"` && !strings.Contains(got, "~") {
				t.Errorf("shortened key %q lacks the ~ that sets shortened keys apart", got)
			}
		})
	}
	if a, b := keyEncodingOf(v1alpha1.HTTPIdempotencyKey{Format: v1alpha1.KeyRaw, MaxLength: 64}).value(long),
		keyEncodingOf(v1alpha1.HTTPIdempotencyKey{Format: v1alpha1.KeyRaw, MaxLength: 64}).value(long[:254]+"m"); a == b {
		t.Errorf("two keys that differ in their last character shorten to the same %q", a)
	}
}

func TestValidateURLTemplates(t *testing.T) {
	t.Parallel()
	schema := &apiextensionsv1.JSON{Raw: []byte(`{"type":"object","required":["customer","count","flag"],` +
		`"properties":{"customer":{"type":"string"},"count":{"type":"integer"},"flag":{"type":"boolean"},"memo":{"type":"string"}}}`)}
	tests := []struct {
		url, lookup string
		want        string
	}{
		{url: "https://api.example/v1/customers/{customer}/items/{count}", lookup: "https://api.example/v1/search?customer={customer}&key={key}"},
		{url: "https://api.example/{memo}", want: "spec.http.url: placeholder {memo} must name a required property of spec.parametersSchema"},
		{url: "https://api.example/{nope}", want: "spec.http.url: placeholder {nope} must name a required property of spec.parametersSchema"},
		{url: "https://api.example/{flag}", want: `spec.http.url: placeholder {flag} names a parameter of type "boolean": only string and integer parameters fill a URL`},
		{url: "https://{customer}.example/x", want: `spec.http.url: "https://{customer}.example/x": the scheme and the host are fixed, a placeholder may only fill the path or the query`},
		{url: "https://api.example/{key}", want: "spec.http.url: placeholder {key} must name a required property of spec.parametersSchema"},
		{url: "https://api.example/x", lookup: "https://api.example/{memo}?k={key}",
			want: "spec.http.lookup.url: placeholder {memo} must name a required property of spec.parametersSchema"},
	}
	for _, tc := range tests {
		t.Run(tc.url+" "+tc.lookup, func(t *testing.T) {
			t.Parallel()
			tool := newTool(tc.url, func(h *v1alpha1.HTTPAdapter) {
				if tc.lookup != "" {
					h.Lookup = &v1alpha1.HTTPLookup{URL: tc.lookup}
				}
			})
			tool.Spec.ParametersSchema = schema
			err := newConnector(t, nil).Validate(t.Context(), tool)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Validate = %v, want nil", err)
			case tc.want != "" && (err == nil || err.Error() != tc.want):
				t.Errorf("Validate = %v\nwant       %s", err, tc.want)
			}
		})
	}
}

func TestExecuteRecordsAReplay(t *testing.T) {
	t.Parallel()
	for _, header := range []string{"true", "false", ""} {
		t.Run(header, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t, respond(200, `{"id":"ch_1"}`, "Idempotent-Replayed", header))
			tool := newTool(srv.URL, func(h *v1alpha1.HTTPAdapter) { h.Response.ExternalIDPointer = "/id" })
			out, err := connect(t, tool, nil).Execute(t.Context(), request(`{}`))
			if err != nil {
				t.Fatal(err)
			}
			if want := (adapter.Outcome{ExternalRef: "ch_1", Replayed: header == "true"}); !cmp.Equal(want, out) {
				t.Errorf("outcome = %+v, want %+v", out, want)
			}
		})
	}
}

func TestErrorCodeIsKeptAndTheBodyIsNot(t *testing.T) {
	t.Parallel()
	body := `{"error":{"type":"card_error","code":"card_declined","message":"Your card was declined. Customer jane@example.com"}}`
	srv := newServer(t, respond(402, body))
	tool := newTool(srv.URL, func(h *v1alpha1.HTTPAdapter) { h.Response.ErrorCodePointer = "/error/code" })
	_, err := connect(t, tool, nil).Execute(t.Context(), request(`{}`))
	if err == nil {
		t.Fatal("Execute succeeded, want an error")
	}
	want := `HTTP402: downstream answered 402 (error code "card_declined"); body of 116 bytes, sha256:`
	if !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "jane") {
		t.Errorf("error = %q, want prefix %q and no part of the body", err, want)
	}
	if len(body) != 116 {
		t.Fatalf("the test body has %d bytes", len(body))
	}
}
