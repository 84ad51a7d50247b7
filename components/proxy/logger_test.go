package proxy

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fanout-dev/fanout/components/listener"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fanout-dev/fanout/components/balancer"
	"github.com/fanout-dev/fanout/components/transport"
	"github.com/fanout-dev/fanout/internal/testkit"
	"github.com/fanout-dev/fanout/resolver"
)

func newLogBuffer() (*testkit.Buffer, *slog.Logger) {
	b := &testkit.Buffer{}
	return b, slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// recordDefault points slog.Default at a buffer for the test, so that a
// test can tell that nothing was written through the global logger. Tests
// using it must not run in parallel.
func recordDefault(t *testing.T) *testkit.Buffer {
	t.Helper()
	b, l := newLogBuffer()
	old := slog.Default()
	slog.SetDefault(l)
	t.Cleanup(func() { slog.SetDefault(old) })
	return b
}

// brokenBody fails mid-stream, as a reset HTTP/2 stream does.
type brokenBody struct{ sent bool }

func (b *brokenBody) Read(p []byte) (int, error) {
	if !b.sent {
		b.sent = true
		return copy(p, "partial"), nil
	}
	return 0, errors.New("stream reset by the test")
}

func (*brokenBody) Close() error { return nil }

type brokenUpstream struct{}

func (brokenUpstream) For(string, transport.AuthMode) http.RoundTripper { return brokenUpstream{} }

func (brokenUpstream) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: &brokenBody{}, Request: r}, nil
}

// panickingPicker makes net/http log the panic of the request it serves.
type panickingPicker struct{}

func (panickingPicker) Pick(balancer.PickInfo) (balancer.Pick, error) {
	panic("picker panic from the test")
}

func oneEndpoint(t *testing.T) *balancer.Balancer {
	t.Helper()
	b, err := balancer.New(balancer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	b.Update([]resolver.Endpoint{{Address: "192.0.2.1:6443"}})
	return b
}

// TestHandlerLogsToConfigLog: the reverse proxy's own line about a stream
// broken mid-body goes to Config.Log, never to slog.Default.
func TestHandlerLogsToConfigLog(t *testing.T) {
	global := recordDefault(t)
	injected, log := newLogBuffer()
	h := New(Config{Log: log}, oneEndpoint(t), brokenUpstream{}, nil)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://localhost/api/v1/pods", nil))
	if !strings.Contains(injected.String(), "stream reset by the test") {
		t.Errorf("the injected logger has %q, want the reverse proxy's body copy error", injected.String())
	}
	if global.String() != "" {
		t.Errorf("the handler wrote to slog.Default: %q", global.String())
	}
}

// TestServerLogsToConfigLog: the server's own error lines (net/http's
// ErrorLog) go to Config.Log, never to slog.Default.
func TestServerLogsToConfigLog(t *testing.T) {
	global := recordDefault(t)
	injected, log := newLogBuffer()
	cfg := Config{Log: log}
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	srv := listener.New(listener.Config{ListenAddress: "127.0.0.1:0", Log: log}, New(cfg, panickingPicker{}, brokenUpstream{}, m), nil)
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Stop(context.Background()) }()
	resp, err := http.Get("http://" + srv.Addr().String() + "/api/v1/pods")
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	// net/http logs the panic after the connection is closed: wait for
	// the line rather than for a fixed time.
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(injected.String(), "picker panic from the test") {
		if time.Now().After(deadline) {
			t.Fatalf("Config.Log has %q, want the server's panic line", injected.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if global.String() != "" {
		t.Errorf("the server wrote to slog.Default: %q", global.String())
	}
}
