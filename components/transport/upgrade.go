package transport

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"strings"
)

// alpnHTTP11 is the only protocol an upgrade connection offers: the
// Upgrade header (SPDY/3.1, WebSocket) exists only in HTTP/1.1, so the
// connection must not negotiate h2 as the pooled ones do.
const alpnHTTP11 = "http/1.1"

// DialUpgrade opens a new TLS connection to the endpoint at address for
// one upgrade request (exec, attach, port-forward), with ALPN http/1.1 and
// the credentials of mode: in AuthSidecar the kubeconfig's client
// certificate, in AuthPassthrough none. The connection belongs to the
// caller, who writes the request and closes it; it is never pooled and so
// takes no HTTP/2 stream from the pools, and Close does not close it.
//
// Every error is an *UnprocessedError: nothing was sent yet, so the
// request may go to another endpoint. It is safe for concurrent use.
func (t *Transports) DialUpgrade(ctx context.Context, address string, mode AuthMode) (net.Conn, error) {
	if t.isClosed() {
		return nil, &UnprocessedError{Endpoint: address, Err: ErrClosed}
	}
	ctx, cancel := context.WithTimeout(ctx, t.cfg.DialTimeout)
	defer cancel()
	// Clone: tlsConfig builds a fresh config per call today, but whoever
	// changes that must not see us write into a shared one.
	cfg := t.tlsConfig(mode).Clone()
	cfg.NextProtos = []string{alpnHTTP11}
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", address)
	if err != nil {
		return nil, &UnprocessedError{Endpoint: address, Err: fmt.Errorf("dial: %w", err)}
	}
	c := tls.Client(raw, cfg)
	if err := c.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, &UnprocessedError{Endpoint: address, Err: fmt.Errorf("TLS handshake verifying server name %q: %w", t.cfg.ServerName, err)}
	}
	// An empty protocol means the server does not do ALPN, which for an
	// HTTP/1.1-only offer is the same answer.
	if p := c.ConnectionState().NegotiatedProtocol; p != "" && p != alpnHTTP11 {
		c.Close()
		return nil, &UnprocessedError{Endpoint: address, Err: fmt.Errorf("the server negotiated ALPN protocol %q for an upgrade connection, not %q", p, alpnHTTP11)}
	}
	return c, nil
}

// AuthorizeUpgrade sets the credentials headers of an upgrade request for
// mode. In AuthSidecar mode it removes any Authorization the client sent
// and adds the kubeconfig's bearer token, if it has one, as the pooled
// round trippers do. In AuthPassthrough mode it leaves h alone: the
// request's own Authorization, or WebSocket bearer subprotocol, passes.
//
// Errors never contain the token. It is safe for concurrent use on
// distinct headers.
func (t *Transports) AuthorizeUpgrade(h http.Header, mode AuthMode) error {
	if mode != AuthSidecar {
		return nil
	}
	h.Del("Authorization")
	tok, err := t.creds.Token()
	if err != nil {
		return fmt.Errorf("reading the bearer token for an upgrade request: %w", err)
	}
	if tok = strings.TrimSpace(tok); tok != "" {
		h.Set("Authorization", "Bearer "+tok)
	}
	return nil
}
