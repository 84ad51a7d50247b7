package certs

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"sync"
	"time"
)

// NewRoundTripper returns an http.RoundTripper that sends requests to
// kube-apiserver as the Credentials: over TLS verified with their CA
// against serverName, with their client certificate and their bearer
// token. It is for fanout's own small clients (EndpointSlice discovery),
// not for the proxied traffic, which has its own pools.
//
// Material that rotates is used from then on: the token per request, the
// CA and the client certificate for new connections. When either of those
// changes, idle connections made with the old ones are closed, and new
// requests go over new ones; a request in flight (a watch) keeps its
// connection until it ends. A 401 makes the Credentials re-read their
// files (at most once a second; see Reload), so that the next attempt
// uses what was rotated on disk.
//
// It dials directly: like the rest of fanout, it does not use proxies.
func NewRoundTripper(c *Credentials, serverName string) http.RoundTripper {
	return &roundTripper{creds: c, serverName: serverName}
}

type roundTripper struct {
	creds      *Credentials
	serverName string

	mu  sync.Mutex
	gen *generation
}

// generation is a transport for one client certificate and CA pool.
type generation struct {
	cert  *tls.Certificate
	roots *x509.CertPool
	t     *http.Transport
}

func (rt *roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	t := rt.transport()
	tok, _ := rt.creds.Token()
	if tok != "" {
		req = req.Clone(req.Context())
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := t.RoundTrip(req)
	if err == nil && resp.StatusCode == http.StatusUnauthorized {
		rt.creds.Reload()
	}
	return resp, err
}

// transport returns the transport for the current certificate and CA,
// making a new one if they changed.
func (rt *roundTripper) transport() *http.Transport {
	cert, _ := rt.creds.ClientCertificate()
	roots := rt.creds.RootCAs()
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if g := rt.gen; g != nil && g.cert == cert && g.roots == roots {
		return g.t
	}
	if rt.gen != nil {
		// Busy ones close when their request ends (IdleConnTimeout).
		rt.gen.t.CloseIdleConnections()
	}
	cfg := &tls.Config{ServerName: rt.serverName, RootCAs: roots, MinVersion: tls.VersionTLS12}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	rt.gen = &generation{cert: cert, roots: roots, t: &http.Transport{
		DialContext:         d.DialContext,
		TLSClientConfig:     cfg,
		ForceAttemptHTTP2:   true,
		TLSHandshakeTimeout: 10 * time.Second,
		IdleConnTimeout:     90 * time.Second,
		// A watch on a connection whose peer vanished would otherwise
		// wait for TCP to notice; client-go pings after 30 s too.
		HTTP2: &http.HTTP2Config{SendPingTimeout: 30 * time.Second, PingTimeout: 15 * time.Second},
	}}
	return rt.gen.t
}
