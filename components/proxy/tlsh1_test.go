package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"net/http"
	"strings"
	"testing"

	"github.com/fanout-dev/fanout/components/listener"
	"github.com/fanout-dev/fanout/internal/testkit"
)

// TestH1WatchOverTLS: an HTTP/1.1 client of --listen-tls (ALPN http/1.1)
// is served by net/http, its watch by the handler's goroutine to the end
// (only fanout's own plaintext server streams it detached), and its
// hang-up still ends the upstream request and the gauges.
func TestH1WatchOverTLS(t *testing.T) {
	ca := testkit.NewCA(t)
	cw := startCancelWatchProxyOn(t, listener.Config{TLS: ca.ServerTLSConfig(ca.Serving("127.0.0.1"), tls.NoClientCert)}, Config{})
	canceled, m := cw.canceled, cw.m
	base := cw.base
	base = strings.Replace(base, "http://", "https://", 1)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool, NextProtos: []string{"http/1.1"}}}}
	defer client.CloseIdleConnections()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/api/v1/pods?watch=1", nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.ProtoMajor != 1 || resp.Close {
		t.Errorf("answer over TLS: %s, Close=%v; want HTTP/1.1, kept alive", resp.Proto, resp.Close)
	}
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	if n := handlersServingLong(); n != 1 {
		t.Errorf("%d handlers serving a long-running request, want 1: net/http serves TLS, nothing detaches", n)
	}
	cancel()
	resp.Body.Close()
	testkit.Wait(t, canceled, "the apiserver's request context to be cancelled after the client left")
	testkit.WaitFor(t, "the open long-running gauge to return to 0", func() bool { return gaugeValue(t, m.openLong) == 0 })
}
