package proxy

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fanout-dev/fanout/components/transport"
	"github.com/fanout-dev/fanout/internal/testpki"
)

// TestSlowReaderBoundsMemory proves that a client that stops reading makes
// fanout hold a bounded amount, not the response: an apiserver (real TLS,
// HTTP/2, client certificates, fanout's own transport with its 1 MiB
// per-stream window) is willing to send 500 MiB as a LIST or as a busy
// watch, the client reads nothing for a while, and meanwhile the heap
// stays flat, the apiserver gets to send only a few MiB (HTTP/2 flow
// control pushes back on it), and other clients are served at full speed
// over the same upstream connection.
func TestSlowReaderBoundsMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("moves tens of MB")
	}
	const (
		offered = 500 << 20
		stall   = 3 * time.Second
		// heapBound and sentBound are generous: buffering the response
		// would cost up to offered.
		heapBound = 32 << 20
		sentBound = 64 << 20
	)
	for _, tc := range []struct {
		name  string
		watch bool
	}{{"large LIST", false}, {"busy watch", true}} {
		t.Run(tc.name, func(t *testing.T) {
			var sent atomic.Int64
			ended := make(chan struct{})
			ca := testpki.NewCA(t)
			backend := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if !strings.Contains(r.URL.RawQuery, "big") {
					io.WriteString(w, "ok")
					return
				}
				defer close(ended)
				w.Header().Set("Content-Type", "application/json")
				if !tc.watch {
					w.Header().Set("Content-Length", strconv.Itoa(offered))
				}
				event := []byte(`{"type":"MODIFIED","object":{"kind":"ConfigMap","apiVersion":"v1","data":{"k":"` + strings.Repeat("v", 4000) + `"}}}` + "\n")
				for sent.Load()+int64(len(event)) <= offered {
					if _, err := w.Write(event); err != nil {
						return
					}
					sent.Add(int64(len(event)))
					if tc.watch {
						w.(http.Flusher).Flush()
					}
				}
			}))
			backend.EnableHTTP2 = true
			backend.TLS = ca.ServerTLSConfig(ca.Serving(upgradeServerName), tls.RequireAndVerifyClientCert)
			backend.StartTLS()
			t.Cleanup(backend.Close)
			cert := ca.Client("fanout-client")
			tr, err := transport.New(transport.Config{ServerName: upgradeServerName}, &upgradeCreds{roots: ca.Pool, cert: &cert.TLS})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(tr.Close)
			p := newFakePicker(backend.Listener.Addr().String())
			s, _, base := startProxy(t, Config{}, p, tr, nil)

			// Warm up the upstream connection and the heap.
			others := newClient(t, false)
			for range 5 {
				getOK(t, others, base+"/api/v1/namespaces")
			}
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			baseHeap := ms.HeapInuse

			// The slow client: a raw connection whose response nobody reads.
			c, err := net.Dial("tcp", s.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			path := "/api/v1/configmaps?big=1"
			if tc.watch {
				path += "&watch=true"
			}
			fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", path)

			var peak uint64
			served := 0
			deadline := time.Now().Add(stall)
			for time.Now().Before(deadline) {
				// Other clients are served meanwhile, over the same
				// upstream HTTP/2 connection as the stalled stream.
				getOK(t, others, base+"/api/v1/namespaces")
				served++
				runtime.ReadMemStats(&ms)
				peak = max(peak, ms.HeapInuse)
				time.Sleep(20 * time.Millisecond)
			}
			stalledSent := sent.Load()
			growth := int64(peak) - int64(baseHeap)
			t.Logf("while the client read nothing for %v: the apiserver sent %.1f MiB of the %d MiB it offered, heap in use grew by at most %.1f MiB, %d other requests served",
				stall, float64(stalledSent)/(1<<20), offered>>20, float64(growth)/(1<<20), served)
			if stalledSent > sentBound {
				t.Errorf("the apiserver sent %d MiB to a client that read nothing; want at most %d MiB: fanout is buffering", stalledSent>>20, sentBound>>20)
			}
			if growth > heapBound {
				t.Errorf("heap grew by %d MiB; want at most %d MiB", growth>>20, heapBound>>20)
			}
			if served < 10 {
				t.Errorf("only %d other requests served in %v", served, stall)
			}

			// The stream resumes where it stopped once the client reads.
			c.SetReadDeadline(time.Now().Add(waitLimit))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			const resume = 16 << 20 // more than was sent during the stall
			n, err := io.CopyN(io.Discard, resp.Body, resume)
			if err != nil || n != resume {
				t.Fatalf("resumed stream: read %d bytes, err %v", n, err)
			}
			// Hanging up ends the apiserver's stream too.
			c.Close()
			wait(t, ended, "the apiserver's handler to end after the client hung up")
			if got := sent.Load(); got >= offered-8<<10 {
				t.Errorf("the apiserver sent all %d bytes to a client that hung up", got)
			}
		})
	}
}

func getOK(t *testing.T, c *http.Client, url string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "ok" {
		t.Fatalf("GET %s: %d %q", url, resp.StatusCode, b)
	}
}
