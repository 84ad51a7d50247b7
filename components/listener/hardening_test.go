package listener

import (
	"io"
	"net/http"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fanout-dev/fanout/components/proxy/proxytest"
	"github.com/fanout-dev/fanout/internal/testkit"
)

func TestIsLoopbackHost(t *testing.T) {
	for host, want := range map[string]bool{
		"127.0.0.1:7080":          true,
		"127.0.0.1":               true,
		"127.1.2.3:80":            true,
		"localhost":               true,
		"localhost:7080":          true,
		"LocalHost:7080":          true,
		"[::1]:7080":              true,
		"[::1]":                   true,
		"::1":                     true,
		"[::ffff:127.0.0.1]:7080": true,

		"":                         false, // HTTP/1.0 without Host
		"evil.example":             false,
		"evil.example:7080":        false,
		"10.0.0.1:7080":            false,
		"0.0.0.0:7080":             false,
		"127.0.0.1.evil.example":   false,
		"localhost.evil.example":   false,
		"evil.localhost":           false,
		"[::1]x":                   false,
		"[::1]:7080:1":             false,
		"[fe80::1%25lo]:7080":      false,
		"[::2]:7080":               false,
		"127.0.0.1:7080@evil.test": false,
	} {
		if got := isLoopbackHost(host); got != want {
			t.Errorf("isLoopbackHost(%q) = %v, want %v", host, got, want)
		}
	}
}

// TestHostCheck: the listener answers requests addressed to loopback
// only, against DNS rebinding: a page that points evil.example at
// 127.0.0.1 sends Host: evil.example. Refused requests get a Status that
// says what to do, and never reach an apiserver. AllowAnyHost
// (--allow-remote) turns the check off.
func TestHostCheck(t *testing.T) { forEachH1Server(t, testHostCheck) }

func testHostCheck(t *testing.T, h1 string) {
	for _, tc := range []struct {
		name     string
		cfg      Config
		raw      string
		wantCode int
	}{
		{"loopback address", Config{H1Server: h1}, "GET /api/v1/pods HTTP/1.1\r\nHost: 127.0.0.1:7080\r\n\r\n", http.StatusOK},
		{"localhost", Config{H1Server: h1}, "GET /api/v1/pods HTTP/1.1\r\nHost: localhost:7080\r\n\r\n", http.StatusOK},
		{"IPv6 loopback", Config{H1Server: h1}, "GET /api/v1/pods HTTP/1.1\r\nHost: [::1]:7080\r\n\r\n", http.StatusOK},
		{"rebound name", Config{H1Server: h1}, "GET /api/v1/pods HTTP/1.1\r\nHost: evil.example:7080\r\n\r\n", http.StatusForbidden},
		{"rebound name, upgrade", Config{H1Server: h1}, "POST /api/v1/namespaces/ns/pods/p/exec HTTP/1.1\r\nHost: evil.example\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n", http.StatusForbidden},
		{"pod IP", Config{H1Server: h1}, "GET /api/v1/pods HTTP/1.1\r\nHost: 10.1.2.3:7080\r\n\r\n", http.StatusForbidden},
		{"no Host (HTTP/1.0)", Config{H1Server: h1}, "GET /api/v1/pods HTTP/1.0\r\n\r\n", http.StatusForbidden},
		{"any Host with AllowAnyHost", Config{H1Server: h1, AllowAnyHost: true}, "GET /api/v1/pods HTTP/1.1\r\nHost: fanout.example:7080\r\n\r\n", http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, u := proxytest.OKBackend(t)
			s, _, _ := startProxy(t, tc.cfg, p, u, nil)
			resp := testkit.RawRequest(t, s.Addr().String(), tc.raw)
			if resp.StatusCode != tc.wantCode {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				t.Fatalf("status %d %q, want %d", resp.StatusCode, b, tc.wantCode)
			}
			if tc.wantCode == http.StatusOK {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				return
			}
			st := testkit.ReadStatus(t, resp)
			if st.Reason != metav1.StatusReasonForbidden || !strings.Contains(st.Message, "loopback") || !strings.Contains(st.Message, "--allow-remote") {
				t.Errorf("Status %s %q: want Forbidden, saying the listener takes loopback Hosts and naming --allow-remote", st.Reason, st.Message)
			}
			if calls := u.Calls(); len(calls) != 0 {
				t.Errorf("a refused request reached the apiserver %s", calls[0].Addr)
			}
		})
	}
}

// TestHostCheckH2C: over h2c the Host is the :authority, checked the same.
func TestHostCheckH2C(t *testing.T) { forEachH1Server(t, testHostCheckH2C) }

func testHostCheckH2C(t *testing.T, h1 string) {
	p, u := proxytest.OKBackend(t)
	_, _, base := startProxy(t, Config{H1Server: h1}, p, u, nil)
	client := testkit.NewClient(t, true)
	for host, want := range map[string]int{"127.0.0.1": http.StatusOK, "evil.example:7080": http.StatusForbidden} {
		req, err := http.NewRequest(http.MethodGet, base+"/api/v1/pods", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.ProtoMajor != 2 || resp.StatusCode != want {
			t.Errorf(":authority %s: HTTP/%d %d, want HTTP/2 %d", host, resp.ProtoMajor, resp.StatusCode, want)
		}
	}
}
