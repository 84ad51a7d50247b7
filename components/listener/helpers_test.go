package listener

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/fanout-dev/fanout/components/proxy"
	"github.com/fanout-dev/fanout/components/proxy/proxytest"
	"github.com/fanout-dev/fanout/internal/testkit"
)

// The listener is tested in front of the real request path
// (proxy.Handler) over the fake endpoints of components/proxy/proxytest.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startProxy runs a Server with cfg (on a free port unless it names one)
// in front of a proxy.Handler over p and u, counting into m (nil:
// unregistered), and stops it when the test ends, then checks that p saw
// every Done once.
func startProxy(t *testing.T, cfg Config, p *proxytest.Picker, u proxy.Upstream, m *Metrics) (*Server, *proxy.Handler, string) {
	t.Helper()
	if cfg.ListenAddress == "" {
		cfg.ListenAddress = "127.0.0.1:0"
	}
	h := proxy.New(proxy.Config{}, p, u, nil)
	s := New(cfg, h, m)
	t.Cleanup(func() { p.CheckDoneOnce(t) })
	testkit.Start(t, s)
	return s, h, "http://" + s.Addr().String()
}

// forEachH1Server runs f as a subtest per server of plaintext HTTP/1.1
// (Config.H1Server): the tests of what a client sees hold for both.
// Tests of what only internal/h1server adds run with it alone.
func forEachH1Server(t *testing.T, f func(t *testing.T, h1 string)) {
	for _, h1 := range []string{H1ServerOwn, H1ServerStd} {
		t.Run("h1-server="+h1, func(t *testing.T) { f(t, h1) })
	}
}
