// Package testserver holds what the tests of fanout's HTTP/2 client
// (internal/h2conn) and of its pools (components/transport) share: the
// servers they run against (net/http's HTTP/2 server counting its
// connections, its handlers, a TCP proxy that can freeze its
// connections) and the way they send requests. It is for tests only.
package testserver

import (
	"crypto/tls"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// H2 is a TLS HTTP/2 test server that counts its connections.
type H2 struct {
	*httptest.Server
	Addr   string
	Opened atomic.Int32
	Closed atomic.Int32
}

// NewH2 starts an HTTP/2 server with cfg (its certificate and client
// certificate policy). maxStreams > 0 sets
// SETTINGS_MAX_CONCURRENT_STREAMS. It closes when t ends.
func NewH2(t testing.TB, cfg *tls.Config, maxStreams int, h http.Handler) *H2 {
	t.Helper()
	s := &H2{Server: httptest.NewUnstartedServer(h)}
	s.EnableHTTP2 = true
	s.TLS = cfg
	if maxStreams > 0 {
		s.Config.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: maxStreams}
	}
	s.Config.ErrorLog = log.New(io.Discard, "", 0)
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			s.Opened.Add(1)
		case http.StateClosed, http.StateHijacked:
			s.Closed.Add(1)
		}
	}
	s.StartTLS()
	s.Addr = s.Listener.Addr().String()
	t.Cleanup(s.Close)
	return s
}
