package toolcontract

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

func TestSchema(t *testing.T) {
	schema, err := CompileSchema(&apiextensionsv1.JSON{Raw: []byte(`{
		"type": "object", "required": ["amount"],
		"properties": {"amount": {"type": "integer", "minimum": 1}, "tags": {"type": "array", "items": {"type": "string"}}}}`)})
	if err != nil {
		t.Fatalf("CompileSchema: %v", err)
	}
	tests := []struct {
		params  string
		wantErr string
	}{
		{params: `{"amount": 5, "tags": ["a"]}`},
		{params: `{}`, wantErr: "spec.parameters.amount: Required value"},
		{params: `{"amount": 0}`, wantErr: "spec.parameters.amount: Invalid value: 0"},
		{params: `{"amount": 1, "tags": [1]}`, wantErr: "spec.parameters.tags[0]: Invalid value: \"number\": tags[0] in body must be of type string"},
	}
	for _, tt := range tests {
		err := schema.Validate(json.RawMessage(tt.params))
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("Validate(%s) = %v, want nil", tt.params, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("Validate(%s) = %v, want an error containing %q", tt.params, err, tt.wantErr)
		}
	}
}

func TestCompileSchemaRejects(t *testing.T) {
	for raw, want := range map[string]string{
		`{"type": "object", "properties": {"a": {"type": "money"}}}`: `parametersSchema.properties[a].type: "money" is not an OpenAPI v3 type`,
		`{"type": "object", "propertiez": {}}`:                       `unknown field "propertiez"`,
	} {
		_, err := CompileSchema(&apiextensionsv1.JSON{Raw: []byte(raw)})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CompileSchema(%s) = %v, want an error containing %q", raw, err, want)
		}
	}
	unsupported := map[string]string{
		`{"type": "object", "properties": {"amount": {"$ref": "#/definitions/money"}}}`:                                              `parametersSchema.properties[amount]: "$ref" is not supported: write the referenced schema in place`,
		`{"type": "object", "definitions": {"money": {"type": "integer"}}}`:                                                          `parametersSchema: "definitions" is not supported: write each schema in place`,
		`{"type": "object", "x-kubernetes-validations": [{"rule": "self.amount > 0"}]}`:                                              `parametersSchema: "x-kubernetes-validations" is not supported: CEL rules are not evaluated on parameters`,
		`{"type": "object", "properties": {"tags": {"type": "array", "items": {"$ref": "#/x"}}}}`:                                    `parametersSchema.properties[tags].items: "$ref" is not supported: write the referenced schema in place`,
		`{"type": "object", "anyOf": [{"patternProperties": {"^x-": {"type": "string"}}}]}`:                                          `parametersSchema.anyOf[0]: "patternProperties" is not supported: use additionalProperties`,
		`{"type": "object", "additionalProperties": {"type": "array", "x-kubernetes-list-type": "set"}}`:                             `parametersSchema.additionalProperties: "x-kubernetes-list-type" is not supported: it is not enforced on parameters`,
		`{"type": "object", "properties": {"ids": {"type": "array", "items": {"type": "number"}, "uniqueItems": true}}}`:             `parametersSchema.properties[ids]: "uniqueItems" is not supported: checking it takes time quadratic in the array's length, as a CRD schema refuses it too`,
		`{"type": "object", "oneOf": [{"properties": {"ids": {"type": "array", "items": {"type": "array", "uniqueItems": true}}}}]}`: `parametersSchema.oneOf[0].properties[ids].items: "uniqueItems" is not supported: checking it takes time quadratic in the array's length, as a CRD schema refuses it too`,
		`{"type": "object", "not": {"$schema": "http://json-schema.org/draft-04/schema#"}}`:                                          `parametersSchema.not: "$schema" is not supported: the schema is OpenAPI v3, as a CRD's`,
		`{"type": "object", "properties": {"a": {"type": "array", "items": {}, "additionalItems": false}}}`:                          `parametersSchema.properties[a]: "additionalItems" is not supported: use items`,
	}
	for raw, want := range unsupported {
		_, err := CompileSchema(&apiextensionsv1.JSON{Raw: []byte(raw)})
		var u *UnsupportedError
		if !errors.As(err, &u) || err.Error() != want {
			t.Errorf("CompileSchema(%s) = %v, want the *UnsupportedError %q", raw, err, want)
		}
	}
	if s, err := CompileSchema(nil); s != nil || err != nil {
		t.Errorf("CompileSchema(nil) = %v, %v; want no schema", s, err)
	}
}

func TestConsequential(t *testing.T) {
	params := json.RawMessage(`{"amount": 12345678901234567, "currency": "EUR", "memo": "hi", "card": {"last4": "4242", "cvc": "123"}}`)
	got, err := Consequential(params, []string{"/amount", "/card/last4", "/absent"})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"amount":12345678901234567,"card":{"last4":"4242"}}`; string(got) != want {
		t.Errorf("Consequential = %s, want %s (numbers kept exact, others dropped)", got, want)
	}
	all, err := Consequential(params, nil)
	if err != nil || string(all) != string(params) {
		t.Errorf("Consequential without pointers = %s, %v; want the parameters unchanged", all, err)
	}
}
