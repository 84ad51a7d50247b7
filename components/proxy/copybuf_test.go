package proxy

import (
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fanout-dev/fanout/components/proxy/proxytest"
	"github.com/fanout-dev/fanout/internal/budget"
	"github.com/fanout-dev/fanout/internal/testkit"
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
	p, u := proxytest.OKBackend(t)
	_, h, base := startProxy(t, Config{}, p, u, nil)
	short := &sizedPool{inner: h.proxy.BufferPool}
	long := &sizedPool{inner: h.longProxy.BufferPool}
	h.proxy.BufferPool, h.longProxy.BufferPool = short, long
	client := testkit.NewClient(t, false)
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

// TestAnswerCopyBuffersComeFromTheBudget: clients that stop reading their
// answers hold the copy buffers of those answers. The first ones take
// 32 KiB each from the answer budget; past it the copies go on with 2 KiB
// buffers, so that what they hold is bounded in sum; every byte comes back
// when the clients go away.
func TestAnswerCopyBuffersComeFromTheBudget(t *testing.T) {
	const (
		clients = 10
		large   = 4 // copy buffers the budget lends
	)
	p, u := proxytest.Backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Far more than the socket buffers between fanout and a client
		// that reads nothing: the copy blocks with its buffer held.
		w.Header().Set("Content-Length", strconv.Itoa(1<<30))
		chunk := make([]byte, 64<<10)
		for range (1 << 30) / len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	used := prometheus.NewGauge(prometheus.GaugeOpts{Name: "used"})
	refused := prometheus.NewCounter(prometheus.CounterOpts{Name: "refused"})
	answers := budget.New(large*copyBuffer, used, refused)
	_, h, base := startProxy(t, Config{AnswerBudget: answers}, p, u, nil)
	sizes := &sizedPool{inner: h.proxy.BufferPool}
	h.proxy.BufferPool = sizes

	addr := strings.TrimPrefix(base, "http://")
	var conns []net.Conn
	for range clients {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		if _, err := io.WriteString(c, "GET /api/v1/namespaces/default/configmaps/big HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
	}
	testkit.WaitFor(t, "every answer's copy to have its buffer", func() bool { return len(sizes.got()) == clients })
	var got [2]int // 32 KiB, 2 KiB
	for _, n := range sizes.got() {
		switch n {
		case copyBuffer:
			got[0]++
		case smallCopyBuffer:
			got[1]++
		default:
			t.Errorf("a copy buffer of %d bytes", n)
		}
	}
	if got != [2]int{large, clients - large} {
		t.Errorf("copy buffers: %d of 32 KiB and %d of 2 KiB, want %d and %d", got[0], got[1], large, clients-large)
	}
	if answers.Used() != large*copyBuffer || testutil.ToFloat64(refused) != clients-large {
		t.Errorf("budget: %d bytes used, %v refusals; want %d and %d", answers.Used(), testutil.ToFloat64(refused), large*copyBuffer, clients-large)
	}
	for _, c := range conns {
		c.Close()
	}
	testkit.WaitFor(t, "the budget to be given back", func() bool { return answers.Used() == 0 && testutil.ToFloat64(used) == 0 })
}
