package transport

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/fanout-dev/fanout/internal/budget"
)

// ErrClosed is returned (inside an *UnprocessedError) for a request that
// needs a new connection after Close.
var ErrClosed = errors.New("fanout's upstream transport is shut down")

// Transports holds one HTTP/2 connection pool per (endpoint, AuthMode).
//
// For is safe for concurrent use and takes no lock once the pool exists;
// Retain and Close may run concurrently with For and with each other.
type Transports struct {
	cfg     Config
	creds   Credentials
	metrics *metrics

	// pools is an immutable map, replaced whole (copy-on-write) under mu,
	// so For reads it with one atomic load.
	pools atomic.Pointer[map[poolKey]*pool]

	// mu guards writes to pools and the fields below. It is taken when a
	// pool is created or dropped and when a connection opens or closes,
	// never per request.
	mu     sync.Mutex
	closed bool
	// conns is every open connection, including those of pools dropped by
	// Retain that still carry streams: Close closes them all and the
	// connections gauge counts them.
	conns map[*trackedConn]struct{}

	// done is closed by Close; drainers are the goroutines closing the
	// connections of retired generations (see rotate.go).
	done     chan struct{}
	drainers sync.WaitGroup
	// drainRounds counts the rounds every drainer ran, so that a test can
	// wait until a retired generation has provably been drained a few
	// times before asserting what stayed open.
	drainRounds atomic.Int64
}

type poolKey struct {
	address string
	mode    AuthMode
}

// New returns Transports that dial endpoints lazily, verify cfg.ServerName
// against creds.RootCAs() and, in AuthSidecar mode, present
// creds.ClientCertificate() and creds.Token().
func New(cfg Config, creds Credentials) (*Transports, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if creds == nil {
		return nil, errors.New("transport: New needs Credentials")
	}
	t := &Transports{
		cfg:   cfg,
		creds: creds,
		conns: map[*trackedConn]struct{}{},
		done:  make(chan struct{}),
	}
	t.metrics = newMetrics(t)
	t.metrics.initRotations()
	if t.cfg.WindowBudget == nil && t.cfg.AnswerWindowBudget > 0 {
		t.cfg.WindowBudget = budget.New(t.cfg.AnswerWindowBudget, t.metrics.windowsUsed, t.metrics.windowsExhausted)
	}
	if t.cfg.WindowBudget != nil {
		t.metrics.windowsLimit.Set(float64(t.cfg.WindowBudget.Limit()))
	}
	empty := map[poolKey]*pool{}
	t.pools.Store(&empty)
	return t, nil
}

// For returns the round tripper for requests to the endpoint at address
// ("host:port") with the given credentials mode. It is created on first
// use and cached until Retain drops the endpoint.
//
// The returned RoundTripper always connects to address, whatever the
// request URL's host, which only sets the :authority header; the URL's
// scheme must be https. Its errors are *UnprocessedError when the
// apiserver cannot have received the request (see classify).
func (t *Transports) For(address string, mode AuthMode) http.RoundTripper {
	k := poolKey{address: address, mode: mode}
	if p, ok := (*t.pools.Load())[k]; ok {
		return p
	}
	return t.addPool(k)
}

func (t *Transports) addPool(k poolKey) *pool {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := *t.pools.Load()
	if p, ok := old[k]; ok {
		return p
	}
	p := t.newPool(k)
	if t.closed {
		// Not cached: after Close nothing may keep pools alive. Its
		// dials fail with ErrClosed.
		return p
	}
	next := make(map[poolKey]*pool, len(old)+1)
	for kk, pp := range old {
		next[kk] = pp
	}
	next[k] = p
	t.pools.Store(&next)
	return p
}

// Retain drops the pools of endpoints whose address is not in addresses
// and closes their idle connections; the metrics of the endpoints in
// addresses exist from then on, at zero. Connections still carrying streams
// (a watch, say) are left to finish: they close when they have been idle
// for IdleConnTimeout, or on Close. A later For for a dropped endpoint
// builds a new pool.
func (t *Transports) Retain(addresses []string) {
	t.metrics.retain(addresses)
	keep := make(map[string]bool, len(addresses))
	for _, a := range addresses {
		keep[a] = true
	}
	t.mu.Lock()
	old := *t.pools.Load()
	next := make(map[poolKey]*pool, len(old))
	var dropped []*pool
	for k, p := range old {
		if keep[k.address] {
			next[k] = p
		} else {
			dropped = append(dropped, p)
		}
	}
	t.pools.Store(&next)
	t.mu.Unlock()

	for _, p := range dropped {
		p.gen.Load().closeIdle()
		t.metrics.forget(p.key)
	}
}

// Close closes every connection, idle or not, and makes later dials fail
// with ErrClosed. Streams still open fail; the caller is expected to have
// drained requests before (the proxy's graceful shutdown).
func (t *Transports) Close() {
	t.mu.Lock()
	if !t.closed {
		close(t.done)
	}
	t.closed = true
	old := *t.pools.Load()
	empty := map[poolKey]*pool{}
	t.pools.Store(&empty)
	conns := make([]*trackedConn, 0, len(t.conns))
	for c := range t.conns {
		conns = append(conns, c)
	}
	t.mu.Unlock()

	for _, p := range old {
		p.gen.Load().closeIdle()
	}
	for _, c := range conns {
		c.Close()
	}
	t.drainers.Wait()
}

// pool is the round tripper of one (endpoint, mode): a set of HTTP/2
// client connections (conns.go: fanout's own, internal/h2conn, or
// net/http's with Config.Client ClientStd), which always
// reach the endpoint. In AuthSidecar mode the set is replaced by a new
// generation when the client certificate rotates (see rotate.go).
type pool struct {
	t   *Transports
	key poolKey
	// gen is the generation new requests go to.
	gen atomic.Pointer[generation]
	// mu serialises rotations; never taken on the request path. Lock
	// order: pool.mu, then Transports.mu.
	mu sync.Mutex
}

func (t *Transports) newPool(k poolKey) *pool {
	p := &pool{t: t, key: k}
	var cert *tls.Certificate
	if k.mode == AuthSidecar {
		cert, _ = t.creds.ClientCertificate()
	}
	p.gen.Store(p.newGeneration(cert))
	return p
}

// RoundTrip implements http.RoundTripper. In AuthSidecar mode it sends
// the current token on a copy of req; it never modifies req. A 401 to a
// request sent with a client certificate is returned as is, marked for
// RenewAfterUnauthorized: whether to renew and send again is the
// caller's decision.
func (p *pool) RoundTrip(req *http.Request) (*http.Response, error) {
	res, g, err := p.send(req)
	if err != nil {
		return nil, err
	}
	if res.StatusCode == http.StatusUnauthorized && p.key.mode == AuthSidecar && g.cert != nil {
		res.Body = &unauthorizedBody{ReadCloser: res.Body, p: p, g: g}
	}
	return res, nil
}

// send sends req on the current generation and returns it, with that
// generation.
func (p *pool) send(req *http.Request) (*http.Response, *generation, error) {
	if p.key.mode == AuthSidecar {
		tok, err := p.t.creds.Token()
		if err != nil {
			if req.Body != nil {
				req.Body.Close()
			}
			return nil, nil, fmt.Errorf("reading the bearer token for kube-apiserver %s: %w", p.key.address, err)
		}
		if tok != "" {
			r2 := new(http.Request)
			*r2 = *req
			r2.Header = req.Header.Clone()
			if r2.Header == nil {
				r2.Header = http.Header{}
			}
			r2.Header.Set("Authorization", "Bearer "+tok)
			req = r2
		}
	}
	g := p.acquire()
	res, err := g.h2.roundTrip(req)
	g.release()
	if err != nil {
		return nil, g, classify(p.key.address, err)
	}
	return res, g, nil
}

// WindowBudget is the answer window budget the connections grow their
// stream windows with (Config.AnswerWindowBudget); nil without one.
func (t *Transports) WindowBudget() *budget.Bytes { return t.cfg.WindowBudget }
