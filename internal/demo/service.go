package demo

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// shutdownTimeout bounds how long Shutdown waits for requests under way.
const shutdownTimeout = 5 * time.Second

// Service is a demo downstream serving HTTP on a listener of its own, as the
// demo-downstream and toolledger-dev commands run it.
type Service struct {
	server   *http.Server
	listener net.Listener
	served   chan error
}

// Start listens on addr and serves a demo downstream there, with one log
// line per request to log. Listening first makes Addr the real address,
// also for port 0.
func Start(ctx context.Context, addr string, log *slog.Logger, opts ...Option) (*Service, error) {
	var lc net.ListenConfig
	listener, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &Service{
		server:   &http.Server{Handler: LogRequests(NewServer(opts...), log), ReadHeaderTimeout: 10 * time.Second},
		listener: listener,
		served:   make(chan error, 1),
	}
	go func() {
		err := s.server.Serve(listener)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		s.served <- err
	}()
	return s, nil
}

// Addr is the address the service listens on.
func (s *Service) Addr() string { return s.listener.Addr().String() }

// Served delivers, once, why serving ended: nil after Shutdown.
func (s *Service) Served() <-chan error { return s.served }

// Shutdown stops accepting requests and waits for those under way, for
// five seconds at most.
func (s *Service) Shutdown() error {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	return s.server.Shutdown(ctx)
}
