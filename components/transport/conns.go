package transport

import (
	"context"
	"errors"
	"net/http"
	"sync"

	"github.com/fanout-dev/fanout/internal/h2conn"
)

// A generation's connections: every request a pool sends to its
// apiserver goes through one of them (upgrades excepted: upgrade.go dials
// HTTP/1.1). Each is a connection of fanout's own HTTP/2 client
// (internal/h2conn); this file picks one below the server's stream limit
// for a request, dials one (shared by the requests that wait for it) when
// none can take it, and drops those that went away or closed.

// h2Conns is the set of connections of one generation (one endpoint, one
// client certificate).
type h2Conns struct {
	g *generation

	mu      sync.Mutex
	conns   []*h2conn.Conn
	dialing *h2Dial // a dial in progress that requests wait on
}

type h2Dial struct {
	done chan struct{}
	cc   *h2conn.Conn
	err  error
}

// roundTrip sends req on a connection that can take a stream, dialing
// one if none can.
func (cs *h2Conns) roundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	for {
		cc, err := cs.get(ctx)
		if err != nil {
			closeReqBody(req)
			return nil, err
		}
		res, err := cc.RoundTrip(req)
		if errors.Is(err, h2conn.ErrConnClosing) {
			if ctx.Err() == nil {
				// Nothing was written: another connection may take it.
				continue
			}
			closeReqBody(req)
		}
		return res, err
	}
}

func (cs *h2Conns) get(ctx context.Context) (*h2conn.Conn, error) {
	cs.mu.Lock()
	for _, cc := range cs.conns {
		if cc.CanTakeStream() {
			cs.mu.Unlock()
			return cc, nil
		}
	}
	d := cs.dialing
	if d == nil {
		d = &h2Dial{done: make(chan struct{})}
		cs.dialing = d
		go cs.dial(d)
	}
	cs.mu.Unlock()
	select {
	case <-d.done:
	case <-ctx.Done():
		// The caller gave up, not the endpoint: the dial goes on for
		// the others.
		return nil, ctx.Err()
	}
	if d.err != nil {
		return nil, d.err
	}
	return d.cc, nil
}

// dial opens a connection for every request that waits on d. It runs on
// its own goroutine, so that one request giving up does not fail the
// others.
func (cs *h2Conns) dial(d *h2Dial) {
	g := cs.g
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-g.p.t.done:
			cancel()
		case <-d.done:
		}
	}()
	nc, err := g.dialTLS(ctx)
	cancel()
	var cc *h2conn.Conn
	if err == nil {
		cfg := g.p.t.cfg.conn()
		cfg.OnGoAway, cfg.OnClose = cs.remove, cs.remove
		cc, err = h2conn.New(nc, cfg)
		if err != nil {
			nc.Close()
			err = &UnprocessedError{Endpoint: g.p.key.address, Err: err}
		}
	}
	cs.mu.Lock()
	cs.dialing = nil
	if cc != nil {
		cs.conns = append(cs.conns, cc)
	}
	cs.mu.Unlock()
	d.cc, d.err = cc, err
	close(d.done)
}

func (cs *h2Conns) remove(cc *h2conn.Conn) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for i, c := range cs.conns {
		if c == cc {
			cs.conns = append(cs.conns[:i], cs.conns[i+1:]...)
			return
		}
	}
}

// closeIdle closes the connections that carry no stream, and makes the
// others close when their last stream ends.
func (cs *h2Conns) closeIdle() {
	cs.mu.Lock()
	conns := append([]*h2conn.Conn(nil), cs.conns...)
	cs.mu.Unlock()
	for _, cc := range conns {
		cc.CloseWhenIdle()
	}
}

func closeReqBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}
