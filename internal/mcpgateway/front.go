package mcpgateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/auth"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/pkg/sdk"
)

// FrontPath is where the plain HTTP front is documented: POST
// FrontPath<tool> with an Idempotency-Key header records one intent, as the
// IETF Idempotency-Key draft and the Agentic Commerce Protocol's REST rules
// describe. The front serves every path the gateway serves nothing else
// at, and the last segment of the path names the tool, so that an SDK
// posting to its API's own paths reaches a Tool named after the resource
// (Stripe's client posts /v1/charges: the Tool charges).
const FrontPath = "/tools/"

// The HTTP front's headers.
const (
	headerIdempotencyKey = "Idempotency-Key"
	// headerReplayed marks an answer read from an earlier request's record.
	headerReplayed = "Idempotent-Replayed"
	// headerKey and headerPhase name the action and its phase.
	headerKey   = "Toolledger-Key"
	headerPhase = "Toolledger-Phase"
	// headerExternalRef is the downstream's identifier of the effect.
	headerExternalRef = "Toolledger-External-Ref"
	// headerKeptUntil is until when, at least, the ledger keeps the key;
	// headerDownstreamKeptUntil when the downstream forgets it (HTTP-dates).
	headerKeptUntil           = "Toolledger-Kept-Until"
	headerDownstreamKeptUntil = "Toolledger-Downstream-Kept-Until"
)

// maxFrontBody bounds a request body: the parameters of one action are 1
// MiB at most.
const maxFrontBody = 1 << 20

// maxFormDepth bounds how deep a form's a[b][c] names nest, far below what
// any API's forms use, so that one field cannot build a deep structure.
const maxFormDepth = 32

// codeInvalidParameters refuses a body that is no request of the tool.
const codeInvalidParameters = "invalid_parameters"

// front serves the plain HTTP front. Its caller is the bearer token's user
// (or the gateway's own identity in the local-only mode), as for MCP.
func (g *Gateway) front() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			refuse(w, http.StatusMethodNotAllowed, acpError{Type: acpInvalid, Code: "method_not_allowed", Message: "only POST records an intent"})
			return
		}
		name := path.Base(r.URL.Path)
		e, ok := g.publisher.lookup(name)
		if !ok {
			refuse(w, http.StatusNotFound, acpError{Type: acpInvalid, Code: "unknown_tool",
				Message: fmt.Sprintf("no tool %q is served in namespace %q: the last segment of the path names a ready Tool or ClusterTool (POST %s<tool>)", name, g.opts.Namespace, FrontPath)})
			return
		}
		key, err := idempotencyKey(r.Header.Values(headerIdempotencyKey))
		if err != nil {
			code := codeInvalidKey
			if errors.Is(err, errNoKey) {
				code = codeKeyRequired
			}
			refuse(w, http.StatusBadRequest, acpError{Type: acpInvalid, Code: code, Message: err.Error() + "; nothing was recorded"})
			return
		}
		w.Header().Set(headerIdempotencyKey, r.Header.Get(headerIdempotencyKey))
		parameters, err := frontParameters(r, e)
		if err != nil {
			var status *statusError
			if !errors.As(err, &status) {
				status = &statusError{http.StatusBadRequest, codeInvalidParameters, err}
			}
			refuse(w, status.status, acpError{Type: acpInvalid, Code: status.code, Message: status.Error() + "; nothing was recorded"})
			return
		}
		caller, err := g.callerOfToken(auth.TokenInfoFromContext(r.Context()))
		if err != nil {
			refuse(w, http.StatusUnauthorized, acpError{Type: acpInvalid, Code: "unauthenticated", Message: err.Error()})
			return
		}
		actionName, err := g.recordedName(r.Context(), caller, sdk.ClientKey(caller.name, e.ref.Name, key), sdk.ClusterToolClientKey(caller.name, e.ref.Name, key))
		if err != nil {
			g.answerFront(w, key, "", nameRefused(err))
			return
		}
		request := sdk.Request{Namespace: g.opts.Namespace, Tool: e.ref.Name, ToolKind: e.ref.Kind, Parameters: parameters, Key: actionName, ClientKey: key}
		w.Header().Set(headerKey, request.Key)
		g.answerFront(w, key, request.Key, g.record(r.Context(), caller, request, nil))
	})
}

// answerFront writes the ledger's answer: the outcome's status and body,
// or a refusal. A 5xx is only ever an answer about the gateway's or the
// archive's reach, never an outcome, so it is never replayed.
func (g *Gateway) answerFront(w http.ResponseWriter, key, name string, a answer) {
	if o := a.outcome; o != nil {
		setDate(w.Header(), headerKeptUntil, o.KeptUntil)
		setDate(w.Header(), headerDownstreamKeptUntil, o.DownstreamKeptUntil)
	}
	switch a.verdict {
	case verdictConflict:
		refuse(w, http.StatusUnprocessableEntity, acpError{Type: acpInvalid, Code: codeConflict,
			Message: fmt.Sprintf("Idempotency-Key %q has already been used with a different request (action %s); nothing was executed", key, name)})
		return
	case verdictForbidden:
		refuse(w, http.StatusForbidden, acpError{Type: acpInvalid, Code: "forbidden", Message: apiMessage(a.err)})
		return
	case verdictInvalid:
		refuse(w, http.StatusBadRequest, acpError{Type: acpInvalid, Code: codeInvalidParameters, Message: apiMessage(a.err) + "; nothing was recorded"})
		return
	case verdictCancelled, verdictUnavailable:
		w.Header().Set("Retry-After", "1")
		refuse(w, http.StatusServiceUnavailable, acpError{Type: acpUnavailable, Code: codeUnavailable, Message: unavailable(a.err)})
		return
	}
	o := a.outcome
	w.Header().Set(headerPhase, string(o.Phase))
	if o.ExternalRef != "" && printableASCII(o.ExternalRef) {
		// The downstream chose it: a control byte in a header would make the
		// whole answer unreadable to Go's and Stripe's clients. The record
		// (and the body's result) keep it as it came.
		w.Header().Set(headerExternalRef, o.ExternalRef)
	}
	if o.KeyUncheckable {
		// Fail closed: nothing runs until the key is checked.
		w.Header().Set("Retry-After", strconv.FormatInt(int64(keyCheckRetry.Seconds()), 10))
		refuse(w, http.StatusServiceUnavailable, acpError{Type: acpUnavailable, Code: codeUnavailable, Message: uncheckable(name)})
		return
	}
	if !o.Phase.IsTerminal() {
		w.Header().Set("Retry-After", strconv.FormatInt(int64(retryAfter(o.Phase).Seconds()), 10))
		refuse(w, http.StatusConflict, acpError{Type: acpInvalid, Code: codeInFlight,
			Message: fmt.Sprintf("a request with this Idempotency-Key is still being processed (action %s, phase %s); retry later with the same key and body", name, o.Phase)})
		return
	}
	if o.Deduplicated {
		w.Header().Set(headerReplayed, "true")
	}
	if o.Phase == v1alpha1.PhaseFailed {
		status, kind := http.StatusUnprocessableEntity, "processing_error"
		switch o.ErrorClass {
		case v1alpha1.ErrorClassInvalidInput:
			status, kind = http.StatusBadRequest, acpInvalid
		case v1alpha1.ErrorClassDenied:
			status, kind = http.StatusForbidden, acpInvalid
		}
		refuse(w, status, acpError{Type: kind, Code: string(o.ErrorClass), Message: fmt.Sprintf("the action failed: %s/%s: %s", o.ErrorClass, o.ErrorReason, o.Message)})
		return
	}
	body := []byte(o.Result)
	if len(body) == 0 {
		body = []byte("{}")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

// printableASCII reports whether s is only printable ASCII, the header
// values every client reads alike.
func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// setDate sets the header to t as an HTTP-date, unless t is zero.
func setDate(h http.Header, name string, t time.Time) {
	if !t.IsZero() {
		h.Set(name, t.UTC().Format(http.TimeFormat))
	}
}

func refuse(w http.ResponseWriter, status int, e acpError) {
	body, _ := json.Marshal(e)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

var errNoKey = errors.New("an Idempotency-Key header is required on every POST")

// idempotencyKey reads the one Idempotency-Key field: a Structured Field
// String, as the IETF draft writes it ("k"), or the bare value that
// Stripe's and ACP's clients send (k), which are the same key.
func idempotencyKey(values []string) (string, error) {
	switch len(values) {
	case 0:
		return "", errNoKey
	case 1:
	default:
		return "", fmt.Errorf("%d Idempotency-Key fields were sent; send one", len(values))
	}
	value := strings.Trim(values[0], " \t")
	if strings.HasPrefix(value, `"`) {
		parsed, err := sfString(value)
		if err != nil {
			return "", fmt.Errorf("the Idempotency-Key %w", err)
		}
		value = parsed
	}
	if err := sdk.ValidClientKey(value); err != nil {
		return "", fmt.Errorf("the Idempotency-Key is not a valid key: %w", err)
	}
	return value, nil
}

// sfString parses an RFC 9651 String: printable ASCII in quotes, with \"
// and \\ the only escapes.
func sfString(s string) (string, error) {
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			if i+1 >= len(s) || (s[i+1] != '"' && s[i+1] != '\\') {
				return "", errors.New(`is a quoted string with an escape other than \" or \\`)
			}
			i++
			b.WriteByte(s[i])
		case c == '"':
			if i != len(s)-1 {
				return "", errors.New("has text after its quoted string")
			}
			return b.String(), nil
		case c < ' ' || c > '~':
			return "", errors.New("is a quoted string with a character other than printable ASCII")
		default:
			b.WriteByte(c)
		}
	}
	return "", errors.New("is a quoted string without its closing quote")
}

// statusError is a refusal of the body with its own status and code.
type statusError struct {
	status int
	code   string
	err    error
}

func (e *statusError) Error() string { return e.err.Error() }

// frontParameters reads the body as the request's parameters: a JSON
// object, or a form (application/x-www-form-urlencoded, as Stripe's
// clients send) whose a[b] names nest objects and a[] append to arrays,
// its values typed as the Tool's parametersSchema types them. The
// parameters then pass the schema, as an MCP call's arguments do.
func frontParameters(r *http.Request, e *entry) (map[string]any, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxFrontBody+1))
	if err != nil {
		return nil, &statusError{http.StatusBadRequest, codeInvalidParameters, fmt.Errorf("cannot read the body: %w", err)}
	}
	if len(body) > maxFrontBody {
		return nil, &statusError{http.StatusRequestEntityTooLarge, "body_too_large", fmt.Errorf("the body is larger than %d bytes", maxFrontBody)}
	}
	var arguments json.RawMessage
	mediaType, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch {
	case len(bytes.TrimSpace(body)) == 0:
		arguments = json.RawMessage("{}")
	case mediaType == "application/json":
		if arguments, err = objectArguments(json.RawMessage(body)); err != nil {
			return nil, fmt.Errorf("the body cannot be taken: %w", err)
		}
	case mediaType == "application/x-www-form-urlencoded":
		form, err := url.ParseQuery(string(body))
		if err != nil {
			return nil, fmt.Errorf("the form cannot be read: %w", err)
		}
		var schema apiextensionsv1.JSONSchemaProps
		if e.spec.ParametersSchema != nil {
			_ = json.Unmarshal(e.spec.ParametersSchema.Raw, &schema) // newEntry refused a schema that does not decode
		}
		object, err := formObject(form, &schema)
		if err != nil {
			return nil, err
		}
		if arguments, err = json.Marshal(object); err != nil {
			return nil, fmt.Errorf("cannot encode the form: %w", err)
		}
	default:
		return nil, &statusError{http.StatusUnsupportedMediaType, "unsupported_media_type",
			fmt.Errorf("the body's Content-Type %q is neither application/json nor application/x-www-form-urlencoded", r.Header.Get("Content-Type"))}
	}
	return e.parameters(arguments, "body")
}

// formObject nests a form's fields: metadata[order]=7 is
// {"metadata":{"order":"7"}}, expand[]=a is {"expand":["a"]}. A leaf is a
// string unless the schema types it integer, number or boolean and it
// parses as one.
func formObject(form url.Values, schema *apiextensionsv1.JSONSchemaProps) (map[string]any, error) {
	root := map[string]any{}
	// In order, so that a form that cannot be read always says the same.
	for _, field := range slices.Sorted(maps.Keys(form)) {
		values := form[field]
		// JSON would turn invalid UTF-8 into U+FFFD: two different forms
		// would read as one request.
		if !utf8.ValidString(field) || slices.ContainsFunc(values, func(v string) bool { return !utf8.ValidString(v) }) {
			return nil, fmt.Errorf("the form field %q is not UTF-8 text", field)
		}
		segments, err := formPath(field)
		if err != nil {
			return nil, err
		}
		for _, value := range values {
			if err := setFormValue(root, segments, value, schema, field); err != nil {
				return nil, err
			}
		}
	}
	return root, nil
}

// formPath splits a[b][] into a, b and "" (an array append).
func formPath(field string) ([]string, error) {
	name, rest, nested := strings.Cut(field, "[")
	if name == "" {
		return nil, fmt.Errorf("the form field %q has no name", field)
	}
	segments := []string{name}
	for nested {
		if len(segments) > maxFormDepth {
			return nil, fmt.Errorf("the form field %.64q… nests deeper than %d levels", field, maxFormDepth)
		}
		var segment string
		var ok bool
		if segment, rest, ok = strings.Cut(rest, "]"); !ok {
			return nil, fmt.Errorf("the form field %q has an unclosed [", field)
		}
		segments = append(segments, segment)
		if rest == "" {
			break
		}
		if rest, nested = strings.CutPrefix(rest, "["); !nested {
			return nil, fmt.Errorf("the form field %q has text after a ]", field)
		}
	}
	return segments, nil
}

func setFormValue(object map[string]any, segments []string, value string, schema *apiextensionsv1.JSONSchemaProps, field string) error {
	name := segments[0]
	child := propertySchema(schema, name)
	switch {
	case len(segments) == 1:
		if _, taken := object[name]; taken {
			return fmt.Errorf("the form field %q is sent more than once", field)
		}
		object[name] = typedFormValue(value, child)
	case segments[1] == "" && len(segments) == 2:
		list, isList := object[name].([]any)
		if _, taken := object[name]; taken && !isList {
			return fmt.Errorf("the form field %q is both a value and a list", field)
		}
		var item *apiextensionsv1.JSONSchemaProps
		if child != nil && child.Items != nil {
			item = child.Items.Schema
		}
		object[name] = append(list, typedFormValue(value, item))
	case segments[1] == "":
		return fmt.Errorf("the form field %q nests below a list, which forms cannot say unambiguously", field)
	default:
		nested, isObject := object[name].(map[string]any)
		if _, taken := object[name]; taken && !isObject {
			return fmt.Errorf("the form field %q is both a value and an object", field)
		}
		if nested == nil {
			nested = map[string]any{}
			object[name] = nested
		}
		return setFormValue(nested, segments[1:], value, child, field)
	}
	return nil
}

// propertySchema is the schema of an object's member: its property, else
// its additionalProperties schema; nil when the schema says nothing.
func propertySchema(schema *apiextensionsv1.JSONSchemaProps, name string) *apiextensionsv1.JSONSchemaProps {
	if schema == nil {
		return nil
	}
	if p, ok := schema.Properties[name]; ok {
		return &p
	}
	if schema.AdditionalProperties != nil {
		return schema.AdditionalProperties.Schema
	}
	return nil
}

func typedFormValue(value string, schema *apiextensionsv1.JSONSchemaProps) any {
	if schema == nil {
		return value
	}
	switch schema.Type {
	case "integer":
		if n, err := strconv.ParseInt(value, 10, 64); err == nil {
			return n
		}
	case "number":
		if f, err := strconv.ParseFloat(value, 64); err == nil {
			return f
		}
	case "boolean":
		if b, err := strconv.ParseBool(value); err == nil && (value == "true" || value == "false") {
			return b
		}
	}
	return value
}
