// Package catalog applies a Tool's contract to an action's request: the
// parameter schema it must satisfy and the consequential fields that make
// up its intent.
package catalog

import (
	"encoding/json"
	"fmt"
	"strings"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/toolledger/toolledger/pkg/jsonpointer"
)

// Schema checks parameters against a Tool's parametersSchema, with the same
// OpenAPI v3 subset and the same messages as the API server's CRD validation.
type Schema struct {
	validator validation.SchemaValidator
}

// CompileSchema reads a Tool's parametersSchema; nil means no schema.
func CompileSchema(raw *apiextensionsv1.JSON) (*Schema, error) {
	if raw == nil || len(raw.Raw) == 0 {
		return nil, nil
	}
	var v1 apiextensionsv1.JSONSchemaProps
	dec := json.NewDecoder(strings.NewReader(string(raw.Raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v1); err != nil {
		return nil, fmt.Errorf("parametersSchema is not an OpenAPI v3 schema: %w", err)
	}
	if err := checkTypes(field.NewPath("parametersSchema"), &v1); err != nil {
		return nil, err
	}
	var internal apiextensions.JSONSchemaProps
	if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(&v1, &internal, nil); err != nil {
		return nil, fmt.Errorf("parametersSchema cannot be converted: %w", err)
	}
	validator, _, err := validation.NewSchemaValidator(&internal)
	if err != nil {
		return nil, fmt.Errorf("parametersSchema does not compile: %w", err)
	}
	return &Schema{validator: validator}, nil
}

// checkTypes rejects type names outside OpenAPI v3, which the validator
// would otherwise ignore.
func checkTypes(path *field.Path, s *apiextensionsv1.JSONSchemaProps) error {
	switch s.Type {
	case "", "object", "array", "string", "integer", "number", "boolean":
	default:
		return fmt.Errorf("%s.type: %q is not an OpenAPI v3 type", path, s.Type)
	}
	for name, property := range s.Properties {
		if err := checkTypes(path.Child("properties").Key(name), &property); err != nil {
			return err
		}
	}
	if s.Items != nil && s.Items.Schema != nil {
		if err := checkTypes(path.Child("items"), s.Items.Schema); err != nil {
			return err
		}
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
		return checkTypes(path.Child("additionalProperties"), s.AdditionalProperties.Schema)
	}
	return nil
}

// Validate returns nil when the parameters satisfy the schema, else an error
// naming every failing field as spec.parameters.<path>.
func (s *Schema) Validate(parameters json.RawMessage) error {
	if s == nil {
		return nil
	}
	var doc any
	if err := json.Unmarshal(parameters, &doc); err != nil {
		return fmt.Errorf("spec.parameters: %w", err)
	}
	errs := validation.ValidateCustomResource(field.NewPath("spec", "parameters"), doc, s.validator)
	if len(errs) == 0 {
		return nil
	}
	return errs.ToAggregate()
}

// Parameters encodes an action's spec.parameters as the JSON object sent
// downstream: "{}" when there are none.
func Parameters(members map[string]apiextensionsv1.JSON) (json.RawMessage, error) {
	if len(members) == 0 {
		return json.RawMessage("{}"), nil
	}
	encoded, err := json.Marshal(members)
	if err != nil {
		return nil, fmt.Errorf("spec.parameters cannot be encoded: %w", err)
	}
	return encoded, nil
}

// Consequential returns the parameters that enter the request digest: the
// values at the tool's consequential fields, at their original paths, or
// all parameters when the tool names none.
func Consequential(parameters json.RawMessage, pointers []string) (json.RawMessage, error) {
	if len(pointers) == 0 {
		return parameters, nil
	}
	dec := json.NewDecoder(strings.NewReader(string(parameters)))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("spec.parameters: %w", err)
	}
	projected, _ := jsonpointer.Project(doc, pointers)
	if projected == nil {
		projected = map[string]any{}
	}
	return json.Marshal(projected)
}
