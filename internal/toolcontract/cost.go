package toolcontract

import (
	"encoding/json"
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// The bounds of a parameter check, which the controller's workers and the
// MCP gateway run before anything else, so that no schema and no parameters
// can hold them for long. A unit of cost is about what comparing a value
// with one enum member, or visiting one property or required name of a
// schema on an object, takes; applying a schema to a value costs applyCost
// units. A unit measured 45–75 ns (kube-openapi's validator, one core).
const (
	// MaxSchemaBytes bounds a parametersSchema, encoded. A schema is also
	// what an agent reads to call the tool, in every one of its contexts.
	MaxSchemaBytes = 64 << 10
	// MaxValueCost bounds the cost of checking one value of the parameters
	// against every schema that applies to it (128 schemas): allOf, anyOf,
	// oneOf and not check the same value once per branch, so nesting them
	// multiplies.
	MaxValueCost = 128 * applyCost
	// MaxValidationCost bounds the cost of checking one action's
	// parameters, their values times the schema's cost per value: about
	// two seconds of one core, 500,000 values under a plain schema.
	MaxValidationCost = 1 << 25

	// applyCost is the cost of applying one schema to one value.
	applyCost = 64
)

// CostError refuses parameters whose check would cost more than
// MaxValidationCost.
type CostError struct {
	// Values is how many values (objects, arrays and scalars) the
	// parameters hold.
	Values int
	// ValueCost is the schema's cost of checking one of them.
	ValueCost int
}

func (e *CostError) Error() string {
	return fmt.Sprintf("spec.parameters hold %d values and the tool's parametersSchema costs up to %d to check each: "+
		"%d is over the limit of %d; send fewer values", e.Values, e.ValueCost, e.Values*e.ValueCost, MaxValidationCost)
}

// cost is what checking values against one schema costs at most.
type cost struct {
	// here is the cost at the schema's own value: its weight and its
	// branches' (allOf, anyOf, oneOf, not), which check that value too.
	here int
	// below is the most any one value under it (a property's, an item's)
	// costs.
	below int
}

// deep is the most any one value at or under the schema costs.
func (c cost) deep() int { return max(c.here, c.below) }

// schemaCost bounds, from above, the cost of checking any one value
// against s. A schema without $ref is a tree, so each of its schemas
// applies at most once to a given value: the bound is at most the schema's
// size, and the check of a document costs at most its number of values
// times the bound.
func schemaCost(s *apiextensionsv1.JSONSchemaProps) cost {
	c := cost{here: weight(s)}
	for _, child := range children(s) {
		c.below = max(c.below, schemaCost(child).deep())
	}
	// A branch checks the schema's own value and, through its own
	// children, the values under it, beside the schema's children.
	for _, branch := range branches(s) {
		b := schemaCost(branch)
		c.here += b.here
		c.below += b.below
	}
	return c
}

// weight is the cost of applying s alone to one value: the validator
// visits each of its properties and required names on an object, and
// compares the value with each of its enum members.
func weight(s *apiextensionsv1.JSONSchemaProps) int {
	w := applyCost + len(s.Properties) + len(s.Required)
	for _, member := range s.Enum {
		var v any
		_ = json.Unmarshal(member.Raw, &v) // valid JSON: decoded with the schema; else nil, counted as one
		w += countValues(v)
	}
	return w
}

// children are the schemas s applies to the values under its own.
func children(s *apiextensionsv1.JSONSchemaProps) []*apiextensionsv1.JSONSchemaProps {
	var out []*apiextensionsv1.JSONSchemaProps
	for name := range s.Properties {
		property := s.Properties[name]
		out = append(out, &property)
	}
	if s.Items != nil {
		if s.Items.Schema != nil {
			out = append(out, s.Items.Schema)
		}
		for i := range s.Items.JSONSchemas {
			out = append(out, &s.Items.JSONSchemas[i])
		}
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
		out = append(out, s.AdditionalProperties.Schema)
	}
	return out
}

// branches are the schemas that s applies to its own value besides itself.
func branches(s *apiextensionsv1.JSONSchemaProps) []*apiextensionsv1.JSONSchemaProps {
	var out []*apiextensionsv1.JSONSchemaProps
	for _, list := range [][]apiextensionsv1.JSONSchemaProps{s.AllOf, s.AnyOf, s.OneOf} {
		for i := range list {
			out = append(out, &list[i])
		}
	}
	if s.Not != nil {
		out = append(out, s.Not)
	}
	return out
}

// countValues counts the values of a decoded JSON document: every object,
// array and scalar.
func countValues(doc any) int {
	switch v := doc.(type) {
	case map[string]any:
		n := 1
		for _, member := range v {
			n += countValues(member)
		}
		return n
	case []any:
		n := 1
		for _, item := range v {
			n += countValues(item)
		}
		return n
	default:
		return 1
	}
}
