package httpcall

import (
	"errors"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/pkg/adapter"
)

func TestCapabilities(t *testing.T) {
	c := newConnector(t, nil)
	plain := newTool("http://127.0.0.1:1/charges")
	if got, want := c.Capabilities(plain), (adapter.Capabilities{AttemptTimeout: defaultTimeout}); got != want {
		t.Errorf("Capabilities without lookup or timeout = %+v, want %+v", got, want)
	}
	full := newTool("http://127.0.0.1:1/charges", func(h *v1alpha1.HTTPAdapter) {
		h.Lookup = &v1alpha1.HTTPLookup{URL: "http://127.0.0.1:1/charges/{key}"}
		h.Timeout = &metav1.Duration{Duration: 3 * time.Second}
	})
	if got, want := c.Capabilities(full), (adapter.Capabilities{Lookup: true, AttemptTimeout: 3 * time.Second}); got != want {
		t.Errorf("Capabilities with lookup and timeout = %+v, want %+v", got, want)
	}
	conn, err := c.Connect(t.Context(), full)
	if err != nil {
		t.Fatal(err)
	}
	if conn.Capabilities != c.Capabilities(full) {
		t.Errorf("Connect's capabilities %+v differ from Capabilities %+v", conn.Capabilities, c.Capabilities(full))
	}
}

// notUsable is what a Tool learns of a Secret it may not use, whether it
// is absent, elsewhere or not labelled.
const notUsable = "Secret shop/stripe is not usable by Tools: only a Secret labelled toolledger.dev/tool-credential=true is"

func reservedMessage(name string) string {
	return "spec.http.headers: " + name + " is a header the adapter sets itself " +
		"(the idempotency key's, Accept, Content-Type, traceparent and every Toolledger- header): a Tool may not set it"
}

func TestValidate(t *testing.T) {
	auth := func(h *v1alpha1.HTTPAdapter) {
		h.AuthHeader = &v1alpha1.SecretHeader{SecretKeyRef: v1alpha1.SecretKeySelector{Name: "stripe", Key: "token"}}
	}
	tests := []struct {
		name        string
		tool        *v1alpha1.Tool
		objs        []client.Object
		wantReason  string
		wantMessage string
	}{
		{name: "usable", tool: newTool("http://127.0.0.1:1/charges", auth), objs: []client.Object{secret(namespace, map[string]string{"token": "Bearer t"})}},
		{name: "no host", tool: newTool("http:///charges"), wantReason: ReasonInvalidURL,
			wantMessage: `spec.http.url: "http:///charges" is not an absolute http(s) URL`},
		{name: "lookup without a host", tool: newTool("http://127.0.0.1:1/charges", func(h *v1alpha1.HTTPAdapter) {
			h.Lookup = &v1alpha1.HTTPLookup{URL: "https:///{key}"}
		}), wantReason: ReasonInvalidURL, wantMessage: `spec.http.lookup.url: "https:///{key}" is not an absolute http(s) URL`},
		{name: "a header the adapter sets: an approver", tool: newTool("http://127.0.0.1:1/charges", func(h *v1alpha1.HTTPAdapter) {
			h.Headers = []v1alpha1.HTTPHeader{{Name: "X-Tenant", Value: "shop"}, {Name: "toolledger-approved-by", Value: "ceo"}}
		}), wantReason: ReasonReservedHeader, wantMessage: reservedMessage("toolledger-approved-by")},
		{name: "a header the adapter sets: provenance", tool: newTool("http://127.0.0.1:1/charges", func(h *v1alpha1.HTTPAdapter) {
			h.Headers = []v1alpha1.HTTPHeader{{Name: "TOOLLEDGER-PRINCIPALS", Value: "agent"}}
		}), wantReason: ReasonReservedHeader, wantMessage: reservedMessage("TOOLLEDGER-PRINCIPALS")},
		{name: "a header the adapter sets: traceparent", tool: newTool("http://127.0.0.1:1/charges", func(h *v1alpha1.HTTPAdapter) {
			h.Headers = []v1alpha1.HTTPHeader{{Name: "Traceparent", Value: "00-x"}}
		}), wantReason: ReasonReservedHeader, wantMessage: reservedMessage("Traceparent")},
		{name: "a header the adapter sets: the key's", tool: newTool("http://127.0.0.1:1/charges", func(h *v1alpha1.HTTPAdapter) {
			h.IdempotencyKey.Header = "X-Request-Id"
			h.Headers = []v1alpha1.HTTPHeader{{Name: "x-request-id", Value: "static"}}
		}), wantReason: ReasonReservedHeader, wantMessage: reservedMessage("x-request-id")},
		{name: "a header the adapter sets: Content-Type", tool: newTool("http://127.0.0.1:1/charges", func(h *v1alpha1.HTTPAdapter) {
			h.Headers = []v1alpha1.HTTPHeader{{Name: "content-type", Value: "text/plain"}}
		}), wantReason: ReasonReservedHeader, wantMessage: reservedMessage("content-type")},
		{name: "the default key header is the Tool's when the key goes in the body", tool: newTool("http://127.0.0.1:1/charges", func(h *v1alpha1.HTTPAdapter) {
			h.IdempotencyKey = v1alpha1.HTTPIdempotencyKey{In: v1alpha1.KeyInBodyField, BodyField: "idempotency_key"}
			h.Headers = []v1alpha1.HTTPHeader{{Name: "Idempotency-Key", Value: "static"}}
		})},
		{name: "Secret missing", tool: newTool("http://127.0.0.1:1/charges", auth), wantReason: ReasonSecretNotUsable,
			wantMessage: notUsable},
		{name: "Secret not labelled", tool: newTool("http://127.0.0.1:1/charges", auth),
			objs: []client.Object{unlabelled(secret(namespace, map[string]string{"token": "Bearer t"}))}, wantReason: ReasonSecretNotUsable, wantMessage: notUsable},
		{name: "Secret key missing", tool: newTool("http://127.0.0.1:1/charges", auth), objs: []client.Object{secret(namespace, map[string]string{"api-key": "t"})},
			wantReason: ReasonSecretKeyAbsent, wantMessage: `Secret shop/stripe has no key "token"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := newConnector(t, nil, tc.objs...).Validate(t.Context(), tc.tool)
			if tc.wantReason == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			var config *adapter.ConfigError
			if !errors.As(err, &config) {
				t.Fatalf("Validate = %v (%T), want a *adapter.ConfigError", err, err)
			}
			if config.Reason != tc.wantReason || config.Message != tc.wantMessage {
				t.Errorf("Validate = %s: %q, want %s: %q", config.Reason, config.Message, tc.wantReason, tc.wantMessage)
			}
		})
	}
}

// TestPlaceholdersMustEnterTheDigest: a parameter that fills a URL chooses
// where the request goes (the payee of /customers/{customer}/charges), so
// it must be consequential: an approval binds the request digest, and a
// placeholder outside it would be sent unapproved. Validate and Connect
// refuse such a Tool; the action waits for it to be fixed.
func TestPlaceholdersMustEnterTheDigest(t *testing.T) {
	t.Parallel()
	schema := &apiextensionsv1.JSON{Raw: []byte(`{"type":"object","required":["customer","amount"],` +
		`"properties":{"customer":{"type":"string"},"amount":{"type":"integer"},"memo":{"type":"string"}}}`)}
	const charges = "https://api.example/v1/customers/{customer}/charges"
	tests := []struct {
		name          string
		url, lookup   string
		consequential []string
		want          string
	}{
		{name: "no consequentialFields: every parameter enters the digest", url: charges, lookup: "https://api.example/v1/customers/{customer}/charges/{key}"},
		{name: "the placeholder is consequential", url: charges, consequential: []string{"/amount", "/customer"}},
		{name: "the key is no parameter", url: "https://api.example/v1/charges", lookup: "https://api.example/v1/charges/{key}", consequential: []string{"/amount"}},
		{name: "the payee is not in the digest", url: charges, consequential: []string{"/amount"},
			want: `spec.http.url: placeholder {customer} names the parameter "customer", which is not one of spec.consequentialFields: ` +
				`it would be sent without entering the request digest, so an approval would not cover it; add "/customer" to spec.consequentialFields`},
		{name: "a field within the parameter is not the parameter", url: charges, consequential: []string{"/amount", "/customer/id"},
			want: `spec.http.url: placeholder {customer} names the parameter "customer", which is not one of spec.consequentialFields: ` +
				`it would be sent without entering the request digest, so an approval would not cover it; add "/customer" to spec.consequentialFields`},
		{name: "the lookup's placeholder is not in the digest", url: "https://api.example/v1/charges", consequential: []string{"/amount"},
			lookup: "https://api.example/v1/customers/{customer}/charges?key={key}",
			want: `spec.http.lookup.url: placeholder {customer} names the parameter "customer", which is not one of spec.consequentialFields: ` +
				`it would be sent without entering the request digest, so an approval would not cover it; add "/customer" to spec.consequentialFields`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tool := newTool(tc.url, func(h *v1alpha1.HTTPAdapter) {
				if tc.lookup != "" {
					h.Lookup = &v1alpha1.HTTPLookup{URL: tc.lookup}
				}
			})
			tool.Spec.ParametersSchema = schema
			tool.Spec.ConsequentialFields = tc.consequential
			c := newConnector(t, nil)
			_, connectErr := c.Connect(t.Context(), tool)
			for step, err := range map[string]error{"Validate": c.Validate(t.Context(), tool), "Connect": connectErr} {
				if tc.want == "" {
					if err != nil {
						t.Errorf("%s = %v, want nil", step, err)
					}
					continue
				}
				var config *adapter.ConfigError
				if !errors.As(err, &config) {
					t.Fatalf("%s = %v (%T), want a *adapter.ConfigError", step, err, err)
				}
				if config.Reason != ReasonNonConsequentialPlaceholder || config.Message != tc.want {
					t.Errorf("%s = %s: %q\nwant %s: %q", step, config.Reason, config.Message, ReasonNonConsequentialPlaceholder, tc.want)
				}
			}
		})
	}
}
