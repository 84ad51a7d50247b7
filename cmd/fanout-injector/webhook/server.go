package webhook

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/fanout-dev/fanout/internal/serve"
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

// Server serves the admission handler over TLS at /mutate,
// /mutate/namespace and /mutate/hosted (see Scope) and answers /healthz.
type Server struct {
	cfg ServerConfig
	*serve.Server
}

// NewServer builds the HTTPS server; Start listens. A nil log discards
// its lines.
func NewServer(cfg ServerConfig, h *Handler, certs CertificateSource, log *slog.Logger) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	mux := http.NewServeMux()
	mux.Handle("/mutate", h)
	mux.Handle("/mutate/", h) // /mutate/namespace, /mutate/hosted: the Scope
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	return &Server{
		cfg: cfg,
		Server: serve.New("admission webhook (/mutate)", "", &http.Server{
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
		}, log),
	}
}

// Start listens on the configured address and serves TLS in the
// background; Stop lets in-flight reviews finish until its context ends.
func (s *Server) Start(context.Context) error { return s.Server.Start(s.cfg.ListenAddress) }
