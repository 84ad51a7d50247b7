package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fanout-dev/fanout/components/listener"
	"github.com/fanout-dev/fanout/components/proxy/proxytest"
)

// BenchmarkWatchBurst streams a watch of back-to-back events through the
// proxy over HTTP/1.1 as fast as the client reads: the initial events of a
// watch-list (sendInitialEvents) or a busy informer. It measures the
// long-running copy path (copybuf.go): a small copy buffer must not cost
// throughput when data is waiting. b.SetBytes makes -bench report MB/s.
// It runs against both servers of plaintext HTTP/1.1 (--h1-server).
func BenchmarkWatchBurst(b *testing.B) {
	for _, h1 := range []string{listener.H1ServerOwn, listener.H1ServerStd} {
		b.Run("h1-server="+h1, func(b *testing.B) { benchWatchBurst(b, h1) })
	}
}

func benchWatchBurst(b *testing.B, h1 string) {
	for _, size := range []int{512, 4 << 10, 32 << 10} {
		b.Run(itoa(size)+"B-events", func(b *testing.B) {
			ev := `{"type":"ADDED","object":{"x":"` + strings.Repeat("a", size-38) + `"}}` + "\n"
			const events = 2000
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				for range events {
					if _, err := io.WriteString(w, ev); err != nil {
						return
					}
					w.(http.Flusher).Flush()
				}
			}))
			srv.EnableHTTP2 = true
			srv.StartTLS()
			defer srv.Close()
			addr, rt := srv.Listener.Addr().String(), srv.Client().Transport
			u := proxytest.NewUpstream()
			u.Set(addr, rt)
			p := proxytest.NewPicker(addr)
			h := New(Config{}, p, u, nil)
			s := listener.New(listener.Config{ListenAddress: "127.0.0.1:0", H1Server: h1}, h, nil)
			if err := s.Start(b.Context()); err != nil {
				b.Fatal(err)
			}
			defer s.Stop(b.Context())
			c := &http.Client{Transport: &http.Transport{}}
			defer c.CloseIdleConnections()
			url := "http://" + s.Addr().String() + "/api/v1/namespaces/default/configmaps?watch=true"
			b.SetBytes(int64(len(ev) * events))
			b.ResetTimer()
			for b.Loop() {
				resp, err := c.Get(url)
				if err != nil {
					b.Fatal(err)
				}
				n, err := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err != nil || n != int64(len(ev)*events) {
					b.Fatalf("read %d bytes, %v; want %d", n, err, len(ev)*events)
				}
			}
		})
	}
}

func itoa(n int) string {
	const digits = "0123456789"
	if n < 10 {
		return digits[n : n+1]
	}
	return itoa(n/10) + digits[n%10:n%10+1]
}
