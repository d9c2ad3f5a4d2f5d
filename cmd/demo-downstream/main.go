// Command demo-downstream runs the demo payments service (package
// internal/demo) that the samples, the README walkthrough and the end-to-end
// tests call through toolledger. It keeps charges in memory, honors
// Idempotency-Key (unless --naive), and exposes unauthenticated /_admin
// endpoints to inject faults and read effect counters. It is a demo, not for
// production.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/toolledger/toolledger/internal/demo"
)

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

	service, err := demo.Start(ctx, addr, log, opts...)
	if err != nil {
		return fmt.Errorf("cannot listen on %s: %w", addr, err)
	}
	log.Info("demo downstream listening", "addr", service.Addr(), "naive", len(opts) > 0)

	select {
	case err := <-service.Served():
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down")
	if err := service.Shutdown(); err != nil {
		return fmt.Errorf("shutting down: %w", err)
	}
	if err := <-service.Served(); err != nil {
		return fmt.Errorf("serving: %w", err)
	}
	return nil
}
