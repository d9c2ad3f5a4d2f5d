package archiveapi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
)

// refreshInterval is how often the front-proxy configuration is read
// again, so that a rotated front-proxy CA is trusted within it.
const refreshInterval = time.Minute

// Server serves a Handler over TLS on Addr with the certificate in CertDir
// (tls.crt and tls.key, re-read when they change), on every replica:
// reads need no leader.
type Server struct {
	Addr string
	// Listener, when set, is served instead of a listener on Addr: a
	// test's, on a port the kernel chose.
	Listener net.Listener
	CertDir  string
	Handler  *Handler
	Log      logr.Logger
}

// NeedLeaderElection is false: every replica answers reads.
func (s *Server) NeedLeaderElection() bool { return false }

// Start serves until ctx ends.
func (s *Server) Start(ctx context.Context) error {
	certs, err := certwatcher.New(filepath.Join(s.CertDir, "tls.crt"), filepath.Join(s.CertDir, "tls.key"))
	if err != nil {
		return fmt.Errorf("cannot read the archive API's serving certificate from %s: %w", s.CertDir, err)
	}
	go func() {
		if err := certs.Start(ctx); err != nil {
			s.Log.Error(err, "The archive API's serving certificate is no longer watched")
		}
	}()
	go s.Handler.authn.Run(ctx, refreshInterval, func(err error) {
		s.Log.Error(err, "The front-proxy configuration was not read again; the last one is used")
	})
	listener := s.Listener
	if listener == nil {
		if listener, err = (&net.ListenConfig{}).Listen(ctx, "tcp", s.Addr); err != nil {
			return fmt.Errorf("the archive API cannot listen on %s: %w", s.Addr, err)
		}
	}
	server := &http.Server{
		Handler:           s.Handler,
		TLSConfig:         s.Handler.authn.TLSConfig(certs.GetCertificate),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      time.Minute,
		MaxHeaderBytes:    1 << 20,
	}
	s.Log.Info("Serving the archive API", "address", listener.Addr().String())
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = server.Shutdown(shutdown)
	}()
	if err := server.ServeTLS(listener, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("the archive API stopped: %w", err)
	}
	return nil
}
