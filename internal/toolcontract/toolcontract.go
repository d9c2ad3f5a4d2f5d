// Package toolcontract applies a Tool's contract to an action's request: the
// parameter schema it must satisfy and the consequential fields that make
// up its intent.
package toolcontract

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
	// valueCost bounds the work of checking one value of the parameters:
	// see schemaCost.
	valueCost int
}

// CompileSchema reads a Tool's parametersSchema; nil means no schema. It
// refuses a schema over MaxSchemaBytes, one with a keyword whose check is
// not linear in the parameters (uniqueItems), and one that costs over
// MaxValueCost to check one of their values. Every check of parameters
// compiles the schema it uses, so a schema stored before these bounds is
// refused too, whatever its Tool's status says.
func CompileSchema(raw *apiextensionsv1.JSON) (*Schema, error) {
	if raw == nil || len(raw.Raw) == 0 {
		return nil, nil
	}
	if len(raw.Raw) > MaxSchemaBytes {
		return nil, fmt.Errorf("parametersSchema is %d bytes, over the limit of %d bytes", len(raw.Raw), MaxSchemaBytes)
	}
	var v1 apiextensionsv1.JSONSchemaProps
	dec := json.NewDecoder(strings.NewReader(string(raw.Raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v1); err != nil {
		return nil, fmt.Errorf("parametersSchema is not an OpenAPI v3 schema: %w", err)
	}
	if err := checkSupported(field.NewPath("parametersSchema"), &v1); err != nil {
		return nil, err
	}
	valueCost := schemaCost(&v1).deep()
	if valueCost > MaxValueCost {
		return nil, fmt.Errorf("parametersSchema costs up to %d to check one value of the parameters, over the limit of %d: "+
			"every allOf, anyOf, oneOf or not branch checks the same value again, each enum member is compared with it, "+
			"and each property and required name is visited on each object", valueCost, MaxValueCost)
	}
	var internal apiextensions.JSONSchemaProps
	if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(&v1, &internal, nil); err != nil {
		return nil, fmt.Errorf("parametersSchema cannot be converted: %w", err)
	}
	validator, _, err := validation.NewSchemaValidator(&internal)
	if err != nil {
		return nil, fmt.Errorf("parametersSchema does not compile: %w", err)
	}
	return &Schema{validator: validator, valueCost: valueCost}, nil
}

// UnsupportedError is a parametersSchema keyword that the controller
// cannot check: the validator would ignore it, or panic on it.
type UnsupportedError struct {
	// Path is where, as parametersSchema.properties.amount.
	Path string
	// Keyword is the unsupported keyword, quoted.
	Keyword string
	Why     string
}

func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("%s: %s is not supported: %s", e.Path, e.Keyword, e.Why)
}

// checkSupported refuses, anywhere in the schema, type names outside
// OpenAPI v3 and keywords the validator would not check as the author
// means them (an *UnsupportedError).
func checkSupported(path *field.Path, s *apiextensionsv1.JSONSchemaProps) error {
	unsupported := func(keyword, why string) error {
		return &UnsupportedError{Path: path.String(), Keyword: keyword, Why: why}
	}
	switch s.Type {
	case "", "object", "array", "string", "integer", "number", "boolean":
	default:
		return fmt.Errorf("%s.type: %q is not an OpenAPI v3 type", path, s.Type)
	}
	switch {
	case s.Ref != nil:
		return unsupported(`"$ref"`, "write the referenced schema in place")
	case s.Schema != "":
		return unsupported(`"$schema"`, "the schema is OpenAPI v3, as a CRD's")
	case s.ID != "":
		return unsupported(`"id"`, "a schema cannot be referenced")
	case len(s.Definitions) > 0:
		return unsupported(`"definitions"`, "write each schema in place")
	case len(s.Dependencies) > 0:
		return unsupported(`"dependencies"`, "a CRD schema has none either")
	case len(s.PatternProperties) > 0:
		return unsupported(`"patternProperties"`, "use additionalProperties")
	case s.AdditionalItems != nil:
		return unsupported(`"additionalItems"`, "use items")
	case len(s.XValidations) > 0:
		return unsupported(`"x-kubernetes-validations"`, "CEL rules are not evaluated on parameters")
	case s.UniqueItems:
		return unsupported(`"uniqueItems"`, "checking it takes time quadratic in the array's length, as a CRD schema refuses it too")
	case s.XListType != nil:
		return unsupported(`"x-kubernetes-list-type"`, "it is not enforced on parameters")
	case len(s.XListMapKeys) > 0:
		return unsupported(`"x-kubernetes-list-map-keys"`, "it is not enforced on parameters")
	case s.XMapType != nil:
		return unsupported(`"x-kubernetes-map-type"`, "it is not enforced on parameters")
	case s.XEmbeddedResource:
		return unsupported(`"x-kubernetes-embedded-resource"`, "parameters hold no Kubernetes objects")
	}
	for name, property := range s.Properties {
		if err := checkSupported(path.Child("properties").Key(name), &property); err != nil {
			return err
		}
	}
	if s.Items != nil {
		if s.Items.Schema != nil {
			if err := checkSupported(path.Child("items"), s.Items.Schema); err != nil {
				return err
			}
		}
		for i := range s.Items.JSONSchemas {
			if err := checkSupported(path.Child("items").Index(i), &s.Items.JSONSchemas[i]); err != nil {
				return err
			}
		}
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
		if err := checkSupported(path.Child("additionalProperties"), s.AdditionalProperties.Schema); err != nil {
			return err
		}
	}
	for keyword, schemas := range map[string][]apiextensionsv1.JSONSchemaProps{"allOf": s.AllOf, "anyOf": s.AnyOf, "oneOf": s.OneOf} {
		for i := range schemas {
			if err := checkSupported(path.Child(keyword).Index(i), &schemas[i]); err != nil {
				return err
			}
		}
	}
	if s.Not != nil {
		return checkSupported(path.Child("not"), s.Not)
	}
	return nil
}

// Validate returns nil when the parameters satisfy the schema, else an error
// naming every failing field as spec.parameters.<path>, or a *CostError,
// before any field is checked, when checking them would cost over
// MaxValidationCost.
func (s *Schema) Validate(parameters json.RawMessage) error {
	if s == nil {
		return nil
	}
	var doc any
	if err := json.Unmarshal(parameters, &doc); err != nil {
		return fmt.Errorf("spec.parameters: %w", err)
	}
	if values := countValues(doc); values*s.valueCost > MaxValidationCost {
		return &CostError{Values: values, ValueCost: s.valueCost}
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
