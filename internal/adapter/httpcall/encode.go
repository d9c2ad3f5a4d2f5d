package httpcall

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/pkg/jsonpointer"
)

// keyEncoding is where and how a Tool sends the idempotency key.
type keyEncoding struct {
	in        v1alpha1.HTTPKeyPlacement
	header    string
	format    v1alpha1.HTTPKeyFormat
	bodyField string
	maxLength int
}

func keyEncodingOf(spec v1alpha1.HTTPIdempotencyKey) keyEncoding {
	k := keyEncoding{in: spec.In, header: spec.Header, format: spec.Format, bodyField: spec.BodyField, maxLength: int(spec.MaxLength)}
	if k.in == "" {
		k.in = v1alpha1.KeyInHeader
	}
	if k.header == "" {
		k.header = IdempotencyKeyHeader
	}
	if k.format == "" {
		k.format = v1alpha1.KeyStructuredString
	}
	if k.maxLength <= 0 {
		k.maxLength = defaultKeyLength
	}
	return k
}

// value is the key as sent, at most maxLength characters after encoding: a
// key that does not fit is shortened by v1alpha1.ShortenKey before it is
// quoted. Keys are Kubernetes names, a "/" and perhaps "~" and hex digits,
// so quoting never needs an escape.
func (k keyEncoding) value(key string) string {
	if k.in == v1alpha1.KeyInHeader && k.format == v1alpha1.KeyStructuredString {
		return strconv.Quote(v1alpha1.ShortenKey(key, k.maxLength-len(`""`)))
	}
	return v1alpha1.ShortenKey(key, k.maxLength)
}

// placeholder matches {name} in a URL template.
var placeholder = regexp.MustCompile(`\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// placeholders are the names a URL template refers to, in order, once each.
func placeholders(template string) []string {
	var names []string
	for _, m := range placeholder.FindAllStringSubmatch(template, -1) {
		if !slices.Contains(names, m[1]) {
			names = append(names, m[1])
		}
	}
	return names
}

// expand fills a URL template: values in the path are path-escaped (so "/"
// becomes %2F), values in the query are query-escaped. A missing value or one
// that is not a string or an integer is an error naming the placeholder.
func expand(template string, values map[string]any) (string, error) {
	var problem error
	escape := func(part string, escaper func(string) string) string {
		return placeholder.ReplaceAllStringFunc(part, func(m string) string {
			name := m[1 : len(m)-1]
			text, err := scalarText(values[name], true)
			if err != nil && problem == nil {
				problem = fmt.Errorf("url placeholder {%s}: %w", name, err)
			}
			return escaper(text)
		})
	}
	path, query, hasQuery := strings.Cut(template, "?")
	out := escape(path, url.PathEscape)
	if hasQuery {
		out += "?" + escape(query, url.QueryEscape)
	}
	return out, problem
}

// scalarText is a parameter's text in a URL or a form. In a URL only strings
// and integers are accepted: a float or a boolean in a path is a mistake.
func scalarText(v any, urlPart bool) (string, error) {
	switch v := v.(type) {
	case nil:
		if urlPart {
			return "", errors.New("the parameter is missing")
		}
		return "", nil
	case string:
		if urlPart && v == "" {
			return "", errors.New("the parameter is empty")
		}
		return v, nil
	case json.Number:
		if _, err := v.Int64(); urlPart && err != nil {
			return "", fmt.Errorf("%s is not an integer", v)
		}
		return v.String(), nil
	case bool:
		if urlPart {
			return "", errors.New("a boolean cannot be part of a URL")
		}
		return strconv.FormatBool(v), nil
	default:
		return "", fmt.Errorf("a %T cannot be part of a URL or a form field", v)
	}
}

// formEncode writes parameters in the bracket notation Stripe and Rails
// read: nested objects as metadata[order]=1001, arrays of scalars as
// expand[]=customer, arrays of objects as items[0][price]=p_1. Keys are
// sorted so that the same parameters always make the same bytes; null
// values are sent empty, which Stripe reads as "unset".
func formEncode(params map[string]any) (string, error) {
	var b strings.Builder
	var walk func(name string, v any) error
	walk = func(name string, v any) error {
		switch v := v.(type) {
		case map[string]any:
			for _, k := range sortedKeys(v) {
				if err := walk(name+"["+url.QueryEscape(k)+"]", v[k]); err != nil {
					return err
				}
			}
			return nil
		case []any:
			for i, item := range v {
				switch item.(type) {
				case map[string]any, []any:
					if err := walk(name+"["+strconv.Itoa(i)+"]", item); err != nil {
						return err
					}
				default:
					if err := walk(name+"[]", item); err != nil {
						return err
					}
				}
			}
			return nil
		}
		text, err := scalarText(v, false)
		if err != nil {
			return fmt.Errorf("parameter %s: %w", name, err)
		}
		if b.Len() > 0 {
			b.WriteByte('&')
		}
		b.WriteString(name)
		b.WriteByte('=')
		b.WriteString(url.QueryEscape(text))
		return nil
	}
	for _, k := range sortedKeys(params) {
		if err := walk(url.QueryEscape(k), params[k]); err != nil {
			return "", err
		}
	}
	return b.String(), nil
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// encodedRequest is an attempt's target, body and content type.
type encodedRequest struct {
	url         string
	body        []byte
	contentType string
}

// encode builds what an attempt sends: the URL template filled from the
// parameters (which then leave the body), the key in its body field when the
// Tool puts it there, and the rest in the Tool's encoding. Parameters that
// need no change are sent as they came, byte for byte.
func (e *executor) encode(parameters json.RawMessage, key string) (encodedRequest, error) {
	if len(parameters) == 0 {
		parameters = json.RawMessage("{}")
	}
	inURL := placeholders(e.url)
	keyField := e.key.in == v1alpha1.KeyInBodyField
	if e.encoding == v1alpha1.EncodingJSON && len(inURL) == 0 && !keyField {
		return encodedRequest{url: e.url, body: parameters, contentType: "application/json"}, nil
	}
	params, err := decodeObject(parameters)
	if err != nil {
		return encodedRequest{}, err
	}
	target, err := expand(e.url, params)
	if err != nil {
		return encodedRequest{}, err
	}
	for _, name := range inURL {
		delete(params, name)
	}
	if keyField {
		if _, taken := params[e.key.bodyField]; taken {
			return encodedRequest{}, fmt.Errorf("parameter %q is the field the tool sends the idempotency key in", e.key.bodyField)
		}
		params[e.key.bodyField] = e.key.value(key)
	}
	switch e.encoding {
	case v1alpha1.EncodingForm:
		form, err := formEncode(params)
		return encodedRequest{url: target, body: []byte(form), contentType: "application/x-www-form-urlencoded"}, err
	case v1alpha1.EncodingQuery:
		query, err := formEncode(params)
		switch {
		case err != nil || query == "":
		case strings.Contains(target, "?"):
			target += "&" + query
		default:
			target += "?" + query
		}
		return encodedRequest{url: target}, err
	}
	body, err := json.Marshal(params)
	return encodedRequest{url: target, body: body, contentType: "application/json"}, err
}

// decodeObject parses the parameters, which the catalog verified to be one
// JSON object, keeping numbers exact.
func decodeObject(raw []byte) (map[string]any, error) {
	doc, err := jsonpointer.Decode(raw)
	if err != nil {
		return nil, fmt.Errorf("parameters are not a JSON object: %w", err)
	}
	params, ok := doc.(map[string]any)
	switch {
	case doc == nil:
		return map[string]any{}, nil
	case !ok:
		return nil, errors.New("parameters are not a JSON object")
	}
	return params, nil
}
