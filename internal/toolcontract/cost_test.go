package toolcontract

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

func TestSchemaCost(t *testing.T) {
	tests := []struct {
		name, schema string
		want         cost
	}{
		{name: "a scalar", schema: `{"type": "string"}`, want: cost{here: 64}},
		{name: "an object's properties and required names are visited",
			schema: `{"type": "object", "required": ["a"], "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}}`,
			want:   cost{here: 64 + 2 + 1, below: 64}},
		{name: "each enum member is compared, an object member by its values",
			schema: `{"type": "array", "items": {"enum": ["EUR", "USD", {"a": [1, 2]}]}}`,
			want:   cost{here: 64, below: 64 + 1 + 1 + 4}},
		{name: "branches check the same value again",
			schema: `{"anyOf": [{"type": "string"}, {"type": "integer"}], "not": {"type": "boolean"}}`,
			want:   cost{here: 4 * 64}},
		{name: "a branch's children add to the schema's own",
			schema: `{"type": "object", "properties": {"a": {"type": "string"}}, "oneOf": [{"properties": {"a": {"minLength": 1}}}, {"properties": {"a": {"maxLength": 9}}}]}`,
			want:   cost{here: 65 + 2*65, below: 3 * 64}},
		{name: "nested branches multiply",
			schema: `{"anyOf": [{"anyOf": [{}, {}]}, {"anyOf": [{}, {}]}]}`,
			want:   cost{here: 7 * 64}},
	}
	for _, tt := range tests {
		var s apiextensionsv1.JSONSchemaProps
		if err := json.Unmarshal([]byte(tt.schema), &s); err != nil {
			t.Fatal(err)
		}
		if got := schemaCost(&s); got != tt.want {
			t.Errorf("%s: schemaCost(%s) = %+v, want %+v", tt.name, tt.schema, got, tt.want)
		}
	}
}

func TestCompileSchemaBoundsCost(t *testing.T) {
	// Three levels of eight branches: 585 schemas check each value.
	level := func(inner string) string {
		return `{"anyOf": [` + strings.TrimSuffix(strings.Repeat(inner+",", 8), ",") + `]}`
	}
	nested := level(level(level(`{"type": "integer"}`)))
	_, err := CompileSchema(&apiextensionsv1.JSON{Raw: []byte(nested)})
	want := "parametersSchema costs up to 37440 to check one value of the parameters, over the limit of 8192: " +
		"every allOf, anyOf, oneOf or not branch checks the same value again, each enum member is compared with it, " +
		"and each property and required name is visited on each object"
	if err == nil || err.Error() != want {
		t.Errorf("CompileSchema(three levels of anyOf) = %v, want %q", err, want)
	}
	if _, err := CompileSchema(&apiextensionsv1.JSON{Raw: []byte(level(level(`{"type": "integer"}`)))}); err != nil {
		t.Errorf("CompileSchema(two levels of anyOf) = %v, want a schema", err)
	}

	large := `{"type": "string", "description": "` + strings.Repeat("x", MaxSchemaBytes) + `"}`
	_, err = CompileSchema(&apiextensionsv1.JSON{Raw: []byte(large)})
	if want := fmt.Sprintf("parametersSchema is %d bytes, over the limit of 65536 bytes", len(large)); err == nil || err.Error() != want {
		t.Errorf("CompileSchema(%d bytes) = %v, want %q", len(large), err, want)
	}
}

func TestValidateBoundsCost(t *testing.T) {
	// Each number is checked against the array's items and their eight
	// branches: 576 a value.
	schema, err := CompileSchema(&apiextensionsv1.JSON{Raw: []byte(`{"type": "object", "properties": {"ids": {"type": "array",
		"items": {"anyOf": [{"minimum": 0}, {"minimum": 1}, {"minimum": 2}, {"minimum": 3}, {"minimum": 4}, {"minimum": 5}, {"minimum": 6}, {"minimum": 7}]}}}}`)})
	if err != nil {
		t.Fatalf("CompileSchema: %v", err)
	}
	numbers := func(n int) json.RawMessage {
		return json.RawMessage(`{"ids": [` + strings.TrimSuffix(strings.Repeat("7,", n), ",") + `]}`)
	}
	// 150,000 numbers, under 1 MiB: 86,401,152 units, refused before any is checked.
	err = schema.Validate(numbers(150_000))
	var costly *CostError
	if !errors.As(err, &costly) || costly.Values != 150_002 || costly.ValueCost != 576 {
		t.Fatalf("Validate(150,000 numbers) = %v, want a *CostError of 150002 values at 576", err)
	}
	if want := "spec.parameters hold 150002 values and the tool's parametersSchema costs up to 576 to check each: " +
		"86401152 is over the limit of 33554432; send fewer values"; err.Error() != want {
		t.Errorf("Validate(150,000 numbers) = %q, want %q", err, want)
	}
	if err := schema.Validate(numbers(1000)); err != nil {
		t.Errorf("Validate(1,000 numbers) = %v, want nil", err)
	}
	if err := schema.Validate(json.RawMessage(`{"ids": [-1]}`)); err == nil || !strings.Contains(err.Error(), "spec.parameters.ids[0]") {
		t.Errorf("Validate([-1]) = %v, want the anyOf's failure at spec.parameters.ids[0]", err)
	}
}
