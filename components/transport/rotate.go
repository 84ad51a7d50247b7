package transport

import (
	"crypto/tls"
	"io"
	"net/http"
	"sync/atomic"
	"time"
)

// Reloader is implemented by Credentials that can re-read their material
// on demand. Reload may block on the file system; it is called only after
// kube-apiserver rejected a request (401, RenewAfterUnauthorized), never
// on the normal path.
type Reloader interface {
	Reload()
}

// Timings of connection rotation.
const (
	// drainPoll is how often a retired generation closes its connections
	// that went idle: an old connection closes at most this long after
	// its last stream ended.
	drainPoll = 500 * time.Millisecond
	// minRenew is the least age of a generation that a 401 replaces: a
	// burst of 401s (a revoked certificate) re-dials once, not once per
	// request.
	minRenew = time.Second
)

// generation is the HTTP/2 client of a pool for one client certificate,
// with the connections it dialed. When the certificate rotates the pool
// makes a new generation for new requests and retires the old one: its
// connections carry their open streams (watches too) to the end and close
// as soon as they are idle.
type generation struct {
	p *pool
	// h2 is the generation's set of HTTP/2 connections (conns.go).
	h2 *h2Conns
	// std makes h2's connections with net/http's HTTP/2 client when
	// Config.Client is ClientStd (stdconn.go); nil otherwise.
	std *http.Transport
	// cert is the client certificate that was current when the
	// generation was made; the pool compares it with the current one.
	cert *tls.Certificate
	born time.Time
	// inflight counts RoundTrips running on h2 (until the response
	// headers arrive), conns its open connections: a retired generation
	// is done when both are zero, since nothing can dial on it then.
	inflight atomic.Int64
	conns    atomic.Int64
}

func (p *pool) newGeneration(cert *tls.Certificate) *generation {
	g := &generation{p: p, cert: cert, born: time.Now()}
	g.h2 = &h2Conns{g: g}
	if p.t.cfg.Client == ClientStd {
		g.std = g.newStdTransport()
	}
	return g
}

// acquire returns the current generation with a RoundTrip counted in
// flight. The re-check after counting closes the race with a rotation: a
// generation is retired only after it stopped being current, so a
// RoundTrip counted on a generation that is still current afterwards is
// seen by its drainer.
func (p *pool) acquire() *generation {
	for {
		g := p.current()
		g.inflight.Add(1)
		if p.gen.Load() == g {
			return g
		}
		g.inflight.Add(-1)
	}
}

func (g *generation) release() { g.inflight.Add(-1) }

// closeIdle closes g's idle connections and makes the busy ones close
// after their last stream.
func (g *generation) closeIdle() { g.h2.closeIdle() }

// current returns the generation for new requests, rotating first if the
// client certificate changed. The check is one atomic load and a pointer
// comparison: credentials return a new pointer for new material.
func (p *pool) current() *generation {
	g := p.gen.Load()
	if p.key.mode != AuthSidecar {
		return g
	}
	cert, err := p.t.creds.ClientCertificate()
	if err != nil || cert == g.cert {
		// An error fails the next dial, which reports it.
		return g
	}
	return p.rotate(g, cert, "certificate")
}

// rotate replaces generation old by a new one for cert, unless another
// rotation already did, and retires old.
func (p *pool) rotate(old *generation, cert *tls.Certificate, reason string) *generation {
	p.mu.Lock()
	defer p.mu.Unlock()
	if cur := p.gen.Load(); cur != old {
		return cur
	}
	g := p.newGeneration(cert)
	p.gen.Store(g)
	p.t.metrics.rotated(reason)
	p.t.retire(old)
	return g
}

// retire closes g's idle connections now and the others once their
// streams end. The drainer stops when g has no connection and no
// RoundTrip left, or on Close.
func (t *Transports) retire(g *generation) {
	g.closeIdle()
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	t.drainers.Add(1)
	t.mu.Unlock()
	go func() {
		defer t.drainers.Done()
		tick := time.NewTicker(drainPoll)
		defer tick.Stop()
		for g.conns.Load() > 0 || g.inflight.Load() > 0 {
			select {
			case <-t.done:
				return
			case <-tick.C:
			}
			g.closeIdle()
			t.drainRounds.Add(1)
		}
	}()
}

// unauthorizedBody is the body of a 401 answered on a client-certificate
// connection. It remembers the pool and the generation the answer came
// on, so that RenewAfterUnauthorized renews exactly those; the one
// allocation is paid on a 401 only.
type unauthorizedBody struct {
	io.ReadCloser
	p *pool
	g *generation
}

// RenewAfterUnauthorized acts on res, a 401 that kube-apiserver itself
// gave to a request the transport sent with the sidecar's client
// certificate. kube-apiserver checks the certificate on every request
// against its current client CA and the current time, so a 401 may mean
// that the certificate of the connection expired or that the CA rotated
// while newer material is already on disk. So the credentials are re-read
// (Reloader) and the pool res came from moves to a new generation: new
// connections with the current certificate, the old ones drain.
//
// It reports whether sending the request again could get another answer:
// the pool now sends on another generation than res came on. It is false
// for a response that is not such a 401 (no client certificate, another
// status, not from this package), and when res's connections are younger
// than minRenew and the certificate is theirs: sending again on fresh
// connections would only double the load of a client whose certificate
// the apiserver really rejects (revoked, wrong CA).
//
// The transport never sends a request twice itself: the caller decides
// whether to (the proxy's attempt policy, within its retry budget), and
// must not call this for an answer that may be another server's (a proxy
// subresource, an aggregated API), whose 401 says nothing of fanout's
// credentials.
func RenewAfterUnauthorized(res *http.Response) bool {
	b, ok := res.Body.(*unauthorizedBody)
	if !ok {
		return false
	}
	if r, ok := b.p.t.creds.(Reloader); ok {
		r.Reload()
	}
	return b.p.renew(b.g)
}

// renew moves the pool off generation g after a 401 to a generation with
// the current certificate, unless g is no longer current, or the
// certificate is g's own and g was made less than minRenew ago (its
// connections are fresh already). It reports whether new requests now go
// to another generation than g.
func (p *pool) renew(g *generation) bool {
	if p.gen.Load() != g {
		return true
	}
	cert, _ := p.t.creds.ClientCertificate()
	reason := "certificate"
	if cert == g.cert {
		if time.Since(g.born) < minRenew {
			return false
		}
		reason = "unauthorized"
	}
	return p.rotate(g, cert, reason) != g
}
