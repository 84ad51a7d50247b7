package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/fanout-dev/fanout/components/listener"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fanout-dev/fanout/components/balancer"
	"github.com/fanout-dev/fanout/components/proxy/proxytest"
	"github.com/fanout-dev/fanout/components/transport"
	"github.com/fanout-dev/fanout/internal/reqinfo"
	"github.com/fanout-dev/fanout/internal/testkit"
)

const upgradeServerName = "kubernetes"

// upgradeCreds is the sidecar's credentials in these tests.
type upgradeCreds struct {
	roots *x509.CertPool
	cert  *tls.Certificate
	token string
}

func (c *upgradeCreds) RootCAs() *x509.CertPool                      { return c.roots }
func (c *upgradeCreds) ClientCertificate() (*tls.Certificate, error) { return c.cert, nil }
func (c *upgradeCreds) Token() (string, error)                       { return c.token, nil }

// seenUpgrade is what an upgrade backend observed of one request.
type seenUpgrade struct {
	proto       string // negotiated ALPN
	httpProto   string
	clientCN    string // "" without a client certificate
	auth        string
	wsProtocols string
	host        string
	forwarded   string
	path        string
}

// upgradeBackend is a TLS kube-apiserver stand-in that answers upgrade
// requests with 101 and echoes what the client sends, or with status
// reject when it is set. It offers h2 too, so a dial offering h2 would get
// HTTP/2 and no upgrade.
type upgradeBackend struct {
	addr   string
	seen   chan seenUpgrade
	reject int
}

func newUpgradeBackend(t *testing.T, ca *testkit.CA, reject int) *upgradeBackend {
	t.Helper()
	b := &upgradeBackend{seen: make(chan seenUpgrade, 16), reject: reject}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(b.serve))
	srv.EnableHTTP2 = true
	srv.TLS = ca.ServerTLSConfig(ca.Serving(upgradeServerName), tls.VerifyClientCertIfGiven)
	srv.TLS.NextProtos = []string{"h2", "http/1.1"}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	b.addr = srv.Listener.Addr().String()
	return b
}

func (b *upgradeBackend) serve(w http.ResponseWriter, r *http.Request) {
	s := seenUpgrade{
		httpProto:   r.Proto,
		auth:        r.Header.Get("Authorization"),
		wsProtocols: r.Header.Get("Sec-WebSocket-Protocol"),
		host:        r.Host,
		forwarded:   r.Header.Get("X-Forwarded-For"),
		path:        r.URL.RequestURI(),
	}
	if r.TLS != nil {
		s.proto = r.TLS.NegotiatedProtocol
		if len(r.TLS.PeerCertificates) > 0 {
			s.clientCN = r.TLS.PeerCertificates[0].Subject.CommonName
		}
	}
	select {
	case b.seen <- s:
	default: // tests that open many sessions do not look
	}
	if b.reject != 0 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(b.reject)
		io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"pods \"p\" is forbidden","code":403}`)
		return
	}
	if !reqinfo.New(r).Upgrade {
		http.Error(w, "want an upgrade", http.StatusBadRequest)
		return
	}
	c, brw, err := w.(http.Hijacker).Hijack()
	if err != nil {
		return
	}
	defer c.Close()
	fmt.Fprintf(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\n", r.Header.Get("Upgrade"))
	io.Copy(c, brw) // echo until the client closes
}

// upgradeRig is a proxy with real transports in front of backends.
type upgradeRig struct {
	ca     *testkit.CA
	picker *proxytest.Picker
	srv    *listener.Server
	reg    *prometheus.Registry
	m      *Metrics
	proxy  string // host:port of the proxy
}

// rigBefore is an upgradeRig with the default Config in front of one
// upgrade backend (answering reject, 0 to switch) of its own CA.
func rigBefore(t *testing.T, reject int) (*upgradeRig, *upgradeBackend) {
	t.Helper()
	ca := testkit.NewCA(t)
	b := newUpgradeBackend(t, ca, reject)
	return newUpgradeRig(t, ca, Config{}, b.addr), b
}

func newUpgradeRig(t *testing.T, ca *testkit.CA, cfg Config, addrs ...string) *upgradeRig {
	t.Helper()
	return newUpgradeRigOn(t, ca, listener.Config{}, nil, cfg, addrs...)
}

// newUpgradeRigOn is newUpgradeRig behind a listener configured by lcfg,
// counting into lm (nil: unregistered).
func newUpgradeRigOn(t *testing.T, ca *testkit.CA, lcfg listener.Config, lm *listener.Metrics, cfg Config, addrs ...string) *upgradeRig {
	t.Helper()
	cert := ca.Client("fanout-client")
	tr, err := transport.New(transport.Config{ServerName: upgradeServerName}, &upgradeCreds{roots: ca.Pool, cert: &cert.TLS, token: "sidecar-token"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.Close)
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	p := proxytest.NewPicker(addrs...)
	cfg.Upgrades = tr
	s, _, base := startProxyOn(t, lcfg, lm, cfg, p, tr, m)
	return &upgradeRig{ca: ca, picker: p, srv: s, reg: reg, m: m, proxy: strings.TrimPrefix(base, "http://")}
}

// upgradeRequest is the client's request line and headers.
type upgradeRequest struct {
	upgrade string
	headers map[string]string
	path    string // for dialUpgrade; "" is an exec of cat with stdin
}

func (u upgradeRequest) write(w io.Writer, path string) error {
	var sb strings.Builder
	fmt.Fprintf(&sb, "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\nUpgrade: %s\r\n", path, u.upgrade)
	for k, v := range u.headers {
		fmt.Fprintf(&sb, "%s: %s\r\n", k, v)
	}
	sb.WriteString("X-Forwarded-For: 203.0.113.9\r\n\r\n")
	_, err := io.WriteString(w, sb.String())
	return err
}

// dialUpgrade sends req through the proxy and returns the connection and
// the response.
func dialUpgrade(t *testing.T, proxy string, req upgradeRequest) (net.Conn, *bufio.Reader, *http.Response) {
	t.Helper()
	c := testkit.Dial(t, proxy)
	path := req.path
	if path == "" {
		path = "/api/v1/namespaces/ns/pods/p/exec?command=cat&stdin=true"
	}
	if err := req.write(c, path); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("reading the proxy's answer: %v", err)
	}
	return c, br, resp
}

// echo checks that msg comes back unchanged over an upgraded connection.
func echoLine(t *testing.T, c net.Conn, br *bufio.Reader, msg string) {
	t.Helper()
	if _, err := io.WriteString(c, msg+"\n"); err != nil {
		t.Fatalf("writing %q: %v", msg, err)
	}
	line, err := br.ReadString('\n')
	if err != nil || line != msg+"\n" {
		t.Fatalf("echo of %q = %q, %v", msg, line, err)
	}
}

func upgradeSeries(t *testing.T, m *Metrics, proto string) (open, upgraded, rejected, failed float64) {
	t.Helper()
	return testutil.ToFloat64(m.upgrades.open.WithLabelValues(proto)),
		testutil.ToFloat64(m.upgrades.total.WithLabelValues(proto, resultUpgraded)),
		testutil.ToFloat64(m.upgrades.total.WithLabelValues(proto, resultRejected)),
		testutil.ToFloat64(m.upgrades.total.WithLabelValues(proto, resultError))
}

func TestUpgradeEchoAndCredentials(t *testing.T) {
	const wsBearer = "base64url.bearer.authorization.k8s.io.dXNlcg, v5.channel.k8s.io"
	tests := []struct {
		name      string
		req       upgradeRequest
		proto     string
		wantCN    string
		wantAuth  string
		wantWSPro string
	}{{
		name:     "spdy sidecar",
		req:      upgradeRequest{upgrade: "SPDY/3.1", headers: map[string]string{"X-Stream-Protocol-Version": "v4.channel.k8s.io"}},
		proto:    protoSPDY,
		wantCN:   "fanout-client",
		wantAuth: "Bearer sidecar-token",
	}, {
		name:     "spdy passthrough",
		req:      upgradeRequest{upgrade: "SPDY/3.1", headers: map[string]string{"Authorization": "Bearer user-token"}},
		proto:    protoSPDY,
		wantAuth: "Bearer user-token",
	}, {
		name:      "websocket sidecar",
		req:       upgradeRequest{upgrade: "websocket", headers: map[string]string{"Sec-WebSocket-Protocol": "v5.channel.k8s.io", "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}},
		proto:     protoWebSocket,
		wantCN:    "fanout-client",
		wantAuth:  "Bearer sidecar-token",
		wantWSPro: "v5.channel.k8s.io",
	}, {
		name:      "websocket passthrough with bearer subprotocol",
		req:       upgradeRequest{upgrade: "websocket", headers: map[string]string{"Sec-WebSocket-Protocol": wsBearer, "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}},
		proto:     protoWebSocket,
		wantWSPro: wsBearer,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rig, b := rigBefore(t, 0)

			c, br, resp := dialUpgrade(t, rig.proxy, tc.req)
			if resp.StatusCode != http.StatusSwitchingProtocols {
				t.Fatalf("status = %d, want 101", resp.StatusCode)
			}
			for i := range 3 {
				echoLine(t, c, br, fmt.Sprintf("line %d", i))
			}
			s := <-b.seen
			want := seenUpgrade{
				proto: "http/1.1", httpProto: "HTTP/1.1", clientCN: tc.wantCN, auth: tc.wantAuth,
				wsProtocols: tc.wantWSPro, host: b.addr,
				path: "/api/v1/namespaces/ns/pods/p/exec?command=cat&stdin=true",
			}
			if s != want {
				t.Errorf("the apiserver saw\n %+v\nwant\n %+v", s, want)
			}
			if open, up, _, _ := upgradeSeries(t, rig.m, tc.proto); open != 1 || up != 1 {
				t.Errorf("while open: %s gauge = %v, upgraded = %v; want 1, 1", tc.proto, open, up)
			}
			c.Close()
			testkit.WaitFor(t, "the gauge to drop", func() bool {
				open, _, _, _ := upgradeSeries(t, rig.m, tc.proto)
				return open == 0
			})
			recs := rig.picker.Records()
			if len(recs) != 1 || recs[0].Info.Kind != balancer.Long {
				t.Fatalf("picks = %+v, want one Long pick", recs)
			}
			testkit.WaitFor(t, "Done", func() bool { return len(rig.picker.Records()[0].Dones) == 1 })
			if d := rig.picker.Records()[0].Dones[0]; d.StatusCode != http.StatusSwitchingProtocols || d.Err != nil {
				t.Errorf("Done = %+v, want status 101 without error", d)
			}
		})
	}
}

// A client-supplied Authorization that is blank selects sidecar mode; the
// blank header must not reach the apiserver next to the sidecar's token.
func TestUpgradeSidecarReplacesBlankAuthorization(t *testing.T) {
	rig, b := rigBefore(t, 0)
	c, _, resp := dialUpgrade(t, rig.proxy, upgradeRequest{upgrade: "SPDY/3.1", headers: map[string]string{"Authorization": " "}})
	defer c.Close()
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("status = %d", resp.StatusCode)
	}
	if s := <-b.seen; s.auth != "Bearer sidecar-token" || s.clientCN != "fanout-client" {
		t.Errorf("apiserver saw auth %q cert %q, want the sidecar's", s.auth, s.clientCN)
	}
}

func TestUpgradeRejectedIsForwarded(t *testing.T) {
	rig, _ := rigBefore(t, http.StatusForbidden)
	_, br, resp := dialUpgrade(t, rig.proxy, upgradeRequest{upgrade: "SPDY/3.1"})
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("status = %d, want the apiserver's 403", resp.StatusCode)
	}
	body, _ := io.ReadAll(io.LimitReader(br, 1<<10))
	if !strings.Contains(string(body), "is forbidden") {
		t.Errorf("body = %q, want the apiserver's Status", body)
	}
	testkit.WaitFor(t, "the metrics", func() bool {
		_, up, rej, _ := upgradeSeries(t, rig.m, protoSPDY)
		return up == 0 && rej == 1
	})
	if n := len(rig.picker.Records()); n != 1 {
		t.Errorf("%d picks, want 1: an answered upgrade is never retried", n)
	}
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestUpgradeDialRetry(t *testing.T) {
	t.Run("second endpoint answers", func(t *testing.T) {
		ca := testkit.NewCA(t)
		dead := closedPort(t)
		b := newUpgradeBackend(t, ca, 0)
		rig := newUpgradeRig(t, ca, Config{}, dead, b.addr)
		c, br, resp := dialUpgrade(t, rig.proxy, upgradeRequest{upgrade: "websocket"})
		if resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("status = %d, want 101 from the second endpoint", resp.StatusCode)
		}
		echoLine(t, c, br, "after retry")
		recs := rig.picker.Records()
		if len(recs) != 2 || recs[0].Addr != dead || recs[1].Info.Avoid != dead || recs[1].Addr != b.addr {
			t.Fatalf("picks = %+v, want %s then %s avoiding it", recs, dead, b.addr)
		}
		if d := recs[0].Dones; len(d) != 1 || !d[0].Unavailable || d[0].Err == nil {
			t.Errorf("Done of the dead endpoint = %+v, want one Unavailable error", d)
		}
		if v := testutil.ToFloat64(rig.m.retries.WithLabelValues(reasonUnprocessed)); v != 1 {
			t.Errorf("retries = %v, want 1", v)
		}
	})
	t.Run("both dead", func(t *testing.T) {
		ca := testkit.NewCA(t)
		dead1, dead2 := closedPort(t), closedPort(t)
		rig := newUpgradeRig(t, ca, Config{}, dead1, dead2)
		_, _, resp := dialUpgrade(t, rig.proxy, upgradeRequest{upgrade: "SPDY/3.1"})
		if resp.StatusCode != http.StatusBadGateway {
			t.Fatalf("status = %d, want 502", resp.StatusCode)
		}
		st := testkit.ReadStatus(t, resp)
		if !strings.Contains(st.Message, dead2) || !strings.Contains(st.Message, "retried after") || !strings.Contains(st.Message, dead1) {
			t.Errorf("message = %q, want both endpoints named", st.Message)
		}
		if strings.Contains(st.Message, "sidecar-token") {
			t.Errorf("message leaks the token: %q", st.Message)
		}
		if n := len(rig.picker.Records()); n != 2 {
			t.Errorf("%d picks, want 2 (one retry)", n)
		}
		if _, _, _, failed := upgradeSeries(t, rig.m, protoSPDY); failed != 1 {
			t.Errorf("error result = %v, want 1", failed)
		}
	})
	t.Run("TLS failure is retried", func(t *testing.T) {
		ca := testkit.NewCA(t)
		other := newUpgradeBackend(t, testkit.NewCA(t), 0) // untrusted CA
		b := newUpgradeBackend(t, ca, 0)
		rig := newUpgradeRig(t, ca, Config{}, other.addr, b.addr)
		c, _, resp := dialUpgrade(t, rig.proxy, upgradeRequest{upgrade: "SPDY/3.1"})
		defer c.Close()
		if resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("status = %d, want 101 from the trusted endpoint", resp.StatusCode)
		}
		if n := len(rig.picker.Records()); n != 2 {
			t.Errorf("%d picks, want 2", n)
		}
	})
}

// StopLongRunning (which ends watches when a shutdown starts) must leave
// upgraded connections alone; they get the grace, then are closed.
func TestUpgradeShutdownGrace(t *testing.T) {
	const grace = 1500 * time.Millisecond
	for _, endsItself := range []bool{false, true} {
		t.Run(fmt.Sprintf("endsItself=%v", endsItself), func(t *testing.T) {
			ca := testkit.NewCA(t)
			b := newUpgradeBackend(t, ca, 0)
			rig := newUpgradeRigOn(t, ca, listener.Config{ShutdownGrace: grace}, nil, Config{}, b.addr)
			c, br, resp := dialUpgrade(t, rig.proxy, upgradeRequest{upgrade: "SPDY/3.1"})
			if resp.StatusCode != http.StatusSwitchingProtocols {
				t.Fatalf("status = %d", resp.StatusCode)
			}
			echoLine(t, c, br, "before")

			start := time.Now()
			stopped := make(chan error, 1)
			go func() { stopped <- rig.srv.Stop(context.Background()) }()
			// Shutdown has begun (StopLongRunning ran) once new requests
			// are refused; the session must still work then.
			testkit.WaitFor(t, "the shutdown to begin", func() bool {
				conn, err := net.Dial("tcp", rig.proxy)
				if err != nil {
					return true // listener closed
				}
				conn.Close()
				return false
			})
			echoLine(t, c, br, "during grace")
			if endsItself {
				c.Close()
				select {
				case err := <-stopped:
					if err != nil {
						t.Errorf("Stop = %v, want nil when the session ended within the grace", err)
					}
				case <-time.After(grace / 2):
					t.Errorf("Stop still waits after the only session ended")
				}
				return
			}
			var err error
			select {
			case err = <-stopped:
			case <-time.After(testkit.WaitLimit):
				t.Fatal("Stop did not return")
			}
			if took := time.Since(start); took < grace-100*time.Millisecond {
				t.Errorf("Stop returned after %v, before the grace %v", took, grace)
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Stop = %v, want the deadline: it had to cut a session", err)
			}
			if _, err := br.ReadByte(); err == nil {
				t.Errorf("the session still reads after the grace; want it closed")
			}
			testkit.WaitFor(t, "the gauge to drop", func() bool {
				open, _, _, _ := upgradeSeries(t, rig.m, protoSPDY)
				return open == 0
			})
		})
	}
}

// Log streams (and any long-running read) reach the client line by line
// while the apiserver holds them open, for longer than any of the proxy's
// own timeouts.
func TestLogFollowStreamsLineByLine(t *testing.T) {
	const lines = 3
	next := make(chan struct{})
	addr, rt := proxytest.NewBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		for i := range lines {
			fmt.Fprintf(w, "line %d\n", i)
			w.(http.Flusher).Flush()
			select {
			case <-next:
			case <-r.Context().Done():
				return
			}
		}
	}), false)
	p := proxytest.NewPicker(addr)
	u := proxytest.NewUpstream()
	u.Set(addr, rt)
	// Timeouts far below the pause between lines: none may cut the stream.
	_, _, base := startProxyOn(t, listener.Config{ReadHeaderTimeout: 100 * time.Millisecond, IdleTimeout: 100 * time.Millisecond}, nil, Config{}, p, u, nil)
	resp, err := testkit.NewClient(t, false).Get(base + "/api/v1/namespaces/ns/pods/p/log?follow=true")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	got := make(chan string)
	go func() {
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				close(got)
				return
			}
			got <- line
		}
	}()
	for i := range lines {
		select {
		case line, ok := <-got:
			if !ok {
				t.Fatalf("the stream ended before line %d: cut while the apiserver held it", i)
			}
			if want := fmt.Sprintf("line %d\n", i); line != want {
				t.Fatalf("line %d = %q, want %q", i, line, want)
			}
		case <-time.After(testkit.WaitLimit):
			t.Fatalf("line %d did not arrive while the apiserver held the stream: not flushed", i)
		}
		// Rather than sleep for longer than the proxy's timeouts, wait
		// until they cut a connection opened after this line arrived: had
		// one applied to the stream, it would have fired by then too.
		waitForHeaderTimeout(t, strings.TrimPrefix(base, "http://"))
		next <- struct{}{}
	}
	if _, ok := <-got; ok {
		t.Errorf("more lines than sent")
	}
	if r := p.Records(); len(r) != 1 || r[0].Info.Kind != balancer.Long {
		t.Errorf("picks = %+v, want one Long pick", r)
	}
}

// waitForHeaderTimeout opens a connection to the proxy at addr, sends
// nothing, and returns once the proxy has closed it: its ReadHeaderTimeout
// has fired.
func waitForHeaderTimeout(t *testing.T, addr string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(testkit.WaitLimit))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("a silent connection to the proxy read %v, want EOF: the proxy did not cut it by its header timeout", err)
	}
}

// An h2c upgrade offer (curl --http2 on http://) is optional: fanout
// declines it and serves the request like any other.
func TestH2CUpgradeOfferServedPlain(t *testing.T) {
	addr, rt := proxytest.NewBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "" || r.Header.Get("HTTP2-Settings") != "" {
			http.Error(w, "upgrade headers leaked", http.StatusBadRequest)
			return
		}
		io.WriteString(w, "plain")
	}), true)
	p := proxytest.NewPicker(addr)
	u := proxytest.NewUpstream()
	u.Set(addr, rt)
	_, _, base := startProxy(t, Config{}, p, u, nil)
	req, _ := http.NewRequest(http.MethodGet, base+"/api/v1/pods", nil)
	req.Header.Set("Connection", "Upgrade, HTTP2-Settings")
	req.Header.Set("Upgrade", "h2c")
	req.Header.Set("HTTP2-Settings", "AAMAAABkAARAAAAAAAIAAAAA")
	resp, err := testkit.NewClient(t, false).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || string(body) != "plain" {
		t.Errorf("got %d %q, want 200 \"plain\"", resp.StatusCode, body)
	}
	if r := p.Records(); len(r) != 1 || r[0].Info.Kind != balancer.Short {
		t.Errorf("picks = %+v, want one Short pick", r)
	}
}

// Structural cost of one upgraded session, for TestUpgradeCostPerConnection.
const (
	// upgradeGoroutines is what the proxy runs per session: the HTTP
	// server's connection goroutine, which copies the apiserver's output
	// for the session's life, and one goroutine copying the client's
	// input. (UpgradeAwareHandler, used before, ran both copies on
	// goroutines of their own: 3.)
	upgradeGoroutines = 2
	// upgradeSessionBytes bounds the live heap of a session for the proxy,
	// the test backend and the client together (this test runs all three
	// in one process). By the heap profile (MemProfileRate 1, a profile
	// written while the sessions are open): 64 KiB are
	// the relay's two io.Copy buffers, 16 KiB the bufio reader
	// and writer of the proxy's and the backend's HTTP connections, about
	// 15 KiB the TLS state and record buffers of the proxy's connection
	// to the backend at both ends, the rest request and context objects:
	// 106-108 KiB of HeapAlloc measured, with and without -race, with
	// UpgradeAwareHandler; 105.6 KiB with fanout's own relay. 124 KiB
	// leaves 15% headroom; one more 32 KiB buffer per session, or a
	// second copy of the bufio pair, goes beyond it.
	upgradeSessionBytes = 124 << 10
)

// TestUpgradeCostPerConnection holds many upgraded sessions open at once and
// bounds what each costs: the goroutines the proxy starts for it (told
// apart from the backend's by a pprof label inherited from the goroutine
// that started each server) and the live heap of the process.
func TestUpgradeCostPerConnection(t *testing.T) {
	if testing.Short() {
		t.Skip("measurement")
	}
	const n = 100
	ca := testkit.NewCA(t)
	var b *upgradeBackend
	pprof.Do(context.Background(), pprof.Labels("side", "backend"), func(context.Context) {
		b = newUpgradeBackend(t, ca, 0)
	})
	var rig *upgradeRig
	pprof.Do(context.Background(), pprof.Labels("side", "proxy"), func(context.Context) {
		rig = newUpgradeRig(t, ca, Config{}, b.addr)
	})
	// Warm up: one session builds the transport and TLS state.
	c0, br0, _ := dialUpgrade(t, rig.proxy, upgradeRequest{upgrade: "SPDY/3.1"})
	echoLine(t, c0, br0, "warm")
	c0.Close()
	testkit.WaitFor(t, "the warm-up session to end", func() bool {
		open, _, _, _ := upgradeSeries(t, rig.m, protoSPDY)
		return open == 0
	})

	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	proxy0, backend0 := labelledGoroutines(t, "proxy"), labelledGoroutines(t, "backend")
	conns := make([]net.Conn, 0, n)
	for i := range n {
		c, br, resp := dialUpgrade(t, rig.proxy, upgradeRequest{upgrade: "SPDY/3.1"})
		if resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("session %d: status %d", i, resp.StatusCode)
		}
		echoLine(t, c, br, "x")
		conns = append(conns, c)
	}
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	proxyG := float64(labelledGoroutines(t, "proxy")-proxy0) / n
	backendG := float64(labelledGoroutines(t, "backend")-backend0) / n
	heap := (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / n
	t.Logf("per upgraded session: %.2f proxy goroutines, %.2f backend goroutines, %.1f KiB live heap (proxy + backend + client)", proxyG, backendG, heap/1024)
	// A goroutine that ends late (a TLS handshake's, a timer's) may still
	// be counted: 0.05 per session is five of them, and far below a
	// goroutine added per session.
	if proxyG > upgradeGoroutines+0.05 {
		t.Errorf("the proxy runs %.2f goroutines per upgraded session, want at most %d (the connection's and one copier)", proxyG, upgradeGoroutines)
	}
	if heap > upgradeSessionBytes {
		t.Errorf("an upgraded session holds %.1f KiB of live heap, want at most %d KiB", heap/1024, upgradeSessionBytes>>10)
	}
	if open, _, _, _ := upgradeSeries(t, rig.m, protoSPDY); open != n {
		t.Errorf("gauge = %v with %d sessions open", open, n)
	}
	for _, c := range conns {
		c.Close()
	}
	testkit.WaitFor(t, "every session to end", func() bool {
		open, _, _, _ := upgradeSeries(t, rig.m, protoSPDY)
		return open == 0
	})
}

// labelledGoroutines counts the goroutines whose pprof label "side" is
// side: goroutines inherit their creator's labels, so every goroutine of a
// server started under pprof.Do carries them.
func labelledGoroutines(t *testing.T, side string) int {
	t.Helper()
	var buf bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&buf, 1); err != nil {
		t.Fatal(err)
	}
	// debug=1 groups identical stacks: "N @ pcs" then "# labels: {...}".
	want := fmt.Sprintf(`"side":%q`, side)
	total, count := 0, 0
	for _, l := range strings.Split(buf.String(), "\n") {
		var n int
		if _, err := fmt.Sscanf(l, "%d @", &n); err == nil {
			count = n
			continue
		}
		if strings.HasPrefix(l, "# labels:") && strings.Contains(l, want) {
			total += count
		}
	}
	return total
}

// TestUpgradeRetryWithinBudget: an upgrade's retry after a failed dial
// goes through the one attempt policy, so the retry budget caps it like
// any other retry.
func TestUpgradeRetryWithinBudget(t *testing.T) {
	ca := testkit.NewCA(t)
	dead := closedPort(t)
	b := newUpgradeBackend(t, ca, 0)
	rig := newUpgradeRig(t, ca, Config{RetryBudget: &RetryBudget{Window: time.Second}}, dead, b.addr)
	_, _, resp := dialUpgrade(t, rig.proxy, upgradeRequest{upgrade: "websocket"})
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("status = %d, want 502: a budget of no retries leaves the dead endpoint's failure", resp.StatusCode)
	}
	if n := len(rig.picker.Records()); n != 1 {
		t.Errorf("%d picks, want 1: the budget allows no retry", n)
	}
	if v := testutil.ToFloat64(rig.m.budgetOut.WithLabelValues(reasonUnprocessed)); v != 1 {
		t.Errorf("fanout_retry_budget_exhausted_total{reason=unprocessed} = %v, want 1", v)
	}
	if v := testutil.ToFloat64(rig.m.retries.WithLabelValues(reasonUnprocessed)); v != 0 {
		t.Errorf("fanout_retries_total{reason=unprocessed} = %v, want 0", v)
	}
}

// TestUpgradeEarlyClientData: what a client sends right behind its upgrade
// request, before the answer (a WebSocket client may), is already in the
// HTTP server's buffer when the connection is hijacked; it must reach the
// apiserver first, in order.
func TestUpgradeEarlyClientData(t *testing.T) {
	rig, _ := rigBefore(t, 0)
	c := testkit.Dial(t, rig.proxy)
	var req bytes.Buffer
	if err := (upgradeRequest{upgrade: "websocket"}).write(&req, "/api/v1/namespaces/ns/pods/p/exec?command=cat&stdin=true"); err != nil {
		t.Fatal(err)
	}
	req.WriteString("early\n")
	// One write: the server reads the request and the data together.
	if _, err := c.Write(req.Bytes()); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("answer %v, %v; want 101", resp, err)
	}
	if line, err := br.ReadString('\n'); err != nil || line != "early\n" {
		t.Fatalf("the echo of the early data = %q, %v", line, err)
	}
	echoLine(t, c, br, "after")
}

// TestUpgradeNeitherSwitchedNorRefused: an answer to an upgrade that is
// neither 101 nor an error status is nothing the client could use; it
// gets a 502 Status saying so, as with UpgradeAwareHandler.
func TestUpgradeNeitherSwitchedNorRefused(t *testing.T) {
	rig, b := rigBefore(t, http.StatusOK)
	_, _, resp := dialUpgrade(t, rig.proxy, upgradeRequest{upgrade: "SPDY/3.1"})
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("status = %d, want 502", resp.StatusCode)
	}
	if st := testkit.ReadStatus(t, resp); !strings.Contains(st.Message, "invalid upgrade response: status code 200") || !strings.Contains(st.Message, b.addr) {
		t.Errorf("message = %q, want the endpoint and the status it answered", st.Message)
	}
	if _, up, rej, failed := upgradeSeries(t, rig.m, protoSPDY); up != 0 || rej != 0 || failed != 1 {
		t.Errorf("upgraded, rejected, error = %v, %v, %v; want 0, 0, 1", up, rej, failed)
	}
	if n := len(rig.picker.Records()); n != 1 {
		t.Errorf("%d picks, want 1: the apiserver answered", n)
	}
}
