package transport

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sync"
	"time"

	"golang.org/x/net/http2"
)

// dialTLS dials a connection for generation g: always to the pool's own
// endpoint, verifying Config.ServerName.
func (g *generation) dialTLS(ctx context.Context) (*trackedConn, error) {
	p := g.p
	c, err := p.t.dial(ctx, p.key, g)
	if err != nil {
		p.t.metrics.dialed(p.key, false)
		// Nothing was sent: the request can go to another endpoint.
		return nil, &UnprocessedError{Endpoint: p.key.address, Err: err}
	}
	p.t.metrics.dialed(p.key, true)
	return c, nil
}

func (t *Transports) dial(ctx context.Context, k poolKey, g *generation) (*trackedConn, error) {
	if t.isClosed() {
		return nil, ErrClosed
	}
	ctx, cancel := context.WithTimeout(ctx, t.cfg.DialTimeout)
	defer cancel()
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", k.address)
	if err != nil {
		return nil, fmt.Errorf("dial: %w", err)
	}
	tc := tls.Client(raw, t.tlsConfig(k.mode))
	start := time.Now()
	if err := tc.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, fmt.Errorf("TLS handshake verifying server name %q: %w", t.cfg.ServerName, err)
	}
	t.metrics.handshake.Observe(time.Since(start).Seconds())
	if p := tc.ConnectionState().NegotiatedProtocol; p != http2.NextProtoTLS {
		tc.Close()
		return nil, fmt.Errorf("the server negotiated ALPN protocol %q, not %q: fanout speaks only HTTP/2 to kube-apiserver; check that nothing between them terminates TLS or forces HTTP/1.1", p, http2.NextProtoTLS)
	}
	c := &trackedConn{Conn: tc, t: t, key: k, gen: g}
	if !t.track(c) {
		tc.Close()
		return nil, ErrClosed
	}
	return c, nil
}

// tlsConfig is built per connection so that rotated CAs apply to new
// connections.
func (t *Transports) tlsConfig(mode AuthMode) *tls.Config {
	cfg := &tls.Config{
		ServerName: t.cfg.ServerName,
		RootCAs:    t.creds.RootCAs(),
		// Only h2: an apiserver that would fall back to HTTP/1.1 would cost
		// a connection per request; better fail loudly.
		NextProtos: []string{http2.NextProtoTLS},
		MinVersion: tls.VersionTLS12,
	}
	if mode == AuthSidecar {
		// Called during each handshake, so a rotated certificate is used
		// by every connection made after the rotation.
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			c, err := t.creds.ClientCertificate()
			if err != nil {
				return nil, fmt.Errorf("loading the client certificate: %w", err)
			}
			if c == nil {
				// A token-only kubeconfig: present no certificate.
				return &tls.Certificate{}, nil
			}
			return c, nil
		}
	}
	// AuthPassthrough leaves GetClientCertificate and Certificates unset:
	// the handshake presents no certificate, so kube-apiserver
	// authenticates the request's own bearer token.
	return cfg
}

func (t *Transports) isClosed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closed
}

// track registers c as open; false after Close.
func (t *Transports) track(c *trackedConn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.conns[c] = struct{}{}
	c.gen.conns.Add(1)
	return true
}

func (t *Transports) untrack(c *trackedConn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.conns, c)
}

// trackedConn is an upstream connection that deregisters itself when
// closed, for the connections gauge and for Close. Embedding *tls.Conn
// keeps ConnectionState, which the client puts in Response.TLS.
type trackedConn struct {
	*tls.Conn
	t    *Transports
	key  poolKey
	gen  *generation
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.t.untrack(c)
		c.gen.conns.Add(-1)
	})
	return c.Conn.Close()
}
