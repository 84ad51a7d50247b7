//go:build linux

package h2conn

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/fanout-dev/fanout/internal/testkit"
)

// BenchmarkUpstreamRoundTrip prices a short GET from fanout to an
// apiserver over HTTP/2 and TLS, the server's side included (it runs in
// the same process). "pool" is fanout's path (its own HTTP/2 client,
// this package, behind the tests' pool; x/net's Transport when this was
// written). "floor" is not a client:
// it is the least an HTTP/2 client must do for such a request, on one
// connection with a lock around the writes and one goroutine reading
// (HPACK both ways, the frames, a channel to hand the answer over, the
// connection window kept open), without the streaming bodies, flow
// control per stream, cancellation, retries and limits a real one needs.
// The difference bounds what a client of fanout's own could save
// (docs/footprint.md, "Where the goals stand").
func BenchmarkUpstreamRoundTrip(b *testing.B) {
	p := testkit.NewPKI(b, serverName)
	srv := newH2Server(b, p, tls.RequireAndVerifyClientCert, 0, testkit.ShortAnswer())
	path := "/api/v1/namespaces/default/configmaps/x"

	b.Run("pool", func(b *testing.B) {
		rt := newClients(b, p, Config{}).For(srv.addr)
		testkit.RunParallelCPU(b, func() error {
			req, _ := http.NewRequest(http.MethodGet, "https://"+srv.addr+path, nil)
			_, err := testkit.RoundTrip(rt, req)
			return err
		})
	})

	b.Run("floor", func(b *testing.B) {
		c, err := dialFloor(srv.addr, &tls.Config{
			RootCAs: p.CA.Pool, ServerName: serverName, Certificates: []tls.Certificate{p.Alice.TLS},
			NextProtos: []string{http2.NextProtoTLS},
		})
		if err != nil {
			b.Fatal(err)
		}
		defer c.close()
		testkit.RunParallelCPU(b, func() error {
			status, body, err := c.get(srv.addr, path)
			if err != nil || status != 200 || len(body) == 0 {
				return fmt.Errorf("status %d, %d bytes, %v", status, len(body), err)
			}
			return nil
		})
	})
}

// floorConn is BenchmarkUpstreamRoundTrip's least client.
type floorConn struct {
	conn *tls.Conn

	wmu  sync.Mutex
	fr   *http2.Framer
	hbuf bytes.Buffer
	henc *hpack.Encoder
	next uint32

	mu      sync.Mutex
	streams map[uint32]*floorStream
	err     error
	done    chan struct{}
}

type floorStream struct {
	status int
	body   []byte
	done   chan error
}

func dialFloor(addr string, cfg *tls.Config) (*floorConn, error) {
	conn, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return nil, err
	}
	c := &floorConn{conn: conn, next: 1, streams: map[uint32]*floorStream{}, done: make(chan struct{})}
	c.henc = hpack.NewEncoder(&c.hbuf)
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		return nil, err
	}
	c.fr = http2.NewFramer(conn, conn)
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if err := c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20}); err != nil {
		return nil, err
	}
	if err := c.fr.WriteWindowUpdate(0, 1<<30); err != nil {
		return nil, err
	}
	go c.readLoop()
	return c, nil
}

func (c *floorConn) get(authority, path string) (int, []byte, error) {
	s := &floorStream{done: make(chan error, 1)}
	c.wmu.Lock()
	id := c.next
	c.next += 2
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		c.wmu.Unlock()
		return 0, nil, c.err
	}
	c.streams[id] = s
	c.mu.Unlock()
	c.hbuf.Reset()
	for _, f := range [...]hpack.HeaderField{
		{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "https"},
		{Name: ":authority", Value: authority}, {Name: ":path", Value: path},
		{Name: "accept", Value: "application/json"}, {Name: "user-agent", Value: "fanout-floor"},
	} {
		c.henc.WriteField(f)
	}
	err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.hbuf.Bytes(), EndStream: true, EndHeaders: true})
	c.wmu.Unlock()
	if err != nil {
		return 0, nil, err
	}
	if err := <-s.done; err != nil {
		return 0, nil, err
	}
	return s.status, s.body, nil
}

func (c *floorConn) readLoop() {
	defer close(c.done)
	var unacked uint32
	for {
		f, err := c.fr.ReadFrame()
		if err == nil {
			err = c.handle(f, &unacked)
		}
		if err != nil {
			c.mu.Lock()
			c.err = err
			for id, s := range c.streams {
				s.done <- err
				delete(c.streams, id)
			}
			c.mu.Unlock()
			return
		}
	}
}

func (c *floorConn) handle(f http2.Frame, unacked *uint32) error {
	switch f := f.(type) {
	case *http2.MetaHeadersFrame:
		c.mu.Lock()
		s := c.streams[f.StreamID]
		c.mu.Unlock()
		if s == nil {
			return nil
		}
		s.status, _ = strconv.Atoi(f.PseudoValue("status"))
		if f.StreamEnded() {
			c.end(f.StreamID, s)
		}
	case *http2.DataFrame:
		c.mu.Lock()
		s := c.streams[f.StreamID]
		c.mu.Unlock()
		if s != nil {
			s.body = append(s.body, f.Data()...)
			if f.StreamEnded() {
				c.end(f.StreamID, s)
			}
		}
		// The connection window was opened by 1 GiB; top it up long
		// before it runs out.
		if *unacked += f.Length; *unacked > 1<<28 {
			c.wmu.Lock()
			err := c.fr.WriteWindowUpdate(0, *unacked)
			c.wmu.Unlock()
			*unacked = 0
			return err
		}
	case *http2.SettingsFrame:
		if !f.IsAck() {
			c.wmu.Lock()
			defer c.wmu.Unlock()
			return c.fr.WriteSettingsAck()
		}
	case *http2.PingFrame:
		if !f.IsAck() {
			c.wmu.Lock()
			defer c.wmu.Unlock()
			return c.fr.WritePing(true, f.Data)
		}
	case *http2.RSTStreamFrame:
		c.mu.Lock()
		s := c.streams[f.StreamID]
		delete(c.streams, f.StreamID)
		c.mu.Unlock()
		if s != nil {
			s.done <- errors.New("stream reset: " + f.ErrCode.String())
		}
	case *http2.GoAwayFrame:
		return errors.New("GOAWAY: " + f.ErrCode.String())
	}
	return nil
}

func (c *floorConn) end(id uint32, s *floorStream) {
	c.mu.Lock()
	delete(c.streams, id)
	c.mu.Unlock()
	s.done <- nil
}

func (c *floorConn) close() {
	c.conn.Close()
	<-c.done
}
