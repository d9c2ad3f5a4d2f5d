package adapter

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http/httptrace"
	"slices"
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
// passed, ConnectionLost otherwise). A server that refused the TLS
// handshake never read the request, even written: TLS 1.3 refuses a client
// certificate only after the client has sent its request.
func TransportError(err error, written bool, ctxErr error) error {
	if !written || handshakeRefused(err) {
		return &RetryableError{Reason: "RequestNotSent", Err: err}
	}
	if errors.Is(ctxErr, context.DeadlineExceeded) {
		return &AmbiguousError{Reason: "Timeout", Err: fmt.Errorf("no response before the timeout: %w", err)}
	}
	return &AmbiguousError{Reason: "ConnectionLost", Err: fmt.Errorf("connection lost after the request was sent: %w", err)}
}

// handshakeAlerts are the TLS alerts a server sends only while it still
// negotiates the handshake (RFC 8446, section 6.2), as Go's crypto/tls
// words them: none can follow a request the server read.
var handshakeAlerts = []string{
	"tls: handshake failure", "tls: bad certificate", "tls: unsupported certificate",
	"tls: revoked certificate", "tls: expired certificate", "tls: unknown certificate",
	"tls: unknown certificate authority", "tls: certificate required",
}

// handshakeRefused reports whether err is the server's refusal of the TLS
// handshake (crypto/tls reports a received alert as a *net.OpError "remote
// error"; the alert's type is not exported, so it is known by its words).
func handshakeRefused(err error) bool {
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "remote error" || op.Err == nil {
		return false
	}
	return slices.Contains(handshakeAlerts, op.Err.Error())
}
