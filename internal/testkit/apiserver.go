package testkit

import (
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// APIServer is a stand-in for kube-apiserver: an HTTP/2 TLS httptest
// server with a serving certificate from the test's CA. It answers
// GET /readyz itself (ready unless told otherwise), hands every other
// request to the test's handler, and records who asked.
//
// It has what several packages' tests needed; a behaviour one test alone
// needs belongs in that test's handler.
type APIServer struct {
	// Server is the running server; its URL is https://127.0.0.1:port,
	// and its certificate is valid for the names given (default
	// "kubernetes" only, so clients must set the TLS server name).
	*httptest.Server

	// Probes counts GET /readyz, Discovery fanout's discovery reads;
	// Requests counts every other request.
	Probes    atomic.Int64
	Discovery atomic.Int64
	Requests  atomic.Int64
	// Opened counts the connections accepted; Closed those closed or
	// hijacked, so Opened-Closed are open now.
	Opened, Closed atomic.Int32

	handler http.Handler
	readyz  atomic.Int32 // status code of /readyz
	delay   atomic.Int64 // nanoseconds to wait before answering
	mu      sync.Mutex   // guards seen
	seen    []Request    // in arrival order
}

// Request is what APIServer records of each request, /readyz included.
type Request struct {
	Method, Path, RawQuery string
	// Proto is "HTTP/2.0" for a client that negotiated HTTP/2.
	Proto string
	// CN is the subject CN of the verified client certificate ("" for
	// none): the user kube-apiserver would see.
	CN            string
	Authorization string
	RemoteAddr    string
}

type apiServerConfig struct {
	names      []string
	clientAuth tls.ClientAuthType
	http2      *http.HTTP2Config
	connState  func(net.Conn, http.ConnState)
	alpn       []string
	unstarted  bool
}

// APIServerOption changes how NewAPIServer sets the server up.
type APIServerOption func(*apiServerConfig)

// WithNames sets the names of the serving certificate (see CA.Serving);
// the default is "kubernetes" alone.
func WithNames(names ...string) APIServerOption {
	return func(c *apiServerConfig) { c.names = names }
}

// WithClientAuth sets the client certificate policy. The default,
// tls.VerifyClientCertIfGiven, is kube-apiserver's: a certificate is
// verified when presented, and a request without one is left to its
// bearer token.
func WithClientAuth(a tls.ClientAuthType) APIServerOption {
	return func(c *apiServerConfig) { c.clientAuth = a }
}

// WithHTTP2 sets the server's HTTP/2 settings, e.g. MaxConcurrentStreams
// for tests that open more than the default 250 streams.
func WithHTTP2(h2 *http.HTTP2Config) APIServerOption {
	return func(c *apiServerConfig) { c.http2 = h2 }
}

// WithConnState is http.Server.ConnState, for tests that watch
// connections open and close.
func WithConnState(f func(net.Conn, http.ConnState)) APIServerOption {
	return func(c *apiServerConfig) { c.connState = f }
}

// WithALPN sets the protocols the server offers in the TLS handshake
// (default "h2" alone): "http/1.1" alone makes an HTTP/1.1-only server,
// "h2", "http/1.1" one that also takes upgrades.
func WithALPN(protos ...string) APIServerOption {
	return func(c *apiServerConfig) { c.alpn = protos }
}

// Unstarted leaves the server to the test to start (StartTLS). Its
// address is known at once, so a transport can be pointed at it first;
// this is for synctest bubbles, whose clock stands still while a goroutine
// of the bubble waits on a real socket, as a serving server's does.
func Unstarted() APIServerOption {
	return func(c *apiServerConfig) { c.unstarted = true }
}

// NewAPIServer starts an APIServer with a serving certificate from ca and
// closes it when the test ends. h serves everything but GET /readyz; nil
// answers 404. h may hijack (for upgrades): the kit does not wrap the
// ResponseWriter.
//
// It is also the HTTP/2 server of the tests of fanout's HTTP/2 client and
// pools: with Echo or Streaming as h, WithHTTP2 for stream limits and
// Opened/Closed for the connections made.
func NewAPIServer(tb testing.TB, ca *CA, h http.Handler, opts ...APIServerOption) *APIServer {
	tb.Helper()
	cfg := apiServerConfig{names: []string{"kubernetes"}, clientAuth: tls.VerifyClientCertIfGiven}
	for _, o := range opts {
		o(&cfg)
	}
	if h == nil {
		h = http.NotFoundHandler()
	}
	a := &APIServer{handler: h}
	a.readyz.Store(http.StatusOK)
	a.Server = httptest.NewUnstartedServer(http.HandlerFunc(a.serve))
	a.EnableHTTP2 = true
	a.TLS = ca.ServerTLSConfig(ca.Serving(cfg.names...), cfg.clientAuth)
	a.TLS.NextProtos = cfg.alpn
	a.Config.HTTP2 = cfg.http2
	a.Config.ConnState = func(c net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			a.Opened.Add(1)
		case http.StateClosed, http.StateHijacked:
			a.Closed.Add(1)
		}
		if cfg.connState != nil {
			cfg.connState(c, st)
		}
	}
	// Tests break connections on purpose (freezes, resets, hang-ups); the
	// server's complaints about them would bury the test's own output.
	a.Config.ErrorLog = log.New(io.Discard, "", 0)
	if !cfg.unstarted {
		a.StartTLS()
	}
	tb.Cleanup(a.Close)
	return a
}

// Addr is the server's host:port.
func (a *APIServer) Addr() string { return a.Listener.Addr().String() }

// SetReadyz sets the status code of GET /readyz. 200 is ready; any other
// code is answered with kube-apiserver's failed-check body, as during its
// shutdown.
func (a *APIServer) SetReadyz(code int) { a.readyz.Store(int32(code)) }

// SetDelay makes every request, /readyz included, wait d before it is
// answered, or until the client gives up; 0 answers at once.
func (a *APIServer) SetDelay(d time.Duration) { a.delay.Store(int64(d)) }

// Seen returns a copy of the requests received so far, in order.
func (a *APIServer) Seen() []Request {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]Request(nil), a.seen...)
}

// DiscoveryUserAgent is the User-Agent of fanout's discovery reads.
const DiscoveryUserAgent = "fanout-discovery"

// isDiscoveryRead reports whether r is one of fanout's discovery reads.
func isDiscoveryRead(r *http.Request) bool {
	return r.Method == http.MethodGet && r.Header.Get("User-Agent") == DiscoveryUserAgent
}

func (a *APIServer) serve(w http.ResponseWriter, r *http.Request) {
	req := Request{
		Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery, Proto: r.Proto,
		Authorization: r.Header.Get("Authorization"), RemoteAddr: r.RemoteAddr,
	}
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		req.CN = r.TLS.PeerCertificates[0].Subject.CommonName
	}
	if isDiscoveryRead(r) {
		// fanout's discovery reads (components/apis) are background
		// requests like probes: tests that count the program's requests
		// must not see them. The handler answers them (404 by default:
		// nothing is known of the APIs, nothing is routed by them).
		a.Discovery.Add(1)
		a.handler.ServeHTTP(w, r)
		return
	}
	a.mu.Lock()
	a.seen = append(a.seen, req)
	a.mu.Unlock()
	probe := r.Method == http.MethodGet && r.URL.Path == "/readyz"
	if probe {
		a.Probes.Add(1)
	} else {
		a.Requests.Add(1)
	}
	if d := time.Duration(a.delay.Load()); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	if !probe {
		a.handler.ServeHTTP(w, r)
		return
	}
	WriteReadyz(w, int(a.readyz.Load()))
}

// WriteReadyz answers /readyz as kube-apiserver does with code: "ok" for
// 200, else code and the check list of an apiserver shutting down.
func WriteReadyz(w http.ResponseWriter, code int) {
	if code == http.StatusOK {
		fmt.Fprint(w, "ok")
		return
	}
	w.WriteHeader(code)
	fmt.Fprint(w, "[+]ping ok\n[-]shutdown failed: reason withheld\nreadyz check failed\n")
}
