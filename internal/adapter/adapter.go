// Package adapter defines how the controller carries out an action
// downstream. An adapter never touches the ledger: it performs one attempt or
// one lookup and reports the outcome, as a result or as one of the typed
// errors below; only the controller turns those into status.
package adapter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/toolledger/toolledger/api/v1alpha1"
)

// Connector resolves a Tool's configuration and credentials into an Executor.
type Connector interface {
	Connect(ctx context.Context, tool *v1alpha1.Tool) (Executor, error)
}

// Executor performs attempts and lookups for one Tool. Implementations must
// send every attempt of an action under the same idempotency key.
type Executor interface {
	// Execute performs one attempt. The error, if any, is a *PermanentError,
	// *RetryableError or *AmbiguousError.
	Execute(ctx context.Context, req Request) (Outcome, error)

	// Lookup finds an earlier attempt by its idempotency key. It returns
	// ErrNotFound when the downstream says no request with the key was applied.
	Lookup(ctx context.Context, idempotencyKey string) (Outcome, error)
}

// Request is one attempt of an action.
type Request struct {
	// IdempotencyKey identifies the intent downstream; the same for every attempt.
	IdempotencyKey string
	// Parameters is the JSON object to send.
	Parameters json.RawMessage
	// Provenance is passed downstream unchanged; it may be nil.
	Provenance *v1alpha1.Provenance
}

// Outcome is what the downstream reported for an applied request.
type Outcome struct {
	// ExternalRef is the downstream's identifier of the effect; it may be empty.
	ExternalRef string
	// Result holds only the response fields the Tool allows to be stored; it may be nil.
	Result json.RawMessage
	// Warnings are non-fatal problems, such as a missing external id field.
	Warnings []string
}

// ErrNotFound is returned by Lookup when no request with the key was applied.
var ErrNotFound = errors.New("no request with this idempotency key was applied downstream")

// ErrLookupUnsupported is returned by Lookup when the Tool has no lookup call.
var ErrLookupUnsupported = errors.New("the tool has no lookup call")

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

// ConnectorFn adapts a function to a Connector.
type ConnectorFn func(ctx context.Context, tool *v1alpha1.Tool) (Executor, error)

// Connect calls f.
func (f ConnectorFn) Connect(ctx context.Context, tool *v1alpha1.Tool) (Executor, error) {
	return f(ctx, tool)
}

// ExecutorFns adapts functions to an Executor.
type ExecutorFns struct {
	ExecuteFn func(ctx context.Context, req Request) (Outcome, error)
	LookupFn  func(ctx context.Context, idempotencyKey string) (Outcome, error)
}

// Execute calls ExecuteFn.
func (e ExecutorFns) Execute(ctx context.Context, req Request) (Outcome, error) {
	return e.ExecuteFn(ctx, req)
}

// Lookup calls LookupFn.
func (e ExecutorFns) Lookup(ctx context.Context, idempotencyKey string) (Outcome, error) {
	return e.LookupFn(ctx, idempotencyKey)
}
