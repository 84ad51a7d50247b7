//lint:file-ignore SA1019 golang.org/x/net v0.60 deprecates its http2 package in favour of net/http's own HTTP/2; this test frames HTTP/2 by hand with it, as limits_test.go does.

package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/fanout-dev/fanout/components/listener"
	"github.com/fanout-dev/fanout/components/proxy/proxytest"
	"github.com/fanout-dev/fanout/internal/testkit"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// readSignal reports, once, when the handler starts its second Read of a
// request body: by then it has read the byte the client sent, has
// allocated whatever it allocates before waiting, and blocks for bytes that
// never come.
type readSignal struct {
	io.ReadCloser
	reads   int
	waiting chan<- struct{}
}

func (s *readSignal) Read(p []byte) (int, error) {
	s.reads++
	if s.reads == 2 {
		s.waiting <- struct{}{}
	}
	return s.ReadCloser.Read(p)
}

// TestDeclaredBodiesCostWhatArrived drives the attack of issue 17: 200
// watch requests each declare a 1 MiB body (the most fanout keeps for
// retries), send one byte and hold. fanout must not reserve what was
// declared: the heap may grow by less than 10 MiB for the 200 (it grew by
// 200 MiB when the declared length was allocated up front). The heap is
// measured after a GC while all 200 handlers wait in their body read,
// which the test waits for: structural, not timed.
func TestDeclaredBodiesCostWhatArrived(t *testing.T) {
	const (
		requests = 200
		declared = 1 << 20
		bound    = 10 << 20
	)
	for _, h2c := range []bool{false, true} {
		t.Run(fmt.Sprintf("h2c=%v", h2c), func(t *testing.T) {
			p, u := proxytest.OKBackend(t)
			// The body deadline must not cut the requests while they are
			// measured; testkit.WaitLimit bounds the test anyway.
			h := New(Config{}, p, u, nil)
			waiting := make(chan struct{}, requests)
			s := listener.New(listener.Config{ListenAddress: "127.0.0.1:0", RequestBodyTimeout: 2 * testkit.WaitLimit},
				signalingHandler{h, func(w http.ResponseWriter, r *http.Request) {
					r.Body = &readSignal{ReadCloser: r.Body, waiting: waiting}
					h.ServeHTTP(w, r)
				}}, nil)
			testkit.Start(t, s)
			addr := s.Addr().String()
			const path = "/api/v1/namespaces/default/configmaps?watch=true"

			runtime.GC()
			var before runtime.MemStats
			runtime.ReadMemStats(&before)

			var hold func() // ends every attacking request
			if h2c {
				hold = attackH2C(t, addr, path, requests, declared)
			} else {
				hold = attackHTTP1(t, addr, path, requests, declared)
			}
			defer hold()
			for i := range requests {
				select {
				case <-waiting:
				case <-time.After(testkit.WaitLimit):
					t.Fatalf("only %d of %d requests reached their body read", i, requests)
				}
			}

			runtime.GC()
			var after runtime.MemStats
			runtime.ReadMemStats(&after)
			growth := int64(after.HeapAlloc) - int64(before.HeapAlloc)
			t.Logf("%d requests declaring %d KiB and sending 1 byte: heap grew by %.2f MiB (%.1f KiB per request)",
				requests, declared>>10, float64(growth)/(1<<20), float64(growth)/requests/1024)
			if growth >= bound {
				t.Errorf("heap grew by %.1f MiB for %d requests that sent 1 byte each; want less than %d MiB: fanout reserves declared lengths",
					float64(growth)/(1<<20), requests, bound>>20)
			}
		})
	}
}

// attackHTTP1 opens n connections, each sending a watch that declares a
// body of declared bytes and sends one. The returned func closes them.
func attackHTTP1(t *testing.T, addr, path string, n, declared int) func() {
	t.Helper()
	conns := make([]net.Conn, 0, n)
	closeAll := func() {
		for _, c := range conns {
			c.Close()
		}
	}
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			closeAll()
			t.Fatal(err)
		}
		conns = append(conns, c)
		if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n\r\nx", path, declared); err != nil {
			closeAll()
			t.Fatal(err)
		}
	}
	return closeAll
}

// attackH2C sends n such watches as streams of one h2c connection,
// framed by hand: a real HTTP/2 client in this process would count its own
// send buffers (up to 512 KiB per stream for a 1 MiB body) against the
// heap measured. The returned func closes the connection.
func attackH2C(t *testing.T, addr, path string, n, declared int) func() {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	fail := func(err error) {
		t.Helper()
		c.Close()
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		fail(err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		fail(err)
	}
	// The server's first frame is its SETTINGS, acknowledged here, before
	// any other write: the Framer's writes must not run concurrently.
	if f, err := fr.ReadFrame(); err != nil {
		fail(err)
	} else if sf, ok := f.(*http2.SettingsFrame); !ok || sf.IsAck() {
		fail(fmt.Errorf("first frame from the server: %v, want its SETTINGS", f))
	}
	if err := fr.WriteSettingsAck(); err != nil {
		fail(err)
	}
	// Its later frames (our SETTINGS' ack, WINDOW_UPDATE, the resets at
	// the end) are read and dropped, so its writes never block on us. One
	// reader and one writer may share a Framer.
	read := make(chan struct{})
	go func() {
		defer close(read)
		for {
			if _, err := fr.ReadFrame(); err != nil {
				return
			}
		}
	}()
	var hbuf bytes.Buffer
	enc := hpack.NewEncoder(&hbuf)
	for i := range n {
		id := uint32(2*i + 1)
		hbuf.Reset()
		for _, hf := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "127.0.0.1"}, {":path", path},
			{"content-length", strconv.Itoa(declared)}} {
			enc.WriteField(hpack.HeaderField{Name: hf[0], Value: hf[1]})
		}
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hbuf.Bytes(), EndHeaders: true}); err != nil {
			fail(err)
		}
		if err := fr.WriteData(id, false, []byte("x")); err != nil {
			fail(err)
		}
	}
	return func() {
		c.Close()
		<-read
	}
}

// readDeclared is readBody for a declared length n with an unlimited
// budget, whose takes must add up to the buffer's capacity.
func readDeclared(r io.Reader, n int64) ([]byte, error) {
	var taken int64
	buf, err := readBody(r, n, func(k int64) bool { taken += k; return true })
	if err == io.EOF {
		return nil, io.ErrUnexpectedEOF
	}
	if err == nil && taken != int64(cap(buf)) {
		return nil, fmt.Errorf("took %d bytes of budget for a buffer of %d", taken, cap(buf))
	}
	return buf, err
}

func TestReadDeclared(t *testing.T) {
	big := strings.Repeat("0123456789abcdef", 20<<10) // 320 KiB: several doublings
	for _, tc := range []struct {
		name    string
		body    io.Reader
		n       int64
		want    string
		wantErr error
	}{
		{"small, in one read", strings.NewReader("hello"), 5, "hello", nil},
		{"large, a byte at a time", iotest.OneByteReader(strings.NewReader(big)), int64(len(big)), big, nil},
		{"large, in half-reads", iotest.HalfReader(strings.NewReader(big)), int64(len(big)), big, nil},
		{"more sent than declared: the rest stays unread", strings.NewReader("hello, world"), 5, "hello", nil},
		{"data and EOF together at the declared length", iotest.DataErrReader(strings.NewReader("hello")), 5, "hello", nil},
		{"shorter than declared", strings.NewReader("hel"), 5, "", io.ErrUnexpectedEOF},
		{"nothing sent", strings.NewReader(""), 5, "", io.ErrUnexpectedEOF},
		{"broken", iotest.TimeoutReader(strings.NewReader(big)), int64(len(big)), "", iotest.ErrTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readDeclared(tc.body, tc.n)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("error %v, want %v", err, tc.wantErr)
			}
			if string(got) != tc.want {
				t.Errorf("read %d bytes, want the %d declared", len(got), len(tc.want))
			}
			if err == nil && int64(cap(got)) != tc.n {
				t.Errorf("buffer capacity %d for a %d-byte body: the last growth must stop at the declared length", cap(got), tc.n)
			}
		})
	}
}

// signalingHandler is h with serve in front of its ServeHTTP.
type signalingHandler struct {
	*Handler
	serve http.HandlerFunc
}

func (s signalingHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.serve(w, r) }
