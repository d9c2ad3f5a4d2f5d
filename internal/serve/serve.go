// Package serve runs the HTTP servers of toolledger's front ends (the MCP
// gateway, the web console) the same way: bound to a listener the caller
// opened, with a bound on slow headers, and shut down gracefully when the
// context ends.
package serve

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"time"
)

// shutdownGrace bounds how long requests in flight may finish at shutdown.
const shutdownGrace = 10 * time.Second

// Serve serves handler on listener until ctx ends, over TLS when certFile
// (and keyFile) are set. Requests see ctx end, so that long-lived streams
// (MCP subscriptions, the console's events) close at shutdown instead of
// holding it up.
func Serve(ctx context.Context, listener net.Listener, handler http.Handler, certFile, keyFile string) error {
	server := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
	served := make(chan error, 1)
	go func() {
		if certFile != "" {
			served <- server.ServeTLS(listener, certFile, keyFile)
			return
		}
		served <- server.Serve(listener)
	}()
	select {
	case err := <-served:
		return fmt.Errorf("serving HTTP: %w", err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := server.Shutdown(shutdown); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("shutting down: %w", err)
	}
	return nil
}

// IsLoopback reports whether hostport (or a bare host) is a loopback IP
// address; names, "localhost" included, are not, since they may resolve
// elsewhere.
func IsLoopback(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = hostport
	}
	addr, err := netip.ParseAddr(host)
	return err == nil && addr.IsLoopback()
}
