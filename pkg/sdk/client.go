package sdk

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/toolledger/toolledger/api/v1alpha1"
	"github.com/toolledger/toolledger/pkg/tracing"
)

// DefaultFieldManager is the server-side apply field manager of the SDK.
const DefaultFieldManager = "toolledger-sdk"

const toolActions = "toolactions"

// Client invokes tools through ToolActions. It is safe for concurrent use.
type Client struct {
	rest         *rest.RESTClient
	fieldManager string
	// linger is how long a namespace watch outlives its last waiter:
	// watchLinger, shorter in tests.
	linger time.Duration

	// metricsOn is where WithMetrics registers metrics, and metrics the
	// collectors registered; nil counts nothing.
	metricsOn prometheus.Registerer
	metrics   *sdkMetrics

	mu sync.Mutex
	// watches holds the open watch of each namespace where Invokes wait.
	watches map[string]*namespaceWatch
}

// Option configures a Client.
type Option func(*Client)

// WithFieldManager sets the server-side apply field manager. Every invoker
// of a key should use the same one (the default does). Server-side apply
// compares an apply with what the same manager applied before, so under one
// manager a duplicate writes nothing and any difference, an omitted
// parameter included, is refused. Under another manager, a duplicate is
// still deduplicated but costs one write (the API server records the
// co-ownership); a differing value is refused (409, as a
// *DuplicateConflictError); but a field the caller omits is left as the
// other manager recorded it, so a request that leaves out a recorded
// parameter is taken as a duplicate.
func WithFieldManager(name string) Option {
	return func(c *Client) { c.fieldManager = name }
}

// NewClient returns a Client that talks to the API server of cfg. The
// config's client-side rate limit paces the Client: on client-go's defaults
// (5 requests per second, burst 10) an agent process completes about 5
// invocations per second, whatever the cluster could do (see
// docs/benchmarks.md). Set cfg.QPS and cfg.Burst to the invocation rate the
// agent expects, or QPS to -1 where API Priority and Fairness protects the
// API server.
func NewClient(cfg *rest.Config, opts ...Option) (*Client, error) {
	restClient, err := NewRESTClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("cannot create a REST client for %s: %w", v1alpha1.GroupVersion, err)
	}
	c := &Client{rest: restClient, fieldManager: DefaultFieldManager, linger: watchLinger, watches: map[string]*namespaceWatch{}}
	for _, opt := range opts {
		opt(c)
	}
	if c.fieldManager == "" {
		return nil, errors.New("the field manager must not be empty")
	}
	if c.metricsOn != nil {
		if c.metrics, err = newSDKMetrics(c.metricsOn); err != nil {
			return nil, fmt.Errorf("cannot register the SDK's metrics: %w", err)
		}
	}
	return c, nil
}

// NewRESTClient returns a REST client for the toolledger API group
// (toolledger.dev/v1alpha1) at the API server of cfg, as the Client uses
// it, for programs that make requests the Client does not. It speaks JSON
// only, since the toolledger types have no protobuf encoding whatever cfg
// prefers for built-in types, and sends cfg's user agent, client-go's
// default when cfg has none. List and watch options encode with
// metav1.ParameterCodec. Errors are returned as they come, for the caller
// to say what it was connecting for.
func NewRESTClient(cfg *rest.Config) (*rest.RESTClient, error) {
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("cannot register the toolledger API: %w", err)
	}
	restConfig := rest.CopyConfig(cfg)
	restConfig.APIPath = "/apis"
	restConfig.GroupVersion = &v1alpha1.GroupVersion
	restConfig.ContentType = runtime.ContentTypeJSON
	restConfig.AcceptContentTypes = runtime.ContentTypeJSON
	restConfig.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	if restConfig.UserAgent == "" {
		restConfig.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	return rest.RESTClientFor(restConfig)
}

// Invoke records the intent req, unless its key already records it, and
// waits for its outcome.
//
// It sends one server-side apply: the API server creates the ToolAction
// (Outcome.Deduplicated false), or finds it recorded with the same request
// and writes nothing (Deduplicated true), or finds it recorded with a
// different request and refuses (a *DuplicateConflictError, nothing written
// or executed). A key whose record was deleted answers from its tombstone:
// the same request is reported Deduplicated with the original outcome; a
// different one returns the Failed outcome with a *DuplicateConflictError
// (the new ToolAction records the conflict; nothing was executed). If the action has already settled, that one request is all.
// Otherwise Invoke waits, in the Client's watch of the namespace, until the
// action is Succeeded, Failed or Escalated and returns the Outcome with a nil
// error: an Escalated (or, at a deadline, Unknown) outcome is a state to
// report, not an error to retry under a new key. Invoke waits through
// Unknown, which the controller settles by looking the key up.
//
// An action of a tool that requires approval returns as soon as it awaits
// one: the Outcome's Phase is AwaitingApproval (AwaitingApproval reports
// it), with a nil error, and a human decides (kubectl toolledger approve).
// Invoke again with WaitForApproval to wait through the decision; that
// costs one request that writes nothing, as any duplicate does.
//
// The invocations of a Client that wait in one namespace share one watch of
// its ToolActions: the first opens it, and it closes a few seconds after the
// last returned, so an invocation made while others wait, or soon after,
// costs its apply alone.
//
// When ctx ends first, Invoke returns the last outcome it saw together with
// an error wrapping ctx.Err(), so errors.Is(err, context.DeadlineExceeded)
// holds. The intent stays recorded and goes on; calling Invoke again with
// the same Request costs one request if it settled meanwhile. When the
// apply itself fails, the Outcome is nil. An error wrapping ErrDeleted means
// the action was deleted while Invoke waited.
//
// Invoke is traced as a span (invoke <tool>) of the program's tracer
// provider, a child of ctx's span; the action records the span's
// traceparent in its toolledger.dev/traceparent annotation, and the
// manager's attempt and lookup spans continue it. A repeated invocation
// whose span differs from the recorded one (or that has none, after one
// that had) rewrites the annotation: a write, never an effect. One made
// with another field manager leaves the annotation as it is.
func (c *Client) Invoke(ctx context.Context, req Request, opts ...InvokeOption) (*Outcome, error) {
	ctx, span := tracing.Tracer().Start(ctx, "invoke "+req.Tool, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		tracing.GenAIToolName.String(req.Tool),
		tracing.ToolKind.String(v1alpha1.ToolReference{Kind: req.ToolKind}.KindOrDefault()),
		tracing.Namespace.String(req.Namespace),
		tracing.Key.String(req.Key),
	))
	outcome, err := c.invoke(ctx, req, opts)
	endInvokeSpan(span, outcome, err)
	return outcome, err
}

func (c *Client) invoke(ctx context.Context, req Request, opts []InvokeOption) (*Outcome, error) {
	var o invokeOptions
	for _, opt := range opts {
		opt(&o)
	}
	traceparent := tracing.Traceparent(ctx)
	body, err := applyBody(req, traceparent)
	if err != nil {
		return nil, err
	}
	early := c.joinOpen(req.Namespace, req.Key)
	action, deduplicated, err := c.apply(ctx, req.Namespace, req.Key, body)
	if traceparent != "" && isTraceparentConflict(err) {
		// Another field manager's invocation recorded its span: this one
		// is the same intent, and joins the record without its own.
		if body, err = applyBody(req, ""); err == nil {
			action, deduplicated, err = c.apply(ctx, req.Namespace, req.Key, body)
		}
	}
	for range maxStandIns {
		// A record refused by the key's earlier record leaves etcd at once;
		// once it has, the key answers from its earlier record: this
		// request's original outcome, or a conflict of its own.
		if conflict := (*DuplicateConflictError)(nil); !errors.As(err, &conflict) || !c.standInLeft(ctx, req.Namespace, req.Key) {
			break
		}
		action, deduplicated, err = c.apply(ctx, req.Namespace, req.Key, body)
	}
	if err != nil {
		c.leave(early)
		if conflict := (*DuplicateConflictError)(nil); errors.As(err, &conflict) {
			c.metrics.conflict(req)
		}
		return nil, err
	}
	if deduplicated {
		c.metrics.duplicate(ctx, c, action)
	}
	f := &follower{outcome: newOutcome(action, deduplicated), uid: action.UID, resourceVersion: action.ResourceVersion, waitForApproval: o.waitForApproval}
	if f.done() {
		c.leave(early)
		return tombstoneConflict(f.outcome, nil)
	}
	if early != nil {
		c.mu.Lock()
		c.follow(early, f)
		c.mu.Unlock()
		return tombstoneConflict(c.await(ctx, early))
	}
	w, readNeeded := c.joinAfterApply(req.Namespace, f)
	if readNeeded {
		c.catchUp(ctx, req.Namespace, w)
	}
	return tombstoneConflict(c.await(ctx, w))
}

// InvokeOption changes how Invoke waits.
type InvokeOption func(*invokeOptions)

type invokeOptions struct {
	waitForApproval bool
}

// WaitForApproval makes Invoke wait through AwaitingApproval, until the
// action settles after a human's decision (or ctx ends), instead of
// returning as soon as the action awaits an approval.
func WaitForApproval() InvokeOption {
	return func(o *invokeOptions) { o.waitForApproval = true }
}

// tombstoneConflict turns an outcome that settled as a TombstoneConflict or
// an ArchiveConflict (the key's record was deleted, and its tombstone or
// archived record holds a different request) into the
// *DuplicateConflictError an existing record would give.
func tombstoneConflict(outcome *Outcome, err error) (*Outcome, error) {
	if err != nil || outcome == nil || (outcome.ErrorReason != v1alpha1.ReasonTombstoneConflict && outcome.ErrorReason != v1alpha1.ReasonArchiveConflict) {
		return outcome, err
	}
	return outcome, &DuplicateConflictError{Namespace: outcome.Namespace, Key: outcome.Key, Err: errors.New(outcome.Message)}
}

// maxStandIns bounds how many records refused by the key's earlier record
// one invocation waits out: each is another caller's conflicting request.
const maxStandIns = 3

// standInWait bounds the wait for a record under the key to be refused by
// the key's earlier record and leave etcd.
const standInWait = 10 * time.Second

// standInLeft waits while the record under the key is one that its earlier
// record refuses (ToolActionStatus.RefusedByEarlierRecord) or is still
// checking against it, and reports whether it left etcd within
// standInWait. Any other record holds the key with another request.
func (c *Client) standInLeft(ctx context.Context, namespace, key string) bool {
	ctx, cancel := context.WithTimeout(ctx, standInWait)
	defer cancel()
	for delay := 20 * time.Millisecond; ; delay = min(2*delay, 500*time.Millisecond) {
		var action v1alpha1.ToolAction
		err := c.rest.Get().Namespace(namespace).Resource(toolActions).Name(key).Do(ctx).Into(&action)
		switch {
		case apierrors.IsNotFound(err):
			return true
		case err != nil:
			return false
		case !action.Status.RefusedByEarlierRecord() && (action.Status.Phase.IsSettled() || action.Status.Attempts > 0):
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(delay):
		}
	}
}

// apply sends the apply body and reports whether the API server found the
// action already recorded (200) rather than creating it (201); that status
// code is the only place the difference shows.
func (c *Client) apply(ctx context.Context, namespace, key string, body []byte) (*v1alpha1.ToolAction, bool, error) {
	result := c.rest.Patch(types.ApplyPatchType).
		Namespace(namespace).
		Resource(toolActions).
		Name(key).
		Param("fieldManager", c.fieldManager).
		Body(body).
		Do(ctx)
	var status int
	result.StatusCode(&status)
	var action v1alpha1.ToolAction
	if err := result.Into(&action); err != nil {
		if isDifferentRequest(err) {
			return nil, false, &DuplicateConflictError{Namespace: namespace, Key: key, Err: err}
		}
		return nil, false, fmt.Errorf("cannot apply toolaction %s/%s: %w", namespace, key, err)
	}
	switch status {
	case http.StatusCreated:
		return &action, false, nil
	case http.StatusOK:
		return &action, true, nil
	default:
		return nil, false, fmt.Errorf("applying toolaction %s/%s: unexpected HTTP status %d", namespace, key, status)
	}
}
