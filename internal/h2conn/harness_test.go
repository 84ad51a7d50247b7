package h2conn

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/net/http2"

	"github.com/fanout-dev/fanout/internal/testkit"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// serverName is the SAN of every test serving certificate.
const serverName = "kubernetes"

// h2Server is the kit's fake apiserver, named as the tests here use it.
type h2Server struct {
	*testkit.APIServer
	addr   string
	opened *atomic.Int32
}

// newH2Server starts an HTTP/2 server serving a certificate for
// serverName from p.CA and checking
// client certificates against p.CA with policy auth. maxStreams > 0 sets
// SETTINGS_MAX_CONCURRENT_STREAMS. GET /readyz is the kit's; the tests
// here send none.
func newH2Server(t testing.TB, p *testkit.PKI, auth tls.ClientAuthType, maxStreams int, h http.Handler) *h2Server {
	t.Helper()
	s := testkit.NewAPIServer(t, p.CA, h, testkit.H2Options(serverName, auth, maxStreams)...)
	return &h2Server{APIServer: s, addr: s.Addr(), opened: &s.Opened}
}

var (
	echoHandler      = testkit.Echo
	streamingHandler = testkit.Streaming
)

// clients stands in for components/transport's pools: per address, a
// set of connections dialled with alice's certificate; a request goes to
// the first connection that can take a stream, else to a new one. Unlike
// the transport's, it dials under its lock, which is all the tests need.
type clients struct {
	tls *tls.Config
	cfg Config

	mu    sync.Mutex
	pools map[string]*testPool
	all   []*Conn // every connection made, closed when the test ends
}

func newClients(t testing.TB, p *testkit.PKI, cfg Config) *clients {
	c := &clients{
		tls: &tls.Config{
			RootCAs: p.CA.Pool, ServerName: serverName, Certificates: []tls.Certificate{p.Alice.TLS},
			NextProtos: []string{http2.NextProtoTLS},
		},
		cfg:   cfg,
		pools: map[string]*testPool{},
	}
	t.Cleanup(func() {
		c.mu.Lock()
		all := c.all
		c.mu.Unlock()
		for _, cc := range all {
			cc.Close()
		}
	})
	return c
}

// For returns the pool of connections to addr.
func (c *clients) For(addr string) *testPool {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.pools[addr]
	if p == nil {
		p = &testPool{c: c, addr: addr}
		c.pools[addr] = p
	}
	return p
}

// dialed is how many connections to addr were made, open how many of
// them are open.
func (c *clients) dialed(addr string) int32 { return c.For(addr).dialed.Load() }
func (c *clients) open(addr string) int32   { return c.For(addr).open.Load() }

type testPool struct {
	c    *clients
	addr string

	mu     sync.Mutex
	conns  []*Conn
	dialed atomic.Int32
	open   atomic.Int32
}

func (p *testPool) RoundTrip(req *http.Request) (*http.Response, error) {
	for {
		cc, err := p.get(req.Context())
		if err != nil {
			if req.Body != nil {
				req.Body.Close()
			}
			return nil, err
		}
		res, err := cc.RoundTrip(req)
		if errors.Is(err, ErrConnClosing) && req.Context().Err() == nil {
			continue // nothing was written
		}
		return res, err
	}
}

func (p *testPool) get(ctx context.Context) (*Conn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, cc := range p.conns {
		if cc.CanTakeStream() {
			return cc, nil
		}
	}
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second}, Config: p.c.tls}
	nc, err := d.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return nil, err
	}
	cfg := p.c.cfg
	cfg.OnGoAway = p.remove
	cfg.OnClose = func(cc *Conn) {
		p.remove(cc)
		p.open.Add(-1)
	}
	p.open.Add(1)
	cc, err := New(nc, cfg)
	if err != nil {
		p.open.Add(-1)
		nc.Close()
		return nil, err
	}
	p.dialed.Add(1)
	p.conns = append(p.conns, cc)
	p.c.mu.Lock()
	p.c.all = append(p.c.all, cc)
	p.c.mu.Unlock()
	return cc, nil
}

func (p *testPool) remove(cc *Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, c := range p.conns {
		if c == cc {
			p.conns = append(p.conns[:i], p.conns[i+1:]...)
			return
		}
	}
}

var errTest = errors.New("test failure")

// wantServerConns fails the test unless the server saw want connections
// (n); why, if set, says what another count would mean.
func wantServerConns(t *testing.T, n, want int32, why string) {
	t.Helper()
	if n != want {
		t.Errorf("the server saw %d connections, want %d%s", n, want, because(why))
	}
}

// wantDialed fails the test unless the pool for addr dialled want
// connections; why, if set, says what another count would mean.
func (c *clients) wantDialed(t *testing.T, addr string, want int32, why string) {
	t.Helper()
	if n := c.dialed(addr); n != want {
		t.Errorf("connections dialled = %d, want %d%s", n, want, because(why))
	}
}

func because(why string) string {
	if why == "" {
		return ""
	}
	return ": " + why
}
