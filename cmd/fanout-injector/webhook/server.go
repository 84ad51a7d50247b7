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
	// ClientCAs, when set, makes every caller present a client
	// certificate that they verify (--client-ca-file); the handshake
	// fails otherwise, before any HTTP.
	ClientCAs ClientCASource
	// MaxConnections caps open connections (--max-connections); at the
	// cap a new one replaces the one idle longest. 0: DefaultMaxConnections.
	MaxConnections int
}

// DefaultMaxConnections: each kube-apiserver keeps one HTTP/2 connection
// to a webhook, or a few HTTP/1.1 ones; 32 leaves room for many
// apiservers and bounds what unread request bodies can hold (h2Config).
const DefaultMaxConnections = 32

// h2Config bounds what an HTTP/2 connection holds: at most 16 reviews at
// once (a 17th waits at the apiserver or goes on another connection), and
// 256 KiB of request body received and not yet read, per stream and per
// connection (net/http's defaults are 1 MiB), so that unread bodies take
// at most DefaultMaxConnections × 256 KiB = 8 MiB. Over a cluster's
// network the smaller window costs a review of a few KiB nothing.
var h2Config = &http.HTTP2Config{
	MaxConcurrentStreams:          16,
	MaxReceiveBufferPerConnection: 256 << 10,
	MaxReceiveBufferPerStream:     256 << 10,
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
	s := serve.New("admission webhook (/mutate)", "--listen-address", &http.Server{
		Handler:           mux,
		TLSConfig:         tlsConfig(cfg, certs, h.metrics),
		HTTP2:             h2Config,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      10 * time.Second,
		IdleTimeout:       90 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}, log)
	if cfg.MaxConnections <= 0 {
		cfg.MaxConnections = DefaultMaxConnections
	}
	s.LimitConnections(cfg.MaxConnections, h.metrics.ConnectionsEvicted)
	return &Server{cfg: cfg, Server: s}
}

// tlsConfig serves the certificate of each handshake's moment and, with
// cfg.ClientCAs, verifies the caller's. It stands apart from NewServer so
// that tests can serve it over httptest's in-memory network, where a
// synctest bubble moves the clock.
func tlsConfig(cfg ServerConfig, certs CertificateSource, m *Metrics) *tls.Config {
	tc := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: certs.GetCertificate,
	}
	if cfg.ClientCAs != nil {
		// Requested, then verified by verifyClient against the CAs of
		// this moment, which RequireAndVerifyClientCert with a fixed
		// ClientCAs could not do (the file is reloaded), nor count.
		tc.ClientAuth = tls.RequestClientCert
		tc.VerifyConnection = verifyClient(cfg.ClientCAs, m)
	}
	return tc
}

// Start listens on the configured address and serves TLS in the
// background; Stop lets in-flight reviews finish until its context ends.
func (s *Server) Start(context.Context) error { return s.Server.Start(s.cfg.ListenAddress) }
