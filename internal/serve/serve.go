// Package serve runs an *http.Server in the background on a listener it
// opens, and stops it gracefully. The admin server and the injector's
// webhook server share it; the proxy runs its own http.Server and shares
// only LimitListener.
package serve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
)

// Server is one *http.Server bound to one address. Start and Stop are
// called once each, in that order (fx lifecycle hooks); Addr is safe to
// call after Start returned.
type Server struct {
	name   string // "admin server", used in logs and errors
	flag   string // the flag that set the address, for the listen error
	srv    *http.Server
	log    *slog.Logger
	ln     net.Listener
	served chan struct{}
	// maxConns caps open connections (LimitConnections); 0: no cap.
	maxConns int
	evicted  prometheus.Counter // idle connections closed at the cap; may be nil
}

// New wraps srv. With srv.TLSConfig set it serves TLS (certificates from
// TLSConfig.GetCertificate or Certificates). flag names the option that
// set the address, e.g. "--admin-address", so a listen error says what
// to change; it may be empty.
func New(name, flag string, srv *http.Server, log *slog.Logger) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{name: name, flag: flag, srv: srv, log: log}
}

// Start listens on addr and serves in the background.
func (s *Server) Start(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		if s.flag != "" {
			return fmt.Errorf("%s: listen on %s %s: %w; %s", s.name, s.flag, addr, err, ListenHint(err, s.flag))
		}
		return fmt.Errorf("%s: listen on %s: %w; %s", s.name, addr, err, ListenHint(err, ""))
	}
	if s.maxConns > 0 {
		el := newEvictListener(ln, s.maxConns, s.evicted)
		if prev := s.srv.ConnState; prev != nil {
			s.srv.ConnState = func(c net.Conn, st http.ConnState) { el.track(c, st); prev(c, st) }
		} else {
			s.srv.ConnState = el.track
		}
		ln = el
	}
	s.ln = ln
	s.served = make(chan struct{})
	s.log.Info(s.name+" listening", "address", ln.Addr().String())
	go func() {
		defer close(s.served)
		var err error
		if s.srv.TLSConfig != nil {
			err = s.srv.ServeTLS(ln, "", "")
		} else {
			err = s.srv.Serve(ln)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error(s.name+" stopped", "error", err)
		}
	}()
	return nil
}

// Addr is the bound address; valid after Start.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Stop lets in-flight requests finish until ctx ends, then closes what is
// left, and returns once the serve goroutine has ended.
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
