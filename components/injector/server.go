package injector

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// CertificateSource supplies the serving certificate for each TLS
// handshake. It is called concurrently from every handshake and must not
// block on I/O: a reloading source swaps an atomic pointer in the
// background and returns the current pair here.
type CertificateSource interface {
	GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error)
}

// ServerConfig configures the webhook's HTTPS server.
type ServerConfig struct {
	// ListenAddress is host:port, e.g. ":8443".
	ListenAddress string
}

// Server serves the admission handler over TLS at /mutate and answers
// /healthz.
type Server struct {
	cfg    ServerConfig
	log    *slog.Logger
	srv    *http.Server
	ln     net.Listener
	served chan struct{}
}

// NewServer builds the HTTPS server; Start listens.
func NewServer(cfg ServerConfig, h *Handler, certs CertificateSource, log *slog.Logger) *Server {
	if log == nil {
		log = slog.Default()
	}
	mux := http.NewServeMux()
	mux.Handle("/mutate", h)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	return &Server{
		cfg: cfg,
		log: log,
		srv: &http.Server{
			Handler: mux,
			TLSConfig: &tls.Config{
				MinVersion:     tls.VersionTLS12,
				GetCertificate: certs.GetCertificate,
			},
			ReadHeaderTimeout: 5 * time.Second,
			ReadTimeout:       10 * time.Second,
			WriteTimeout:      10 * time.Second,
			IdleTimeout:       90 * time.Second,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		},
	}
}

// Start listens and serves in the background.
func (s *Server) Start(context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.ListenAddress)
	if err != nil {
		return fmt.Errorf("injector: listen on %s: %w", s.cfg.ListenAddress, err)
	}
	s.ln = ln
	s.served = make(chan struct{})
	s.log.Info("admission webhook listening", "address", ln.Addr().String(), "path", "/mutate")
	go func() {
		defer close(s.served)
		if err := s.srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("admission webhook stopped", "error", err)
		}
	}()
	return nil
}

// Addr is the bound address; valid after Start.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Stop lets in-flight reviews finish until ctx ends.
func (s *Server) Stop(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if err != nil {
		_ = s.srv.Close()
	}
	if s.served != nil {
		<-s.served
	}
	return err
}
