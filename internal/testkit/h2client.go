package testkit

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
)

// What the tests of fanout's HTTP/2 clients (internal/h2conn and the
// pools of components/transport) share: the options of their
// net/http servers and the listener of their hand-driven ones.

// H2Options make an APIServer as those tests use it: a serving
// certificate for name, client certificates checked with auth, and with
// maxStreams > 0 that SETTINGS_MAX_CONCURRENT_STREAMS.
func H2Options(name string, auth tls.ClientAuthType, maxStreams int) []APIServerOption {
	opts := []APIServerOption{WithNames(name), WithClientAuth(auth)}
	if maxStreams > 0 {
		opts = append(opts, WithHTTP2(&http.HTTP2Config{MaxConcurrentStreams: maxStreams}))
	}
	return opts
}

// RawH2 is the listener of a hand-driven HTTP/2 server, for frame
// sequences net/http's server never sends: it accepts TLS connections,
// reads each one's client preface and hands the connection to serve on
// a goroutine of its own (a connection with another preface is closed).
// The test's end closes the listener and every connection and waits for
// serve to return.
type RawH2 struct {
	Addr     string
	Accepted atomic.Int32 // connections accepted

	ln    net.Listener
	serve func(net.Conn)
	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

// NewRawH2 listens on 127.0.0.1 with cfg.
func NewRawH2(t testing.TB, cfg *tls.Config, serve func(net.Conn)) *RawH2 {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := &RawH2{Addr: ln.Addr().String(), ln: ln, serve: serve}
	s.wg.Add(1)
	go s.accept()
	t.Cleanup(func() {
		ln.Close()
		s.CloseConns()
		s.wg.Wait()
	})
	return s
}

func (s *RawH2) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.Accepted.Add(1)
		s.mu.Lock()
		s.conns = append(s.conns, c)
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer c.Close()
			preface := make([]byte, len(clientPreface))
			if _, err := io.ReadFull(c, preface); err != nil || string(preface) != clientPreface {
				return
			}
			s.serve(c)
		}()
	}
}

// clientPreface opens every HTTP/2 connection (RFC 9113 3.4).
const clientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// CloseConns closes, on the server's side, every connection accepted so
// far.
func (s *RawH2) CloseConns() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		c.Close()
	}
}
