//go:build linux

package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"net/http"
	"strings"
	"testing"

	"github.com/fanout-dev/fanout/internal/testkit"
)

// TestH1WatchOverTLSIsTakenOver: an HTTP/1.1 client of --listen-tls (ALPN
// http/1.1) is taken over like a plaintext one, and its hang-up reaches
// the watcher through tls.Conn and the listener limit's connection.
func TestH1WatchOverTLSIsTakenOver(t *testing.T) {
	ca := testkit.NewCA(t)
	cw := startCancelWatchProxy(t, Config{TLS: ca.ServerTLSConfig(ca.Serving("127.0.0.1"), tls.NoClientCert)})
	canceled, m := cw.canceled, cw.m
	h, base := cw.h, cw.base
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
	if resp.ProtoMajor != 1 || !resp.Close {
		t.Errorf("answer over TLS: %s, Close=%v; want HTTP/1.1 with Connection: close", resp.Proto, resp.Close)
	}
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return handlersServingLong() == 0 }, "the watch's handler to return (its connection taken over)")
	h.hangups.mu.Lock()
	watched := len(h.hangups.streams)
	h.hangups.mu.Unlock()
	if watched != 1 {
		t.Errorf("%d connections in the hang-up watcher, want 1 (the TLS connection's descriptor was not reached)", watched)
	}
	cancel()
	resp.Body.Close()
	wait(t, canceled, "the apiserver's request context to be cancelled after the client left")
	waitFor(t, func() bool { return gaugeValue(t, m.openLong) == 0 }, "the open long-running gauge to return to 0")
}
