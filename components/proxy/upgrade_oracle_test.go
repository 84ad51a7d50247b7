package proxy

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	utilproxy "k8s.io/apimachinery/pkg/util/proxy"

	"github.com/fanout-dev/fanout/internal/testkit"
)

// TestUpgradeRelayMatchesUpgradeAwareHandler is the oracle test of the
// upgrade relay (upgrade.go), kept instead of apimachinery's
// UpgradeAwareHandler to hold k8s.io out of the sidecar. The cases are
// those of apimachinery's upgradeaware_test.go (TestProxyUpgrade,
// TestProxyUpgradeErrorResponseTerminates, TestProxyUpgradeErrorResponse,
// the early-data and closing cases of its copy loop), each run against the
// same backend behind UpgradeAwareHandler and behind fanout's relay. What
// the client sees must be the same: the status, the body of a refusal,
// the bytes after a switch, and whether the connection ends.
//
// The one difference by design: where UpgradeAwareHandler hands an
// answer that is neither 101 nor an error to its Responder, fanout
// answers 502 itself; the test's Responder answers 502 as fanout does,
// so both are compared.
func TestUpgradeRelayMatchesUpgradeAwareHandler(t *testing.T) {
	cases := []struct {
		name string
		// backend answers the upgrade request; it may hijack.
		backend func(w http.ResponseWriter, r *http.Request)
		// send is what the client writes after the request, if anything.
		send string
		// want is checked on both, beyond their being equal.
		want seenByClient
	}{
		{
			name:    "switched: echo",
			backend: switchThen(func(c net.Conn, br *bufio.Reader) { echoN(c, br, 5, "hello ") }),
			send:    "world",
			want:    seenByClient{status: 101, after: "hello world", ended: true},
		},
		{
			name: "switched: backend speaks first and hangs up",
			backend: switchThen(func(c net.Conn, _ *bufio.Reader) {
				io.WriteString(c, "bye")
			}),
			want: seenByClient{status: 101, after: "bye", ended: true},
		},
		{
			name: "switched: a megabyte each way",
			backend: switchThen(func(c net.Conn, br *bufio.Reader) {
				echoN(c, br, 1<<20, "")
			}),
			send: strings.Repeat("0123456789abcdef", 1<<16),
			want: seenByClient{status: 101, after: strings.Repeat("0123456789abcdef", 1<<16), ended: true},
		},
		{
			name:    "refused 400 with a body, then the connection ends",
			backend: refuse(http.StatusBadRequest),
			want:    seenByClient{status: 400, body: "some data", ended: true},
		},
		{
			name:    "refused 500 with a body, then the connection ends",
			backend: refuse(http.StatusInternalServerError),
			want:    seenByClient{status: 500, body: "some data", ended: true},
		},
		{
			name:    "answered 200: no upgrade",
			backend: func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "not an upgrade") },
			want:    seenByClient{status: http.StatusBadGateway},
		},
	}
	for _, code := range []int{300, 302, 307} {
		cases = append(cases, struct {
			name    string
			backend func(w http.ResponseWriter, r *http.Request)
			send    string
			want    seenByClient
		}{
			name: fmt.Sprintf("redirect %d: not followed", code),
			backend: func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, "https://example.com/there", code)
			},
			want: seenByClient{status: http.StatusBadGateway},
		})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ca := testkit.NewCA(t)
			var backendRequests atomic.Int32
			backend := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				backendRequests.Add(1)
				tc.backend(w, r)
			}))
			backend.TLS = ca.ServerTLSConfig(ca.Serving(upgradeServerName), tls.VerifyClientCertIfGiven)
			backend.StartTLS()
			defer backend.Close()
			addr := backend.Listener.Addr().String()

			theirs := oracleUpgradeProxy(t, ca, addr)
			fanout := newUpgradeRig(t, ca, Config{}, addr).proxy

			before := backendRequests.Load()
			want := clientSees(t, theirs, tc.send)
			if n := backendRequests.Load() - before; n != 1 {
				t.Fatalf("UpgradeAwareHandler sent %d requests to the backend, want 1", n)
			}
			before = backendRequests.Load()
			got := clientSees(t, fanout, tc.send)
			if n := backendRequests.Load() - before; n != 1 {
				t.Errorf("fanout sent %d requests to the backend, want 1 (a second request on the connection must not pass)", n)
			}
			if got != want {
				t.Errorf("through fanout:\n  %s\nthrough UpgradeAwareHandler:\n  %s", got, want)
			}
			if want != tc.want {
				t.Errorf("the oracle itself saw %s, want %s", want, tc.want)
			}
		})
	}
}

// seenByClient is what an upgrading client observes.
type seenByClient struct {
	status int
	body   string // of a refusal
	after  string // what came after a 101
	ended  bool   // the proxy closed the connection
}

func (s seenByClient) String() string {
	after := s.after
	if len(after) > 40 {
		after = fmt.Sprintf("%s… (%d bytes)", after[:20], len(after))
	}
	return fmt.Sprintf("status %d, body %q, after %q, ended %v", s.status, s.body, after, s.ended)
}

// clientSees sends an upgrade request through the proxy at addr. After a
// 101 it writes send and reads what comes until the proxy ends the
// connection. After the backend's refusal it writes a second request on
// the same connection, which must never pass, and reads to the end. After
// the proxy's own 502 it stops: the proxy may keep that connection.
func clientSees(t *testing.T, proxyAddr, send string) seenByClient {
	t.Helper()
	c, err := net.Dial("tcp", proxyAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(testkit.WaitLimit))
	if err := (upgradeRequest{upgrade: "websocket"}).write(c, "/api/v1/namespaces/ns/pods/p/exec?command=cat&stdin=true"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	s := seenByClient{status: resp.StatusCode}
	switch {
	case resp.StatusCode == http.StatusBadGateway:
		return s
	case resp.StatusCode == http.StatusSwitchingProtocols:
		go io.WriteString(c, send)
	default:
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("reading the refusal's body: %v", err)
		}
		s.body = string(b)
		fmt.Fprintf(c, "GET /there HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	}
	// Beyond a refusal, any byte would be the second request's answer.
	// The end is EOF, or a reset when the second request met a closed
	// socket; only the deadline means the proxy kept the connection.
	rest, err := io.ReadAll(br)
	var ne net.Error
	s.after, s.ended = string(rest), !errors.As(err, &ne) || !ne.Timeout()
	return s
}

// oracleUpgradeProxy is apimachinery's UpgradeAwareHandler in front of
// backend, with the sidecar's credentials, as kube-apiserver's own
// proxies use it.
func oracleUpgradeProxy(t *testing.T, ca *testkit.CA, backend string) string {
	t.Helper()
	cert := ca.Client("fanout-client")
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool, Certificates: []tls.Certificate{cert.TLS}, ServerName: upgradeServerName}}
	t.Cleanup(tr.CloseIdleConnections)
	h := utilproxy.NewUpgradeAwareHandler(&url.URL{Scheme: "https", Host: backend}, tr, false, false, badGateway{})
	h.UseRequestLocation = true
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

// badGateway answers the proxy's own errors with 502, as fanout does.
type badGateway struct{}

func (badGateway) Error(w http.ResponseWriter, _ *http.Request, err error) {
	http.Error(w, err.Error(), http.StatusBadGateway)
}

// switchThen answers 101 and hands the connection to then, which ends it
// by returning.
func switchThen(then func(c net.Conn, br *bufio.Reader)) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		c, brw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		fmt.Fprintf(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\n", r.Header.Get("Upgrade"))
		then(c, brw.Reader)
	}
}

// echoN reads n bytes and writes them back after prefix.
func echoN(c net.Conn, br *bufio.Reader, n int, prefix string) {
	b := make([]byte, n)
	if _, err := io.ReadFull(br, b); err != nil {
		return
	}
	io.WriteString(c, prefix+string(b))
}

func refuse(code int) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(code)
		io.WriteString(w, "some data")
	}
}
