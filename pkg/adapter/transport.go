package adapter

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptrace"
	"sync/atomic"
)

// TraceWritten returns ctx traced so that written reports whether a request
// made with it was fully written to the connection: the line between "not
// sent" and "may have applied" that TransportError draws.
func TraceWritten(ctx context.Context) (traced context.Context, written func() bool) {
	var done atomic.Bool
	traced = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(info httptrace.WroteRequestInfo) {
			if info.Err == nil {
				done.Store(true)
			}
		},
	})
	return traced, done.Load
}

// TransportError classifies a request that got no answer by whether it was
// fully written: before that nothing can have applied (retryable); after it
// anything may have (ambiguous: Timeout when ctxErr says the deadline
// passed, ConnectionLost otherwise).
func TransportError(err error, written bool, ctxErr error) error {
	if !written {
		return &RetryableError{Reason: "RequestNotSent", Err: err}
	}
	if errors.Is(ctxErr, context.DeadlineExceeded) {
		return &AmbiguousError{Reason: "Timeout", Err: fmt.Errorf("no response before the timeout: %w", err)}
	}
	return &AmbiguousError{Reason: "ConnectionLost", Err: fmt.Errorf("connection lost after the request was sent: %w", err)}
}
