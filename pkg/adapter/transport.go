package adapter

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http/httptrace"
	"net/url"
	"slices"
	"strings"
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
//
// The URL a *url.Error names is cut to its scheme, host and path (see
// ShowURL): the message reaches the action's status and events, and a
// query may carry the parameters.
func TransportError(err error, written bool, ctxErr error) error {
	if urlErr, ok := err.(*url.Error); ok { //nolint:errorlint // only the outermost error's text is rewritten
		err = ShowURL(urlErr, urlErr.URL)
	}
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

// ShowURL returns err, when it is a *url.Error (as net/http's client
// returns), with shown in place of the URL it names, cut to its scheme, host
// and path: no user information, query or fragment. An adapter shows the
// Tool's URL template, so that neither the parameters nor the key it filled
// in reach a status, an event or a log. Any other error is returned as it is.
func ShowURL(err error, shown string) error {
	urlErr, ok := err.(*url.Error) //nolint:errorlint // only the outermost error's text is rewritten
	if !ok {
		return err
	}
	return &url.Error{Op: urlErr.Op, URL: bareURL(shown), Err: urlErr.Err}
}

// bareURL is raw without user information, query and fragment. It cuts the
// text rather than parsing it, so that a template's {placeholder} is shown
// as written.
func bareURL(raw string) string {
	raw, _, _ = strings.Cut(raw, "#")
	raw, _, _ = strings.Cut(raw, "?")
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return raw
	}
	authority, path := rest, ""
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		authority, path = rest[:i], rest[i:]
	}
	if i := strings.LastIndexByte(authority, '@'); i >= 0 {
		authority = authority[i+1:]
	}
	return scheme + "://" + authority + path
}
