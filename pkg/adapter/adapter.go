// Package adapter is the plugin boundary between the controller and the
// downstreams: how an action is carried out. An adapter never touches the
// ledger: it performs one attempt or one lookup and reports the outcome, as a
// result or as one of the typed errors below; only the controller turns those
// into status. Adapters are registered by name (Registry); docs/adapters.md
// is the contract.
package adapter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

// Adapter is one kind of backend, named by the member of the Tool's adapter
// union that configures it (spec.http is "http"). The controller learns what
// it may rely on from Capabilities and never reads the adapter's spec.
type Adapter interface {
	// Name is the adapter's member of the union, as v1alpha1.AdapterName gives it.
	Name() string
	// Capabilities says what the controller may rely on for the tool. It
	// reads the spec only, never a Secret or the network, so that the
	// controller can decide before it connects.
	Capabilities(tool *v1alpha1.Tool) Capabilities
	// Validate checks the adapter's part of the tool for its Ready
	// condition; Secrets are read from the tool's namespace. It returns nil
	// or a *ConfigError.
	Validate(ctx context.Context, tool *v1alpha1.Tool) error
	// Connect resolves the tool's configuration and credentials.
	Connect(ctx context.Context, tool *v1alpha1.Tool) (Connection, error)
}

// Capabilities are an adapter's promises for one tool.
type Capabilities struct {
	// Lookup: Executor.Lookup can find an earlier attempt by its key. Without
	// it the controller settles an unknown outcome by the tool's class alone.
	Lookup bool
	// AttemptTimeout bounds one Execute or Lookup; an attempt's claim lasts
	// this long plus the manager's lease grace.
	AttemptTimeout time.Duration
	// MaxKeyLength is the longest idempotency key the adapter can send; 0
	// means no limit. A longer key fails the action before any dispatch.
	MaxKeyLength int
}

// TimeoutOr is a Tool's timeout setting, or fallback when it is unset or
// not positive.
func TimeoutOr(setting *metav1.Duration, fallback time.Duration) time.Duration {
	if setting != nil && setting.Duration > 0 {
		return setting.Duration
	}
	return fallback
}

// Connection is a connected adapter: the executor for one tool and the
// capabilities it was connected with, which match Capabilities for the tool.
// Once connected, the controller relies on these.
type Connection struct {
	Executor
	Capabilities Capabilities
}

// ConfigError says why a tool's adapter configuration cannot be used.
type ConfigError struct {
	// Reason is the Ready condition's reason: one CamelCase word.
	Reason  string
	Message string
}

func (e *ConfigError) Error() string { return e.Message }

// Registry holds the adapters a manager can use, by name.
type Registry struct {
	adapters map[string]Adapter
}

// NewRegistry registers the adapters; a name may be registered once.
func NewRegistry(adapters ...Adapter) (*Registry, error) {
	r := &Registry{adapters: map[string]Adapter{}}
	for _, a := range adapters {
		if _, taken := r.adapters[a.Name()]; taken {
			return nil, fmt.Errorf("adapter %q is registered twice", a.Name())
		}
		r.adapters[a.Name()] = a
	}
	return r, nil
}

// ErrNoAdapter is returned by For when no registered adapter serves the tool.
var ErrNoAdapter = errors.New("no registered adapter serves the tool")

// For returns the adapter that the tool's spec names.
func (r *Registry) For(tool *v1alpha1.Tool) (Adapter, error) {
	name := v1alpha1.AdapterName(&tool.Spec)
	a, ok := r.adapters[name]
	if !ok {
		return nil, fmt.Errorf("tool %q names adapter %q: %w", tool.Name, name, ErrNoAdapter)
	}
	return a, nil
}

// Executor performs attempts and lookups for one Tool. Implementations must
// send every attempt of an action under the same idempotency key, send each
// attempt at most once (no retries of their own), and never write status.
type Executor interface {
	// Execute performs one attempt. The error, if any, is a *PermanentError,
	// *RetryableError or *AmbiguousError; any other error is taken as ambiguous.
	Execute(ctx context.Context, req Request) (Outcome, error)

	// Lookup finds the effect of an earlier attempt of req: by its key, a
	// business reference in its parameters, or whatever the adapter knows.
	// It returns ErrNotFound only when the downstream proves that no attempt
	// applied, ErrLookupUnsupported when the tool has no lookup, and
	// ErrLookupWindowClosed when it can no longer prove anything; any other
	// error is inconclusive and the lookup is made again later.
	Lookup(ctx context.Context, req Request) (Outcome, error)
}

// Request is one attempt of an action.
type Request struct {
	// IdempotencyKey identifies the intent downstream; the same for every attempt.
	IdempotencyKey string
	// Parameters is the JSON object to send.
	Parameters json.RawMessage
	// RequestDigest is the action's request digest ("sha256:..."), which
	// identifies the intent as the key does.
	RequestDigest string
	// FirstAttemptTime is when the action's first attempt was claimed: no
	// attempt under the key went out earlier.
	FirstAttemptTime time.Time
	// Provenance is passed downstream unchanged; it may be nil. Its
	// principals are what the caller claims.
	Provenance *v1alpha1.Provenance
	// RequestedBy is the verified user who created the action, as the API
	// server stamped it (toolledger.dev/requested-by); empty if unstamped.
	RequestedBy string
	// ApprovedBy is the verified approver of an approved action
	// (status.approval.decidedBy); empty when the tool requires none.
	ApprovedBy string
	// Traceparent is the W3C traceparent the downstream request carries
	// (https://www.w3.org/TR/trace-context/): the span of this attempt or
	// lookup, a child of the caller's; empty when no trace is known.
	Traceparent string
}

// Outcome is what the downstream reported for an applied request.
type Outcome struct {
	// ExternalRef is the downstream's identifier of the effect; it may be empty.
	ExternalRef string
	// Result holds only the response fields the Tool allows to be stored; it may be nil.
	Result json.RawMessage
	// Warnings are non-fatal problems, such as a missing external id field.
	Warnings []string
	// Replayed says the downstream answered with the stored outcome of an
	// earlier request under the key (HTTP: Idempotent-Replayed: true): it
	// deduplicated.
	Replayed bool
}

// ErrNotFound is returned by Lookup when no request with the key was applied.
var ErrNotFound = errors.New("no request with this idempotency key was applied downstream")

// ErrLookupUnsupported is returned by Lookup when the Tool has no lookup call
// (its Capabilities say Lookup false).
var ErrLookupUnsupported = errors.New("the tool has no lookup call")

// ErrLookupWindowClosed is returned by Lookup when the downstream no
// longer keeps what would prove the outcome, such as a provider's replay
// window for a key: the outcome goes to a human.
var ErrLookupWindowClosed = errors.New("the downstream no longer keeps the outcome of this key")

// PermanentKind says why a request can never succeed as written.
type PermanentKind string

const (
	// InvalidInput means the downstream or the configuration rejects the request itself.
	InvalidInput PermanentKind = "InvalidInput"
	// Denied means the downstream refuses the caller.
	Denied PermanentKind = "Denied"
)

// PermanentError means the request definitely did not apply and never will as written.
type PermanentError struct {
	Kind   PermanentKind
	Reason string
	Err    error
}

func (e *PermanentError) Error() string { return fmt.Sprintf("%s: %v", e.Reason, e.Err) }
func (e *PermanentError) Unwrap() error { return e.Err }

// RetryableError means the request definitely did not apply; another attempt under
// the same key may succeed, no sooner than RetryAfter when that is set.
type RetryableError struct {
	Reason     string
	RetryAfter time.Duration
	Err        error
}

func (e *RetryableError) Error() string { return fmt.Sprintf("%s: %v", e.Reason, e.Err) }
func (e *RetryableError) Unwrap() error { return e.Err }

// AmbiguousError means the request may or may not have applied. It must not be
// re-sent blindly; its outcome is found by lookup or by a human.
type AmbiguousError struct {
	Reason string
	Err    error
}

func (e *AmbiguousError) Error() string { return fmt.Sprintf("%s: %v", e.Reason, e.Err) }
func (e *AmbiguousError) Unwrap() error { return e.Err }

// Fns adapts functions to an Adapter, for tests and wrappers.
type Fns struct {
	NameFn         func() string
	CapabilitiesFn func(tool *v1alpha1.Tool) Capabilities
	ValidateFn     func(ctx context.Context, tool *v1alpha1.Tool) error
	ConnectFn      func(ctx context.Context, tool *v1alpha1.Tool) (Connection, error)
}

// Name calls NameFn.
func (f Fns) Name() string { return f.NameFn() }

// Capabilities calls CapabilitiesFn.
func (f Fns) Capabilities(tool *v1alpha1.Tool) Capabilities { return f.CapabilitiesFn(tool) }

// Validate calls ValidateFn.
func (f Fns) Validate(ctx context.Context, tool *v1alpha1.Tool) error { return f.ValidateFn(ctx, tool) }

// Connect calls ConnectFn.
func (f Fns) Connect(ctx context.Context, tool *v1alpha1.Tool) (Connection, error) {
	return f.ConnectFn(ctx, tool)
}

// Wrap returns an adapter like a, whose connections are passed through
// wrap: tests use it to hold or count what an executor does.
func Wrap(a Adapter, wrap func(tool *v1alpha1.Tool, inner Executor) Executor) Adapter {
	return Fns{
		NameFn:         a.Name,
		CapabilitiesFn: a.Capabilities,
		ValidateFn:     a.Validate,
		ConnectFn: func(ctx context.Context, tool *v1alpha1.Tool) (Connection, error) {
			c, err := a.Connect(ctx, tool)
			if err != nil {
				return c, err
			}
			c.Executor = wrap(tool, c.Executor)
			return c, nil
		},
	}
}

// ExecutorFns adapts functions to an Executor.
type ExecutorFns struct {
	ExecuteFn func(ctx context.Context, req Request) (Outcome, error)
	LookupFn  func(ctx context.Context, req Request) (Outcome, error)
}

// Execute calls ExecuteFn.
func (e ExecutorFns) Execute(ctx context.Context, req Request) (Outcome, error) {
	return e.ExecuteFn(ctx, req)
}

// Lookup calls LookupFn.
func (e ExecutorFns) Lookup(ctx context.Context, req Request) (Outcome, error) {
	return e.LookupFn(ctx, req)
}
