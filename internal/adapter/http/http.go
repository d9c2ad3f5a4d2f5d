// Package http is the HTTP(S) adapter: it sends an action's parameters as a
// JSON body with the Idempotency-Key header, classifies the answer
// deliberately (see classify), and looks earlier requests up by key.
package http

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	nethttp "net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/pkg/adapter"
	"github.com/toolledger/toolledger/pkg/jsonpointer"
)

const (
	// IdempotencyKeyHeader carries the key, as a structured-field string
	// (IETF httpapi Idempotency-Key draft).
	IdempotencyKeyHeader = "Idempotency-Key"

	// maxResponseBytes bounds how much of a response is read.
	maxResponseBytes = 1 << 20
	// maxResultBytes bounds the stored result, which lives in etcd.
	maxResultBytes = 8 << 10
	// maxErrorBodyBytes bounds how much of an error response is quoted in a message.
	maxErrorBodyBytes = 256
	defaultTimeout    = 10 * time.Second
)

// Provenance headers pass the intent's provenance downstream unchanged.
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
)

// Reasons of a Tool's Ready condition that the HTTP adapter decides.
const (
	ReasonInvalidURL      = "InvalidURL"
	ReasonSecretNotFound  = "SecretNotFound"
	ReasonSecretKeyAbsent = "SecretKeyAbsent"
)

// maxKeyLength is the longest key sent: many providers accept no more than
// 255 characters, and v1alpha1.IdempotencyKey never makes a longer one.
const maxKeyLength = 255

// Connector is the HTTP adapter, registered as "http": it builds executors
// for Tools with spec.http, reading auth headers from Secrets in the Tool's
// namespace.
type Connector struct {
	// Secrets reads the Secrets that Tools reference.
	Secrets client.Reader
	// Transport is shared by every executor so that connections are pooled.
	Transport nethttp.RoundTripper
}

var _ adapter.Adapter = (*Connector)(nil)

// Name is the adapter union's member, spec.http.
func (c *Connector) Name() string { return v1alpha1.AdapterHTTP }

// Capabilities offers a lookup where spec.http.lookup is set;
// spec.http.timeout bounds each call.
func (c *Connector) Capabilities(tool *v1alpha1.Tool) adapter.Capabilities {
	spec := tool.Spec.HTTP
	return adapter.Capabilities{
		Lookup:         spec.Lookup != nil,
		AttemptTimeout: timeout(spec),
		MaxKeyLength:   maxKeyLength,
	}
}

// Validate checks the URLs and that the auth header's Secret key exists.
func (c *Connector) Validate(ctx context.Context, tool *v1alpha1.Tool) error {
	spec := tool.Spec.HTTP
	if err := checkURL(spec.URL); err != nil {
		return &adapter.ConfigError{Reason: ReasonInvalidURL, Message: "spec.http.url: " + err.Error()}
	}
	if spec.Lookup != nil {
		if err := checkURL(strings.ReplaceAll(spec.Lookup.URL, "{key}", "key")); err != nil {
			return &adapter.ConfigError{Reason: ReasonInvalidURL, Message: "spec.http.lookup.url: " + err.Error()}
		}
	}
	if auth := spec.AuthHeader; auth != nil {
		ref := auth.SecretKeyRef
		var secret corev1.Secret
		err := c.Secrets.Get(ctx, types.NamespacedName{Namespace: tool.Namespace, Name: ref.Name}, &secret)
		switch {
		case apierrors.IsNotFound(err):
			return &adapter.ConfigError{Reason: ReasonSecretNotFound, Message: fmt.Sprintf("Secret %s/%s not found", tool.Namespace, ref.Name)}
		case err != nil:
			return &adapter.ConfigError{Reason: ReasonSecretNotFound, Message: fmt.Sprintf("cannot read Secret %s/%s: %v", tool.Namespace, ref.Name, err)}
		}
		if _, ok := secret.Data[ref.Key]; !ok {
			return &adapter.ConfigError{Reason: ReasonSecretKeyAbsent, Message: fmt.Sprintf("Secret %s/%s has no key %q", tool.Namespace, ref.Name, ref.Key)}
		}
	}
	return nil
}

func checkURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q is not an absolute http(s) URL", raw)
	}
	return nil
}

func timeout(spec *v1alpha1.HTTPAdapter) time.Duration {
	if spec.Timeout != nil && spec.Timeout.Duration > 0 {
		return spec.Timeout.Duration
	}
	return defaultTimeout
}

// Connect resolves the Tool's HTTP configuration and credentials.
func (c *Connector) Connect(ctx context.Context, tool *v1alpha1.Tool) (adapter.Connection, error) {
	spec := tool.Spec.HTTP
	headers := nethttp.Header{}
	for _, h := range spec.Headers {
		headers.Set(h.Name, h.Value)
	}
	if auth := spec.AuthHeader; auth != nil {
		value, err := c.secretValue(ctx, tool.Namespace, auth.SecretKeyRef)
		if err != nil {
			return adapter.Connection{}, err
		}
		name := auth.Name
		if name == "" {
			name = "Authorization"
		}
		headers.Set(name, value)
	}
	method := spec.Method
	if method == "" {
		method = nethttp.MethodPost
	}
	e := &executor{
		client: &nethttp.Client{
			Transport: c.Transport,
			// A redirect would re-send the request elsewhere; report it instead.
			CheckRedirect: func(*nethttp.Request, []*nethttp.Request) error { return nethttp.ErrUseLastResponse },
		},
		method:   method,
		url:      spec.URL,
		headers:  headers,
		timeout:  timeout(spec),
		response: spec.Response,
	}
	if spec.Lookup != nil {
		e.lookupURL = spec.Lookup.URL
	}
	return adapter.Connection{Executor: e, Capabilities: c.Capabilities(tool)}, nil
}

func (c *Connector) secretValue(ctx context.Context, namespace string, ref v1alpha1.SecretKeySelector) (string, error) {
	var secret corev1.Secret
	if err := c.Secrets.Get(ctx, types.NamespacedName{Namespace: namespace, Name: ref.Name}, &secret); err != nil {
		return "", fmt.Errorf("cannot read Secret %s/%s: %w", namespace, ref.Name, err)
	}
	value, ok := secret.Data[ref.Key]
	if !ok {
		return "", fmt.Errorf("secret %s/%s has no key %q", namespace, ref.Name, ref.Key)
	}
	return strings.TrimSpace(string(value)), nil
}

type executor struct {
	client    *nethttp.Client
	method    string
	url       string
	lookupURL string
	headers   nethttp.Header
	timeout   time.Duration
	response  v1alpha1.HTTPResponse
}

// Execute sends one attempt. net/http never re-sends it on its own: the body
// cannot be rewound (GetBody is nil) and redirects are not followed.
func (e *executor) Execute(ctx context.Context, req adapter.Request) (adapter.Outcome, error) {
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()

	body := req.Parameters
	if len(body) == 0 {
		body = json.RawMessage("{}")
	}
	var written atomic.Bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(info httptrace.WroteRequestInfo) {
			if info.Err == nil {
				written.Store(true)
			}
		},
	})
	httpReq, err := nethttp.NewRequestWithContext(ctx, e.method, e.url, bytes.NewReader(body))
	if err != nil {
		return adapter.Outcome{}, &adapter.PermanentError{Kind: adapter.InvalidInput, Reason: "InvalidRequest", Err: err}
	}
	httpReq.GetBody = nil
	e.setHeaders(httpReq, req.IdempotencyKey)
	setProvenance(httpReq.Header, req.Provenance)
	setIdentities(httpReq.Header, req.RequestedBy, req.ApprovedBy)
	httpReq.Header.Set("Content-Type", "application/json")
	if err := validHeaderValues(httpReq.Header); err != nil {
		return adapter.Outcome{}, &adapter.PermanentError{Kind: adapter.InvalidInput, Reason: "InvalidRequest", Err: err}
	}

	resp, err := e.client.Do(httpReq)
	if err != nil {
		return adapter.Outcome{}, classifyTransportError(err, written.Load(), ctx.Err())
	}
	defer func() { _ = resp.Body.Close() }()
	respBody, readErr := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	return e.classify(resp, respBody, readErr)
}

// Lookup asks the downstream whether a request with the key was applied.
func (e *executor) Lookup(ctx context.Context, req adapter.Request) (adapter.Outcome, error) {
	idempotencyKey := req.IdempotencyKey
	if e.lookupURL == "" {
		return adapter.Outcome{}, adapter.ErrLookupUnsupported
	}
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	target := strings.ReplaceAll(e.lookupURL, "{key}", url.PathEscape(idempotencyKey))
	httpReq, err := nethttp.NewRequestWithContext(ctx, nethttp.MethodGet, target, nil)
	if err != nil {
		return adapter.Outcome{}, fmt.Errorf("cannot build lookup request: %w", err)
	}
	e.setHeaders(httpReq, idempotencyKey)
	resp, err := e.client.Do(httpReq)
	if err != nil {
		return adapter.Outcome{}, fmt.Errorf("lookup failed: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	respBody, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return adapter.Outcome{}, fmt.Errorf("lookup response lost: %w", err)
	}
	switch resp.StatusCode {
	case nethttp.StatusOK:
		return e.outcome(respBody), nil
	case nethttp.StatusNotFound:
		return adapter.Outcome{}, adapter.ErrNotFound
	default:
		return adapter.Outcome{}, fmt.Errorf("lookup answered %d: %s", resp.StatusCode, quote(respBody))
	}
}

func (e *executor) setHeaders(req *nethttp.Request, idempotencyKey string) {
	for name, values := range e.headers {
		req.Header[name] = values
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set(IdempotencyKeyHeader, strconv.Quote(idempotencyKey))
}

func setIdentities(h nethttp.Header, requestedBy, approvedBy string) {
	if requestedBy != "" {
		h.Set(RequestedByHeader, requestedBy)
	}
	if approvedBy != "" {
		h.Set(ApprovedByHeader, approvedBy)
	}
}

func setProvenance(h nethttp.Header, p *v1alpha1.Provenance) {
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
func validHeaderValues(h nethttp.Header) error {
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

// classifyTransportError decides from whether the request was fully written:
// before that, nothing can have applied; after it, anything may have.
func classifyTransportError(err error, written bool, ctxErr error) error {
	if !written {
		return &adapter.RetryableError{Reason: "RequestNotSent", Err: err}
	}
	if errors.Is(ctxErr, context.DeadlineExceeded) {
		return &adapter.AmbiguousError{Reason: "Timeout", Err: fmt.Errorf("no response before the timeout: %w", err)}
	}
	return &adapter.AmbiguousError{Reason: "ConnectionLost", Err: fmt.Errorf("connection lost after the request was sent: %w", err)}
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
func (e *executor) classify(resp *nethttp.Response, body []byte, readErr error) (adapter.Outcome, error) {
	code := resp.StatusCode
	reason := "HTTP" + strconv.Itoa(code)
	if code >= 200 && code < 300 {
		if readErr != nil {
			return adapter.Outcome{}, &adapter.AmbiguousError{Reason: "ResponseLost",
				Err: fmt.Errorf("downstream answered %d but the response body was lost: %w", code, readErr)}
		}
		return e.outcome(body), nil
	}
	err := fmt.Errorf("downstream answered %d: %s", code, quote(body))
	switch {
	case code == nethttp.StatusBadRequest || code == nethttp.StatusUnprocessableEntity:
		return adapter.Outcome{}, &adapter.PermanentError{Kind: adapter.InvalidInput, Reason: reason, Err: err}
	case code == nethttp.StatusUnauthorized || code == nethttp.StatusForbidden:
		return adapter.Outcome{}, &adapter.PermanentError{Kind: adapter.Denied, Reason: reason, Err: err}
	case code == nethttp.StatusRequestTimeout || code == nethttp.StatusConflict ||
		code == nethttp.StatusTooManyRequests || code == nethttp.StatusServiceUnavailable:
		return adapter.Outcome{}, &adapter.RetryableError{Reason: reason, RetryAfter: retryAfter(resp.Header.Get("Retry-After"), time.Now()), Err: err}
	case code < 500 || code == nethttp.StatusNotImplemented:
		return adapter.Outcome{}, &adapter.PermanentError{Kind: adapter.InvalidInput, Reason: reason, Err: err}
	default:
		return adapter.Outcome{}, &adapter.AmbiguousError{Reason: reason, Err: err}
	}
}

// outcome extracts the external id and the allowed result fields. A response
// that lacks them is still a success: the effect happened.
func (e *executor) outcome(body []byte) adapter.Outcome {
	var out adapter.Outcome
	if e.response.ExternalIDPointer == "" && len(e.response.ResultPointers) == 0 {
		return out
	}
	doc, err := decodeJSON(body)
	if err != nil {
		out.Warnings = append(out.Warnings, "response is not JSON; no external id or result recorded")
		return out
	}
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

// decodeJSON parses one JSON document, keeping numbers as json.Number so that
// integer ids beyond 2^53 are not rounded through float64.
func decodeJSON(body []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("data after the JSON document")
	}
	return doc, nil
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
	if at, err := nethttp.ParseTime(value); err == nil && at.After(now) {
		return at.Sub(now)
	}
	return 0
}

func quote(body []byte) string {
	s := strings.TrimSpace(string(body))
	if len(s) > maxErrorBodyBytes {
		s = strings.ToValidUTF8(s[:maxErrorBodyBytes], "") + "…"
	}
	if s == "" {
		return "(empty body)"
	}
	return s
}
