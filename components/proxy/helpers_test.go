package proxy

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"testing"

	"github.com/fanout-dev/fanout/components/listener"
	"github.com/fanout-dev/fanout/components/proxy/proxytest"
	"github.com/fanout-dev/fanout/internal/testkit"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	testkit.DiscardKlog()
	goleak.VerifyTestMain(m)
}

// startProxy runs a Server for a Handler over p and u on a free port and
// stops it when the test ends, then checks that p saw every Done once.
func startProxy(t *testing.T, cfg Config, p *proxytest.Picker, u Upstream, m *Metrics) (*listener.Server, *Handler, string) {
	t.Helper()
	return startProxyOn(t, listener.Config{}, nil, cfg, p, u, m)
}

// startProxyOn is startProxy behind a listener configured by lcfg (on a
// free port unless it names one), counting into lm (nil: unregistered).
func startProxyOn(t *testing.T, lcfg listener.Config, lm *listener.Metrics, cfg Config, p *proxytest.Picker, u Upstream, m *Metrics) (*listener.Server, *Handler, string) {
	t.Helper()
	if lcfg.ListenAddress == "" {
		lcfg.ListenAddress = "127.0.0.1:0"
	}
	h := New(cfg, p, u, m)
	s := listener.New(lcfg, h, lm)
	t.Cleanup(func() { p.CheckDoneOnce(t) })
	testkit.Start(t, s)
	return s, h, "http://" + s.Addr().String()
}

// cancelWatchProxy is a proxy before a backend that answers a watch with
// one event, then holds it until the request is canceled, which closes
// canceled: for tests of a client leaving.
type cancelWatchProxy struct {
	h        *Handler
	base     string
	p        *proxytest.Picker
	m        *Metrics
	canceled chan struct{}
}

func startCancelWatchProxy(t *testing.T, cfg Config) cancelWatchProxy {
	t.Helper()
	return startCancelWatchProxyOn(t, listener.Config{}, cfg)
}

// openWatch opens a watch through the proxy (HTTP/1.1, or h2c) and reads
// its first event; cancel is how its client leaves.
func (cw cancelWatchProxy) openWatch(t *testing.T, h2c bool) (resp *http.Response, cancel context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	resp, _ = openStream(t, ctx, testkit.NewClient(t, h2c), cw.base+"/api/v1/pods?watch=1")
	return resp, cancel
}

// leave has the watch's client leave, then waits for the proxy to end the
// upstream request, report the pick's Done and give back the gauge.
func (cw cancelWatchProxy) leave(t *testing.T, resp *http.Response, cancel context.CancelFunc) {
	t.Helper()
	cancel()
	resp.Body.Close()
	testkit.Wait(t, cw.canceled, "the apiserver's request context to be cancelled after the client left")
	waitDone(t, cw.p, 1)
	testkit.WaitFor(t, "the open long-running gauge to return to 0", func() bool { return gaugeValue(t, cw.m.openLong) == 0 })
}

// startCancelWatchProxyOn is startCancelWatchProxy behind a listener
// configured by lcfg.
func startCancelWatchProxyOn(t *testing.T, lcfg listener.Config, cfg Config) cancelWatchProxy {
	t.Helper()
	canceled := make(chan struct{})
	p, u := proxytest.Backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"type":"ADDED"}`+"\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		close(canceled)
	}))
	m, _ := NewMetrics(nil)
	_, h, base := startProxyOn(t, lcfg, nil, cfg, p, u, m)
	return cancelWatchProxy{h: h, base: base, p: p, m: m, canceled: canceled}
}

// listenerValue reads the listener's series name with labels, through a
// registry as /metrics would; there must be one.
func listenerValue(t *testing.T, lm *listener.Metrics, name string, labels map[string]string) func() float64 {
	t.Helper()
	reg := testkit.Registry(t, lm.Collectors()...)
	return func() float64 {
		v, ok := testkit.Series(t, reg, name, labels)
		if !ok {
			t.Fatalf("no series %s%v", name, labels)
		}
		return v
	}
}

// openStream GETs url with ctx through c and reads the first line of the
// answer, a watch's first event; the answer closes when the test ends.
func openStream(t *testing.T, ctx context.Context, c *http.Client, url string) (*http.Response, *bufio.Reader) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	return resp, br
}

// getStatus sends a GET for url with c and closes the answer unread: for
// requests whose status is all a test needs, a watch's included.
func getStatus(t *testing.T, c *http.Client, url string) int {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
