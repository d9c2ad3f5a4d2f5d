// Command demo-downstream runs the demo payments service (package
// internal/demo) that the samples, the README walkthrough and the end-to-end
// tests call through toolledger. It keeps charges in memory, honors
// Idempotency-Key (unless --naive), and exposes unauthenticated /_admin
// endpoints to inject faults and read effect counters. It is a demo, not for
// production.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/toolledger/toolledger/internal/demo"
)

const shutdownTimeout = 5 * time.Second

func main() {
	listen := flag.String("listen", "127.0.0.1:8089", "address to listen on")
	naive := flag.Bool("naive", false, "commit every request, ignoring Idempotency-Key, so that a repeated request counts as a second effect (for the end-to-end tests)")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	var opts []demo.Option
	if *naive {
		opts = append(opts, demo.WithNaive())
	}
	if err := run(*listen, opts, log); err != nil {
		log.Error("demo-downstream failed", "err", err)
		os.Exit(1)
	}
}

func run(addr string, opts []demo.Option, log *slog.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	// Listening first makes the logged address the real one, also for ":0".
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("cannot listen on %s: %w", addr, err)
	}
	srv := &http.Server{
		Handler:           demo.LogRequests(demo.NewServer(opts...), log),
		ReadHeaderTimeout: 10 * time.Second,
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Info("demo downstream listening", "addr", ln.Addr().String(), "naive", len(opts) > 0)

	select {
	case err := <-served:
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shutting down: %w", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving: %w", err)
	}
	return nil
}
