package proxy

import (
	"io"
	"sync"
	"testing"
)

// sizedPool records the size of every buffer it hands out.
type sizedPool struct {
	mu    sync.Mutex
	sizes []int
	inner interface {
		Get() []byte
		Put([]byte)
	}
}

func (p *sizedPool) Get() []byte {
	b := p.inner.Get()
	p.mu.Lock()
	p.sizes = append(p.sizes, len(b))
	p.mu.Unlock()
	return b
}

func (p *sizedPool) Put(b []byte) { p.inner.Put(b) }

func (p *sizedPool) got() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]int(nil), p.sizes...)
}

// TestLongRunningResponsesUseSmallCopyBuffers: a watch holds its copy
// buffer for as long as it is open, so long-running responses get 512-byte
// ones and short ones keep 32 KiB.
func TestLongRunningResponsesUseSmallCopyBuffers(t *testing.T) {
	p, u := okBackend(t)
	_, h, base := startProxy(t, Config{}, p, u, nil)
	short := &sizedPool{inner: h.proxy.BufferPool}
	long := &sizedPool{inner: h.longProxy.BufferPool}
	h.proxy.BufferPool, h.longProxy.BufferPool = short, long
	client := newClient(t, false)
	for _, path := range []string{"/api/v1/namespaces/default/configmaps/x", "/api/v1/namespaces/default/configmaps?watch=true"} {
		resp, err := client.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if got := short.got(); len(got) != 1 || got[0] != 32<<10 {
		t.Errorf("short request copy buffers: %v, want one of 32768 bytes", got)
	}
	if got := long.got(); len(got) != 1 || got[0] != 512 {
		t.Errorf("watch copy buffers: %v, want one of 512 bytes", got)
	}
}
