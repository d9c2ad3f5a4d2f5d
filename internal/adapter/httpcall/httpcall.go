// Package httpcall is the HTTP(S) adapter, where the HTTP call happens: it
// sends an action's parameters as a JSON, form or query encoding with the
// idempotency key where the provider takes it, classifies the answer deliberately (see classify), and finds
// earlier requests strictly: by key, by a business reference, or by the
// provider's replay of the key (lookup.go).
package httpcall

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/internal/egress"
	"github.com/toolledger/toolledger/internal/printable"
	"github.com/toolledger/toolledger/pkg/adapter"
	"github.com/toolledger/toolledger/pkg/jsonpointer"
)

const (
	// IdempotencyKeyHeader is the default header of the key, which is sent
	// as a structured-field string by default (IETF httpapi Idempotency-Key draft).
	IdempotencyKeyHeader = "Idempotency-Key"
	// ReplayedHeader is how a provider says it answered with the stored
	// response of an earlier request under the key.
	ReplayedHeader = "Idempotent-Replayed"

	// maxResponseBytes bounds how much of a response is read.
	maxResponseBytes = 1 << 20
	// maxResultBytes bounds the stored result, which lives in etcd.
	maxResultBytes = 8 << 10
	// maxErrorBodyBytes bounds how much of an error response is quoted in a
	// message, for a Tool that stores error bodies.
	maxErrorBodyBytes = 256
	// maxErrorCodeLength bounds the provider's error code kept in a message.
	maxErrorCodeLength = 64
	defaultTimeout     = 10 * time.Second
	// defaultKeyLength is the default of spec.http.idempotencyKey.maxLength:
	// many providers accept no more than 255 characters.
	defaultKeyLength = 255
)

// Provenance headers pass the intent's provenance downstream unchanged.
// The request's traceparent (the attempt's span) goes as traceparent.
const (
	RunIDHeader        = "Toolledger-Run-Id"
	StepIDHeader       = "Toolledger-Step-Id"
	ParentTaskIDHeader = "Toolledger-Parent-Task-Id"
	TraceIDHeader      = "Toolledger-Trace-Id"
	PrincipalsHeader   = "Toolledger-Principals"
	// RequestedByHeader and ApprovedByHeader carry the verified identities
	// the API server stamped: who created the action and who approved it.
	// PrincipalsHeader carries the ones the caller claims.
	RequestedByHeader = "Toolledger-Requested-By"
	ApprovedByHeader  = "Toolledger-Approved-By"

	// toolledgerHeaderPrefix begins every header above: the adapter's own.
	toolledgerHeaderPrefix = "Toolledger-"
)

// Reasons of a Tool's Ready condition that the HTTP adapter decides.
const (
	ReasonInvalidURL = "InvalidURL"
	// ReasonSecretNotUsable: the Secret is absent, unreadable or not
	// labelled for Tools; which of these is not said, so that a Tool
	// cannot probe for Secrets.
	ReasonSecretNotUsable = "SecretNotUsable"
	ReasonSecretKeyAbsent = "SecretKeyAbsent"
	// ReasonEgressRefused: a URL names an address the egress policy refuses.
	ReasonEgressRefused = "EgressRefused"
	// ReasonInsecureCredentials: a credential would be sent over plain HTTP.
	ReasonInsecureCredentials = "InsecureCredentials"
	// ReasonReservedHeader: a static header names one the adapter sets
	// itself, such as Toolledger-Approved-By.
	ReasonReservedHeader = "ReservedHeader"
	// ReasonNonConsequentialPlaceholder: a URL placeholder names a
	// parameter that does not enter the request digest.
	ReasonNonConsequentialPlaceholder = "NonConsequentialPlaceholder"
)

// Connector is the HTTP adapter, registered as "http": it builds executors
// for Tools with spec.http, reading auth headers from Secrets in the Tool's
// namespace.
type Connector struct {
	// Secrets reads the Secrets that Tools reference.
	Secrets client.Reader
	// Transport is shared by every executor so that connections are pooled.
	// The manager's dials through the egress policy (NewTransport). A Tool
	// with spec.http.tls uses a clone of it, which needs an *http.Transport
	// (nil means http.DefaultTransport).
	Transport http.RoundTripper
	// Egress is the policy the transport dials by. Validate refuses a URL
	// naming a refused address before any action is sent to it, and a
	// credential sent over plain HTTP to a host the policy does not name;
	// nil checks neither (tests that bring their own transport).
	Egress *egress.Policy

	// tlsTransports are the clones of Transport for Tools with spec.http.tls.
	tlsTransports transportCache
}

var _ adapter.Adapter = (*Connector)(nil)

// Name is the adapter union's member, spec.http.
func (c *Connector) Name() string { return v1alpha1.AdapterHTTP }

// Capabilities offers a lookup where spec.http.lookup is set;
// spec.http.timeout bounds each call. Keys of any length are sent: the
// adapter shortens those the provider's limit does not admit.
func (c *Connector) Capabilities(tool *v1alpha1.Tool) adapter.Capabilities {
	spec := tool.Spec.HTTP
	return adapter.Capabilities{
		Lookup:         spec.Lookup != nil,
		AttemptTimeout: timeout(spec),
	}
}

// Validate checks the URLs, their placeholders against the parameters
// schema, their addresses and scheme against the egress policy, that the
// auth header's Secret is usable and has its key, and that the TLS Secrets
// are usable and hold certificates and a matching key pair.
func (c *Connector) Validate(ctx context.Context, tool *v1alpha1.Tool) error {
	spec := tool.Spec.HTTP
	if err := checkTemplate(spec.URL, tool.Spec.ParametersSchema, false); err != nil {
		return &adapter.ConfigError{Reason: ReasonInvalidURL, Message: "spec.http.url: " + err.Error()}
	}
	if spec.Lookup != nil && spec.Lookup.URL != "" {
		if err := checkTemplate(spec.Lookup.URL, tool.Spec.ParametersSchema, true); err != nil {
			return &adapter.ConfigError{Reason: ReasonInvalidURL, Message: "spec.http.lookup.url: " + err.Error()}
		}
	}
	if err := checkPlaceholdersInDigest(tool); err != nil {
		return err
	}
	if err := checkStaticHeaders(spec); err != nil {
		return err
	}
	if err := c.checkEgress(spec); err != nil {
		return err
	}
	if auth := spec.AuthHeader; auth != nil {
		if _, err := c.secretValue(ctx, tool.Namespace, auth.SecretKeyRef); err != nil {
			return err
		}
	}
	if spec.TLS != nil {
		return c.validateTLS(ctx, tool.Namespace, spec.TLS)
	}
	return nil
}

// checkPlaceholdersInDigest refuses a URL placeholder whose parameter
// does not enter the request digest: the parameter chooses where the
// request goes (the payee of /customers/{customer}/charges), and an
// approval binds the digest, so it must cover that parameter too.
func checkPlaceholdersInDigest(tool *v1alpha1.Tool) error {
	spec := tool.Spec.HTTP
	urls := map[string]string{"spec.http.url": spec.URL}
	if spec.Lookup != nil && spec.Lookup.URL != "" {
		urls["spec.http.lookup.url"] = spec.Lookup.URL
	}
	for _, field := range slices.Sorted(maps.Keys(urls)) {
		for _, name := range placeholders(urls[field]) {
			if (field == "spec.http.lookup.url" && name == "key") || inDigest(name, tool.Spec.ConsequentialFields) {
				continue
			}
			return &adapter.ConfigError{Reason: ReasonNonConsequentialPlaceholder, Message: fmt.Sprintf(
				"%s: placeholder {%s} names the parameter %q, which is not one of spec.consequentialFields: it would be sent without entering the request digest, so an approval would not cover it; add \"/%s\" to spec.consequentialFields",
				field, name, name, name)}
		}
	}
	return nil
}

// inDigest reports whether the whole top-level parameter name enters the
// request digest: every parameter does when the Tool names no
// consequentialFields. A placeholder's name needs no JSON Pointer escape.
func inDigest(name string, consequentialFields []string) bool {
	return len(consequentialFields) == 0 || slices.Contains(consequentialFields, "/"+name)
}

// checkStaticHeaders refuses a static header that the adapter sets itself:
// a Tool must not speak for the action's identities (Toolledger-Approved-By
// on an action nobody approved), its provenance, its key or its encoding.
func checkStaticHeaders(spec *v1alpha1.HTTPAdapter) error {
	key := keyEncodingOf(spec.IdempotencyKey)
	for _, h := range spec.Headers {
		if setByAdapter(h.Name, key) {
			return &adapter.ConfigError{Reason: ReasonReservedHeader, Message: "spec.http.headers: " + h.Name +
				" is a header the adapter sets itself (the idempotency key's, Accept, Content-Type, traceparent and every Toolledger- header): a Tool may not set it"}
		}
	}
	return nil
}

// setByAdapter reports whether the adapter sets the header name itself on
// some request: every Toolledger- header (identities and provenance),
// traceparent, Accept, Content-Type and the key's header.
func setByAdapter(name string, key keyEncoding) bool {
	switch {
	case len(name) >= len(toolledgerHeaderPrefix) && strings.EqualFold(name[:len(toolledgerHeaderPrefix)], toolledgerHeaderPrefix):
		return true
	case strings.EqualFold(name, adapter.TraceparentHeader), strings.EqualFold(name, "Accept"), strings.EqualFold(name, "Content-Type"):
		return true
	}
	return key.in == v1alpha1.KeyInHeader && strings.EqualFold(name, key.header)
}

// checkEgress refuses a URL whose host is an address the egress policy
// refuses (a name is checked at dial time, on what it resolves to), and
// one that would carry a credential unencrypted.
func (c *Connector) checkEgress(spec *v1alpha1.HTTPAdapter) error {
	if err := c.checkCredentialSchemes(spec); err != nil {
		return err
	}
	return forEachURL(spec, func(field string, u *url.URL) error {
		if c.Egress == nil {
			return nil
		}
		// A name is checked when it is dialed.
		if ip, err := netip.ParseAddr(u.Hostname()); err == nil {
			if err := c.Egress.Check(netip.AddrPortFrom(ip, portOf(u))); err != nil {
				return &adapter.ConfigError{Reason: ReasonEgressRefused, Message: field + ": " + err.Error()}
			}
		}
		return nil
	})
}

// checkCredentialSchemes allows the auth header over http:// only to a
// host the manager's --egress-plain-http names, such as a sidecar on
// loopback.
func (c *Connector) checkCredentialSchemes(spec *v1alpha1.HTTPAdapter) error {
	if c.Egress == nil || spec.AuthHeader == nil {
		return nil
	}
	return forEachURL(spec, func(field string, u *url.URL) error {
		if u.Scheme != "http" || c.Egress.AllowsPlainHTTP(u.Hostname()) {
			return nil
		}
		return &adapter.ConfigError{Reason: ReasonInsecureCredentials, Message: fmt.Sprintf(
			"%s: spec.http.authHeader is sent only over https://, or over http:// to a host the manager's --egress-plain-http names, and %s is not one", field, u.Hostname())}
	})
}

// forEachURL calls check with each URL a Tool's requests go to, its
// placeholders filled, in the order of their fields, until one fails.
func forEachURL(spec *v1alpha1.HTTPAdapter, check func(field string, u *url.URL) error) error {
	urls := map[string]string{"spec.http.url": spec.URL}
	if spec.Lookup != nil && spec.Lookup.URL != "" {
		urls["spec.http.lookup.url"] = spec.Lookup.URL
	}
	for _, field := range slices.Sorted(maps.Keys(urls)) {
		u, err := url.Parse(placeholder.ReplaceAllString(urls[field], "x"))
		if err != nil {
			return &adapter.ConfigError{Reason: ReasonInvalidURL, Message: field + ": " + err.Error()}
		}
		if err := check(field, u); err != nil {
			return err
		}
	}
	return nil
}

func portOf(u *url.URL) uint16 {
	if port, err := strconv.ParseUint(u.Port(), 10, 16); err == nil {
		return uint16(port)
	}
	if u.Scheme == "https" {
		return 443
	}
	return 80
}

// checkTemplate checks that a URL template, filled, is an absolute http(s)
// URL whose host no parameter chooses, and that every placeholder names a
// required string or integer parameter ({key}, in a lookup, is the key).
func checkTemplate(template string, schema *apiextensionsv1.JSON, lookup bool) error {
	filled := placeholder.ReplaceAllString(template, "x")
	u, err := url.Parse(filled)
	if err != nil {
		return err
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q is not an absolute http(s) URL", template)
	}
	authority, _, _ := strings.Cut(template, "://")
	_, rest, _ := strings.Cut(template, "://")
	if end := strings.IndexAny(rest, "/?#"); placeholder.MatchString(authority) || (end < 0 && placeholder.MatchString(rest)) ||
		(end >= 0 && placeholder.MatchString(rest[:end])) {
		return fmt.Errorf("%q: the scheme and the host are fixed, a placeholder may only fill the path or the query", template)
	}
	var declared struct {
		Required   []string `json:"required"`
		Properties map[string]struct {
			Type string `json:"type"`
		} `json:"properties"`
	}
	if schema != nil {
		if err := json.Unmarshal(schema.Raw, &declared); err != nil {
			return fmt.Errorf("cannot read spec.parametersSchema: %w", err)
		}
	}
	for _, name := range placeholders(template) {
		if lookup && name == "key" {
			continue
		}
		property, ok := declared.Properties[name]
		if !ok || !slices.Contains(declared.Required, name) {
			return fmt.Errorf("placeholder {%s} must name a required property of spec.parametersSchema", name)
		}
		if property.Type != "string" && property.Type != "integer" {
			return fmt.Errorf("placeholder {%s} names a parameter of type %q: only string and integer parameters fill a URL", name, property.Type)
		}
	}
	return nil
}

func timeout(spec *v1alpha1.HTTPAdapter) time.Duration {
	return adapter.TimeoutOr(spec.Timeout, defaultTimeout)
}

// Connect resolves the Tool's HTTP configuration and credentials. It
// refuses a Tool whose URL placeholders are not all in the request digest,
// as Validate does: no action is sent with a parameter its approval did
// not cover.
func (c *Connector) Connect(ctx context.Context, tool *v1alpha1.Tool) (adapter.Connection, error) {
	spec := tool.Spec.HTTP
	if err := checkPlaceholdersInDigest(tool); err != nil {
		return adapter.Connection{}, err
	}
	key := keyEncodingOf(spec.IdempotencyKey)
	headers := http.Header{}
	for _, h := range spec.Headers {
		// Validate refuses such a header; should a Tool still hold one, the
		// adapter's own value is sent, or none, never the Tool's.
		if !setByAdapter(h.Name, key) {
			headers.Set(h.Name, h.Value)
		}
	}
	if auth := spec.AuthHeader; auth != nil {
		if err := c.checkCredentialSchemes(spec); err != nil {
			return adapter.Connection{}, err
		}
		value, err := c.secretValue(ctx, tool.Namespace, auth.SecretKeyRef)
		if err != nil {
			return adapter.Connection{}, err
		}
		name := auth.Name
		if name == "" {
			name = "Authorization"
		}
		headers.Set(name, strings.TrimSpace(string(value)))
	}
	transport, err := c.transport(ctx, tool.Namespace, spec.TLS)
	if err != nil {
		return adapter.Connection{}, err
	}
	method := spec.Method
	if method == "" {
		method = http.MethodPost
	}
	encoding := spec.Encoding
	if encoding == "" {
		encoding = v1alpha1.EncodingJSON
	}
	e := &executor{
		client: &http.Client{
			Transport: transport,
			// A redirect would re-send the request elsewhere; report it instead.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		method:   method,
		url:      spec.URL,
		encoding: encoding,
		key:      key,
		headers:  headers,
		timeout:  timeout(spec),
		response: spec.Response,
		lookup:   spec.Lookup,
		now:      time.Now,
	}
	return adapter.Connection{Executor: e, Capabilities: c.Capabilities(tool)}, nil
}

// secretValue reads a key of a Secret that opted in to Tools.
func (c *Connector) secretValue(ctx context.Context, namespace string, ref v1alpha1.SecretKeySelector) ([]byte, error) {
	secret, err := c.labelledSecret(ctx, namespace, ref.Name)
	if err != nil {
		return nil, err
	}
	return secretKey(secret, ref.Key)
}

// labelledSecret reads a Secret that opted in to Tools with the label
// v1alpha1.ToolCredentialLabel: writing a Tool must not be a way to read
// the namespace's other Secrets, nor to learn whether they exist.
func (c *Connector) labelledSecret(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
	var secret corev1.Secret
	err := c.Secrets.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &secret)
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err) {
		return nil, fmt.Errorf("cannot read Secret %s/%s: %w", namespace, name, err)
	}
	if err != nil || secret.Labels[v1alpha1.ToolCredentialLabel] != "true" {
		return nil, &adapter.ConfigError{Reason: ReasonSecretNotUsable, Message: fmt.Sprintf(
			"Secret %s/%s is not usable by Tools: only a Secret labelled %s=true is", namespace, name, v1alpha1.ToolCredentialLabel)}
	}
	return &secret, nil
}

func secretKey(secret *corev1.Secret, key string) ([]byte, error) {
	value, ok := secret.Data[key]
	if !ok {
		return nil, &adapter.ConfigError{Reason: ReasonSecretKeyAbsent, Message: fmt.Sprintf("Secret %s/%s has no key %q", secret.Namespace, secret.Name, key)}
	}
	return value, nil
}

type executor struct {
	client   *http.Client
	method   string
	url      string
	encoding v1alpha1.HTTPEncoding
	key      keyEncoding
	headers  http.Header
	timeout  time.Duration
	response v1alpha1.HTTPResponse
	lookup   *v1alpha1.HTTPLookup
	now      func() time.Time
}

// Execute sends one attempt. net/http never re-sends it on its own: the body
// cannot be rewound (GetBody is nil) and redirects are not followed.
func (e *executor) Execute(ctx context.Context, req adapter.Request) (adapter.Outcome, error) {
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()

	encoded, err := e.encode(req.Parameters, req.IdempotencyKey)
	if err != nil {
		return adapter.Outcome{}, &adapter.PermanentError{Kind: adapter.InvalidInput, Reason: "InvalidRequest", Err: err}
	}
	ctx, written := adapter.TraceWritten(ctx)
	var body io.Reader
	if encoded.body != nil {
		body = bytes.NewReader(encoded.body)
	}
	httpReq, err := http.NewRequestWithContext(ctx, e.method, encoded.url, body)
	if err != nil {
		return adapter.Outcome{}, &adapter.PermanentError{Kind: adapter.InvalidInput, Reason: "InvalidRequest", Err: adapter.ShowURL(err, e.url)}
	}
	httpReq.GetBody = nil
	e.setHeaders(httpReq, req)
	setProvenance(httpReq.Header, req.Provenance)
	setIdentities(httpReq.Header, req.RequestedBy, req.ApprovedBy)
	if encoded.contentType != "" {
		httpReq.Header.Set("Content-Type", encoded.contentType)
	}
	if err := validHeaderValues(httpReq.Header); err != nil {
		return adapter.Outcome{}, &adapter.PermanentError{Kind: adapter.InvalidInput, Reason: "InvalidRequest", Err: err}
	}

	resp, err := e.client.Do(httpReq)
	if err != nil {
		if refused := (*egress.RefusedError)(nil); errors.As(err, &refused) {
			return adapter.Outcome{}, &adapter.PermanentError{Kind: adapter.Denied, Reason: ReasonEgressRefused, Err: refused}
		}
		return adapter.Outcome{}, adapter.TransportError(adapter.ShowURL(err, e.url), written(), ctx.Err())
	}
	defer func() { _ = resp.Body.Close() }()
	respBody, readErr := readBody(resp.Body)
	return e.classify(resp, respBody, readErr)
}

// setHeaders sets the Tool's headers, the key's unless it goes in the
// body, and the traceparent of the attempt's or lookup's span.
func (e *executor) setHeaders(httpReq *http.Request, req adapter.Request) {
	for name, values := range e.headers {
		httpReq.Header[name] = values
	}
	httpReq.Header.Set("Accept", "application/json")
	if e.key.in == v1alpha1.KeyInHeader {
		httpReq.Header.Set(e.key.header, e.key.value(req.IdempotencyKey))
	}
	if req.Traceparent != "" {
		httpReq.Header.Set(adapter.TraceparentHeader, req.Traceparent)
	}
}

func setIdentities(h http.Header, requestedBy, approvedBy string) {
	if requestedBy != "" {
		h.Set(RequestedByHeader, requestedBy)
	}
	if approvedBy != "" {
		h.Set(ApprovedByHeader, approvedBy)
	}
}

func setProvenance(h http.Header, p *v1alpha1.Provenance) {
	if p == nil {
		return
	}
	for header, value := range map[string]string{
		RunIDHeader:        p.RunID,
		StepIDHeader:       p.StepID,
		ParentTaskIDHeader: p.ParentTaskID,
		TraceIDHeader:      p.TraceID,
		PrincipalsHeader:   strings.Join(p.Principals, ", "),
	} {
		if value != "" {
			h.Set(header, value)
		}
	}
}

// validHeaderValues rejects the values net/http refuses to send (control
// characters other than tab), which no retry can fix. The error names the
// header but not the value, which may be a credential.
func validHeaderValues(h http.Header) error {
	for name, values := range h {
		for _, v := range values {
			for i := 0; i < len(v); i++ {
				if b := v[i]; (b < ' ' && b != '\t') || b == 0x7f {
					return fmt.Errorf("invalid value for header %s", name)
				}
			}
		}
	}
	return nil
}

// classify maps an HTTP answer to an outcome or a typed error:
//
//	2xx                      success
//	2xx, body lost           ambiguous (applied, but the outcome was not read)
//	400, 422                 permanent, InvalidInput
//	401, 403                 permanent, Denied
//	408, 409, 429, 503       retryable under the same key, honoring Retry-After
//	other 3xx and 4xx, 501   permanent, InvalidInput (misconfigured endpoint)
//	500, 502, 504, other 5xx ambiguous (may have applied before failing)
func (e *executor) classify(resp *http.Response, body []byte, readErr error) (adapter.Outcome, error) {
	code := resp.StatusCode
	reason := "HTTP" + strconv.Itoa(code)
	tooLarge := errors.Is(readErr, errBodyTooLarge)
	if code >= 200 && code < 300 {
		if tooLarge {
			// Applied; what it says is not read.
			return adapter.Outcome{Replayed: replayed(resp.Header), Warnings: []string{readErr.Error() + "; no external id or result recorded"}}, nil
		}
		if readErr != nil {
			return adapter.Outcome{}, &adapter.AmbiguousError{Reason: "ResponseLost",
				Err: fmt.Errorf("downstream answered %d but the response body was lost: %w", code, readErr)}
		}
		out := e.outcome(body)
		out.Replayed = replayed(resp.Header)
		return out, nil
	}
	err := fmt.Errorf("downstream answered %s", e.describeError(code, body, tooLarge))
	switch {
	case code == http.StatusBadRequest || code == http.StatusUnprocessableEntity:
		return adapter.Outcome{}, &adapter.PermanentError{Kind: adapter.InvalidInput, Reason: reason, Err: err}
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		return adapter.Outcome{}, &adapter.PermanentError{Kind: adapter.Denied, Reason: reason, Err: err}
	case code == http.StatusRequestTimeout || code == http.StatusConflict ||
		code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable:
		return adapter.Outcome{}, &adapter.RetryableError{Reason: reason, RetryAfter: retryAfter(resp.Header.Get("Retry-After"), time.Now()), Err: err}
	case code < 500 || code == http.StatusNotImplemented:
		return adapter.Outcome{}, &adapter.PermanentError{Kind: adapter.InvalidInput, Reason: reason, Err: err}
	default:
		return adapter.Outcome{}, &adapter.AmbiguousError{Reason: reason, Err: err}
	}
}

func replayed(h http.Header) bool {
	return strings.EqualFold(strings.TrimSpace(h.Get(ReplayedHeader)), "true")
}

// describeError is what is kept of an error answer: the status code, the
// provider's error code where the Tool points at one, and the body's size
// and SHA-256, which match it against the provider's logs without copying
// it; the body itself, cut and with control characters escaped, only where
// the Tool opts in. A cut body (truncated: it was longer than is read) is
// only measured.
func (e *executor) describeError(code int, body []byte, truncated bool) string {
	message := strconv.Itoa(code)
	if truncated {
		return fmt.Sprintf("%s; body of more than %d bytes, not read further", message, maxResponseBytes)
	}
	if p := e.response.ErrorCodePointer; p != "" {
		if doc, err := jsonpointer.Decode(body); err == nil {
			if v, ok := jsonpointer.Get(doc, p); ok {
				if text, err := scalarText(v, false); err == nil && text != "" {
					message += fmt.Sprintf(" (error code %q)", truncate(printableASCII(text), maxErrorCodeLength))
				}
			}
		}
	}
	if e.response.StoreErrorBody {
		return message + ": " + quote(body)
	}
	if len(body) == 0 {
		return message + " with an empty body"
	}
	sum := sha256.Sum256(body)
	return fmt.Sprintf("%s; body of %d bytes, sha256:%s, not stored", message, len(body), hex.EncodeToString(sum[:8]))
}

// printableASCII keeps the printable ASCII of s: an error code lands in a
// message, never control characters or markup from a downstream.
func printableASCII(s string) string {
	return strings.Map(func(r rune) rune {
		if r < ' ' || r > '~' || r == '"' {
			return -1
		}
		return r
	}, s)
}

// outcome extracts the external id and the allowed result fields. A response
// that lacks them is still a success: the effect happened.
func (e *executor) outcome(body []byte) adapter.Outcome {
	var out adapter.Outcome
	if e.response.ExternalIDPointer == "" && len(e.response.ResultPointers) == 0 {
		return out
	}
	doc, err := jsonpointer.Decode(body)
	if err != nil {
		out.Warnings = append(out.Warnings, "response is not JSON; no external id or result recorded")
		return out
	}
	return e.outcomeOf(doc)
}

// outcomeOf extracts them from a decoded document, such as a lookup's match.
func (e *executor) outcomeOf(doc any) adapter.Outcome {
	var out adapter.Outcome
	if p := e.response.ExternalIDPointer; p != "" {
		ref, err := externalRef(doc, p)
		if err != nil {
			out.Warnings = append(out.Warnings, err.Error())
		}
		out.ExternalRef = ref
	}
	if len(e.response.ResultPointers) > 0 {
		result, missing := jsonpointer.Project(doc, e.response.ResultPointers)
		for _, pointer := range missing {
			out.Warnings = append(out.Warnings, fmt.Sprintf("response has no result field at %s", pointer))
		}
		if result != nil {
			encoded, _ := json.Marshal(result) // values came from json.Unmarshal
			if len(encoded) > maxResultBytes {
				out.Warnings = append(out.Warnings, fmt.Sprintf("result of %d bytes exceeds %d bytes; not stored", len(encoded), maxResultBytes))
			} else {
				out.Result = encoded
			}
		}
	}
	return out
}

func externalRef(doc any, pointer string) (string, error) {
	v, ok := jsonpointer.Get(doc, pointer)
	if !ok {
		return "", fmt.Errorf("response has no external id at %s", pointer)
	}
	switch id := v.(type) {
	case string:
		return id, nil
	case json.Number:
		return id.String(), nil
	default:
		return "", fmt.Errorf("external id at %s is not a string or number", pointer)
	}
}

// retryAfter parses delay-seconds or an HTTP date; zero means not given.
func retryAfter(value string, now time.Time) time.Duration {
	if value == "" {
		return 0
	}
	if seconds, err := strconv.Atoi(strings.TrimSpace(value)); err == nil && seconds >= 0 {
		if seconds > int(math.MaxInt64/time.Second) {
			return math.MaxInt64 // saturate instead of overflowing
		}
		return time.Duration(seconds) * time.Second
	}
	if at, err := http.ParseTime(value); err == nil && at.After(now) {
		return at.Sub(now)
	}
	return 0
}

// quote is the start of an error body for a message, with control
// characters escaped: it may reach a terminal.
func quote(body []byte) string {
	s := strings.TrimSpace(string(body))
	if s == "" {
		return "(empty body)"
	}
	return printable.Escape(truncate(s, maxErrorBodyBytes))
}

// errBodyTooLarge: a response is longer than maxResponseBytes.
var errBodyTooLarge = fmt.Errorf("response exceeds %d bytes", maxResponseBytes)

// readBody reads up to maxResponseBytes of a response; errBodyTooLarge
// says there was more, which is left unread.
func readBody(r io.Reader) ([]byte, error) {
	body, err := io.ReadAll(io.LimitReader(r, maxResponseBytes+1))
	if err == nil && len(body) > maxResponseBytes {
		return body[:maxResponseBytes], errBodyTooLarge
	}
	return body, err
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}

// NewTransport is the manager's transport for tools: it dials through the
// egress dialer, keeps maxIdlePerHost connections to a host for the calls
// in flight, and ignores HTTP(S)_PROXY, through which the policy would see
// only the proxy's address.
func NewTransport(dialer *egress.Dialer, maxIdlePerHost int) *http.Transport {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.Proxy = nil
	transport.DialContext = dialer.DialContext
	transport.MaxIdleConnsPerHost = maxIdlePerHost
	return transport
}
