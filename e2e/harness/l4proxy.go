package harness

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
)

// L4Proxy is a plain TCP load balancer: each accepted connection goes to the
// next backend, round robin, and bytes are copied both ways. It shows the
// failure mode fanout exists to fix: a client multiplexing everything over
// one long-lived HTTP/2 connection lands on one apiserver for good.
type L4Proxy struct {
	ln       net.Listener
	backends []string
	next     atomic.Uint64
	perConn  []atomic.Int64

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// StartL4Proxy listens on 127.0.0.1:0 and proxies to backends (host:port).
func StartL4Proxy(backends []string) (*L4Proxy, error) {
	if len(backends) == 0 {
		return nil, errors.New("StartL4Proxy needs at least one backend")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &L4Proxy{
		ln:       ln,
		backends: backends,
		perConn:  make([]atomic.Int64, len(backends)),
		conns:    map[net.Conn]struct{}{},
	}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

// Addr is the address clients connect to.
func (p *L4Proxy) Addr() string { return p.ln.Addr().String() }

// Connections returns how many client connections went to each backend.
func (p *L4Proxy) Connections() []int64 {
	out := make([]int64, len(p.perConn))
	for i := range p.perConn {
		out[i] = p.perConn[i].Load()
	}
	return out
}

// Close stops accepting, closes every proxied connection and waits for the
// copying goroutines to finish.
func (p *L4Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

func (p *L4Proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		i := int((p.next.Add(1) - 1) % uint64(len(p.backends)))
		p.wg.Add(1)
		go p.handle(c, i)
	}
}

// track adds c to the open connections, or closes it when the proxy is
// closing, so Close never misses a connection accepted concurrently.
func (p *L4Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *L4Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *L4Proxy) handle(client net.Conn, i int) {
	defer p.wg.Done()
	if !p.track(client) {
		return
	}
	defer p.untrack(client)
	backend, err := net.Dial("tcp", p.backends[i])
	if err != nil {
		return
	}
	if !p.track(backend) {
		return
	}
	defer p.untrack(backend)
	p.perConn[i].Add(1)

	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		// Half-close so the other side sees EOF but can still answer.
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(backend, client)
	go pipe(client, backend)
	<-done
	<-done
}
