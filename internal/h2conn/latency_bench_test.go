package h2conn

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/fanout-dev/fanout/internal/budget"
	"github.com/fanout-dev/fanout/internal/testkit"
)

// BenchmarkAnswerLatency times one answer of each size over a connection
// whose every write reaches the server rtt later, as across zones: the
// answer window budget's 2 KiB starting window costs a round trip each
// time the window doubles, where a stream granted its whole window up
// front (no budget) needs none; a short request's (RoundTripShort) starts
// at ShortAnswerWindow.
//
//	go test -run '^$' -bench BenchmarkAnswerLatency -benchtime 20x ./internal/h2conn/
func BenchmarkAnswerLatency(b *testing.B) {
	const rtt = time.Millisecond
	p := testkit.NewPKI(b, serverName)
	srv := newH2Server(b, p, tls.RequireAndVerifyClientCert, 100, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		size, _ := strconv.Atoi(r.URL.Query().Get("size"))
		w.Header().Set("Content-Length", strconv.Itoa(size))
		chunk := make([]byte, 16<<10)
		for sent := 0; sent < size; sent += len(chunk) {
			if _, err := w.Write(chunk[:min(len(chunk), size-sent)]); err != nil {
				return
			}
		}
	}))
	for _, mode := range []struct {
		name  string
		cfg   Config
		short bool
	}{
		{"no-budget", Config{}, false},
		{"budget", Config{WindowBudget: budget.New(64<<20, nil, nil)}, false},
		{"budget-short", Config{WindowBudget: budget.New(64<<20, nil, nil)}, true},
	} {
		cc := dialDelayed(b, p, srv.addr, rtt, mode.cfg)
		send := cc.RoundTrip
		if mode.short {
			send = cc.RoundTripShort
		}
		for _, size := range []int{1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20} {
			b.Run(fmt.Sprintf("%s/size=%dKiB", mode.name, size>>10), func(b *testing.B) {
				buf := make([]byte, 32<<10)
				for b.Loop() {
					res, err := send(testkit.NewRequest(b, context.Background(), srv.addr, "/?size="+strconv.Itoa(size)))
					if err != nil {
						b.Fatal(err)
					}
					if n, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{res.Body}, buf); err != nil || n != int64(size) {
						b.Fatalf("read %d bytes, %v", n, err)
					}
					res.Body.Close()
				}
				b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/float64(rtt.Microseconds()), "rtts/op")
			})
		}
	}
}

// dialDelayed opens a Conn to addr whose writes reach the server delay
// after they are made.
func dialDelayed(b *testing.B, p *testkit.PKI, addr string, delay time.Duration, cfg Config) *Conn {
	b.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	dc := &delayedConn{Conn: nc, delay: delay, q: make(chan delayedWrite, 1024), done: make(chan struct{})}
	go dc.send()
	tc := tls.Client(dc, &tls.Config{RootCAs: p.CA.Pool, ServerName: serverName, Certificates: []tls.Certificate{p.Alice.TLS}, NextProtos: []string{http2.NextProtoTLS}})
	if err := tc.Handshake(); err != nil {
		b.Fatal(err)
	}
	cfg, err = cfg.WithDefaults()
	if err != nil {
		b.Fatal(err)
	}
	cc, err := New(tc, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(cc.Close)
	return cc
}

// delayedConn holds each write for delay before it sends it, in order.
type delayedConn struct {
	net.Conn
	delay time.Duration
	q     chan delayedWrite
	once  sync.Once
	done  chan struct{}
}

type delayedWrite struct {
	at time.Time
	p  []byte
}

func (c *delayedConn) Write(p []byte) (int, error) {
	select {
	case c.q <- delayedWrite{time.Now().Add(c.delay), append([]byte(nil), p...)}:
		return len(p), nil
	case <-c.done:
		return 0, net.ErrClosed
	}
}

func (c *delayedConn) send() {
	for {
		select {
		case w := <-c.q:
			time.Sleep(time.Until(w.at))
			if _, err := c.Conn.Write(w.p); err != nil {
				return
			}
		case <-c.done:
			return
		}
	}
}

func (c *delayedConn) Close() error {
	c.once.Do(func() { close(c.done) })
	return c.Conn.Close()
}
