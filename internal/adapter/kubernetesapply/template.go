package kubernetesapply

import (
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/toolledger/toolledger/pkg/adapter"
	"github.com/toolledger/toolledger/pkg/jsonpointer"
)

// Reasons of a Tool's Ready condition about its template.
const (
	ReasonInvalidTemplate  = "InvalidTemplate"
	ReasonForeignNamespace = "ForeignNamespace"
	// ReasonNonConsequentialPlaceholder: a placeholder names a parameter
	// that does not enter the request digest.
	ReasonNonConsequentialPlaceholder = "NonConsequentialPlaceholder"
)

// placeholder is "{{name}}", which names a top-level parameter.
var placeholder = regexp.MustCompile(`\{\{([A-Za-z_][A-Za-z0-9_-]*)\}\}`)

// template is a Tool's spec.kubernetesApply.template, checked.
type template struct {
	object     map[string]any
	apiVersion string
	kind       string
}

// parseTemplate checks what needs no parameters: a JSON object whose
// apiVersion and kind are fixed, so that the kind's scope and the
// ServiceAccount's rights are known before any action, with a
// metadata.name and no namespace but the Tool's own, whose placeholders
// name only parameters that enter the request digest (consequentialFields,
// all parameters when empty).
func parseTemplate(raw []byte, namespace string, consequentialFields []string) (*template, error) {
	invalid := func(format string, args ...any) error {
		return &adapter.ConfigError{Reason: ReasonInvalidTemplate, Message: "spec.kubernetesApply.template: " + fmt.Sprintf(format, args...)}
	}
	doc, err := jsonpointer.Decode(raw)
	if err != nil {
		return nil, invalid("%v", err)
	}
	object, ok := doc.(map[string]any)
	if !ok {
		return nil, invalid("not a JSON object")
	}
	t := &template{object: object}
	for field, value := range map[string]*string{"apiVersion": &t.apiVersion, "kind": &t.kind} {
		text, ok := object[field].(string)
		switch {
		case !ok || text == "":
			return nil, invalid("%s must be a non-empty string", field)
		case placeholder.MatchString(text):
			return nil, invalid("%s %q is fixed: no parameter may fill it", field, text)
		}
		*value = text
	}
	metadata, ok := object["metadata"].(map[string]any)
	if !ok {
		return nil, invalid("metadata must be an object")
	}
	if name, ok := metadata["name"].(string); !ok || name == "" {
		return nil, invalid("metadata.name must be a non-empty string")
	}
	if ns, set := metadata["namespace"]; set && ns != namespace {
		return nil, &adapter.ConfigError{Reason: ReasonForeignNamespace, Message: fmt.Sprintf(
			"spec.kubernetesApply.template: metadata.namespace %v is not the Tool's namespace %q: the object is always applied in the Tool's namespace", ns, namespace)}
	}
	if err := checkPlaceholdersInDigest(object, "", consequentialFields); err != nil {
		return nil, err
	}
	return t, nil
}

// checkPlaceholdersInDigest refuses a placeholder, at pointer in the
// template or below it, whose parameter does not enter the request digest:
// the parameter shapes the object applied, and an approval binds the
// digest, so it must cover that parameter too. Members are visited in
// sorted order, so the same template always names the same placeholder.
func checkPlaceholdersInDigest(v any, pointer string, consequentialFields []string) error {
	if len(consequentialFields) == 0 {
		return nil // every parameter enters the digest
	}
	switch v := v.(type) {
	case string:
		for _, m := range placeholder.FindAllStringSubmatch(v, -1) {
			if name := m[1]; !slices.Contains(consequentialFields, "/"+name) {
				return &adapter.ConfigError{Reason: ReasonNonConsequentialPlaceholder, Message: fmt.Sprintf(
					"spec.kubernetesApply.template: placeholder {{%s}} at %s names the parameter %q, which is not one of spec.consequentialFields: it would be applied without entering the request digest, so an approval would not cover it; add \"/%s\" to spec.consequentialFields",
					name, pointer, name, name)}
			}
		}
	case map[string]any:
		for _, key := range slices.Sorted(maps.Keys(v)) {
			if err := checkPlaceholdersInDigest(v[key], pointer+"/"+escapePointer(key), consequentialFields); err != nil {
				return err
			}
		}
	case []any:
		for i, item := range v {
			if err := checkPlaceholdersInDigest(item, pointer+"/"+strconv.Itoa(i), consequentialFields); err != nil {
				return err
			}
		}
	}
	return nil
}

// escapePointer escapes a member's name as a JSON Pointer token (RFC 6901).
func escapePointer(name string) string {
	return strings.ReplaceAll(strings.ReplaceAll(name, "~", "~0"), "/", "~1")
}

// fill returns a copy of the template with its placeholders replaced by
// the parameters: a string that is one placeholder becomes the parameter's
// JSON value, of any type; a placeholder within a longer string becomes the
// text of a string, number or boolean. Inserted values are not filled in
// turn, and object keys are never filled.
func (t *template) fill(parameters json.RawMessage) (map[string]any, error) {
	values := map[string]any{}
	if len(parameters) > 0 {
		doc, err := jsonpointer.Decode(parameters)
		if err != nil {
			return nil, invalidParameter("the parameters are not JSON: %v", err)
		}
		object, ok := doc.(map[string]any)
		if !ok && doc != nil {
			return nil, invalidParameter("the parameters are not a JSON object")
		}
		if ok {
			values = object
		}
	}
	filled, err := fillValue(t.object, values)
	if err != nil {
		return nil, err
	}
	return filled.(map[string]any), nil
}

func fillValue(v any, values map[string]any) (any, error) {
	switch v := v.(type) {
	case string:
		return fillString(v, values)
	case map[string]any:
		out := make(map[string]any, len(v))
		for key, member := range v {
			filled, err := fillValue(member, values)
			if err != nil {
				return nil, err
			}
			out[key] = filled
		}
		return out, nil
	case []any:
		out := make([]any, len(v))
		for i, item := range v {
			filled, err := fillValue(item, values)
			if err != nil {
				return nil, err
			}
			out[i] = filled
		}
		return out, nil
	default:
		return v, nil
	}
}

func fillString(s string, values map[string]any) (any, error) {
	if m := placeholder.FindStringSubmatch(s); m != nil && m[0] == s {
		return lookupParameter(values, m[1])
	}
	var err error
	filled := placeholder.ReplaceAllStringFunc(s, func(p string) string {
		if err != nil {
			return p
		}
		name := placeholder.FindStringSubmatch(p)[1]
		value, lookupErr := lookupParameter(values, name)
		if lookupErr != nil {
			err = lookupErr
			return p
		}
		text, ok := textOf(value)
		if !ok {
			err = invalidParameter("parameter %q fills {{%s}} within the string %q, so it must be a string, number or boolean", name, name, s)
		}
		return text
	})
	if err != nil {
		return nil, err
	}
	return filled, nil
}

func lookupParameter(values map[string]any, name string) (any, error) {
	value, ok := values[name]
	if !ok {
		return nil, &adapter.PermanentError{Kind: adapter.InvalidInput, Reason: "MissingParameter",
			Err: fmt.Errorf("the template's {{%s}} names no parameter of the action: parameter %q is required", name, name)}
	}
	return value, nil
}

func textOf(value any) (string, bool) {
	switch v := value.(type) {
	case string:
		return v, true
	case json.Number:
		return v.String(), true
	case bool:
		if v {
			return "true", true
		}
		return "false", true
	default:
		return "", false
	}
}

func invalidParameter(format string, args ...any) error {
	return &adapter.PermanentError{Kind: adapter.InvalidInput, Reason: "InvalidParameter", Err: fmt.Errorf(format, args...)}
}
