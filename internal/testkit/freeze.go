package testkit

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// FreezeProxy forwards TCP to a target until Freeze, after which it
// silently drops everything on the connections it had: the peer looks
// alive to TCP but answers nothing, like a host that vanished behind a
// stateful firewall. Connections made after Freeze work.
type FreezeProxy struct {
	// Addr is where clients connect.
	Addr string

	ln     net.Listener
	target string

	mu    sync.Mutex
	pairs []*proxyPair
	wg    sync.WaitGroup
}

type proxyPair struct {
	client, upstream net.Conn
	frozen           atomic.Bool
}

// NewFreezeProxy listens on a loopback port and forwards each connection
// to target; it closes when t ends.
func NewFreezeProxy(t testing.TB, target string) *FreezeProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &FreezeProxy{ln: ln, Addr: ln.Addr().String(), target: target}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *FreezeProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		pair := &proxyPair{client: c, upstream: up}
		p.mu.Lock()
		p.pairs = append(p.pairs, pair)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(pair, c, up)
		go p.pipe(pair, up, c)
	}
}

func (p *FreezeProxy) pipe(pair *proxyPair, src, dst net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !pair.frozen.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				err = werr
			}
		}
		if err != nil {
			pair.client.Close()
			pair.upstream.Close()
			return
		}
	}
}

// Freeze makes the connections made so far drop everything.
func (p *FreezeProxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pair := range p.pairs {
		pair.frozen.Store(true)
	}
}

func (p *FreezeProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for _, pair := range p.pairs {
		pair.client.Close()
		pair.upstream.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
