package main

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/fanout-dev/fanout/internal/metrics"
	"github.com/fanout-dev/fanout/internal/testkit"
)

func TestFlags(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "fanout-injector")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	dir := t.TempDir()
	ca := testkit.NewCA(t)
	kp := ca.Serving("fanout-injector.fanout-system.svc")
	cert := testkit.WriteFile(t, dir, "tls.crt", kp.CertPEM)
	key := testkit.WriteFile(t, dir, "tls.key", kp.KeyPEM)
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  string
	}{
		{"help", []string{"--help"}, 0, "--sidecar-image"},
		{"nothing", nil, 2, "--tls-cert-file and --tls-private-key-file are required"},
		{"no image", []string{"--tls-cert-file", cert, "--tls-private-key-file", key}, 2, "--sidecar-image"},
		{"bad quantity", []string{"--tls-cert-file", cert, "--tls-private-key-file", key, "--sidecar-image", "i", "--sidecar-memory-limit", "lots"}, 2, "--sidecar-memory-limit"},
		{"request above limit", []string{"--tls-cert-file", cert, "--tls-private-key-file", key, "--sidecar-image", "i", "--sidecar-memory-request", "1Gi"}, 2, "exceeds its limit"},
		{"same ports", []string{"--tls-cert-file", cert, "--tls-private-key-file", key, "--sidecar-image", "i", "--sidecar-admin-port", "7080"}, 2, "must differ"},
		{"bad hosted label", []string{"--tls-cert-file", cert, "--tls-private-key-file", key, "--sidecar-image", "i", "--hosted-pod-labels", "bad key!=x"}, 2, "--hosted-pod-labels"},
		{"bad pki", []string{"--pki", "vault", "--sidecar-image", "i"}, 2, "--pki must be files or self"},
		{"pki self with files", []string{"--pki", "self", "--tls-cert-file", cert, "--tls-private-key-file", key, "--sidecar-image", "i"}, 2, "are for --pki=files"},
		{"pki self outside a pod", []string{"--pki", "self", "--sidecar-image", "i"}, 1, "--pki=self needs the pod's ServiceAccount token"},
		{"unreadable key pair", []string{"--tls-cert-file", cert, "--tls-private-key-file", cert, "--sidecar-image", "i"}, 1, "--tls-private-key-file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			testkit.CheckExit(t, bin, tt.args, tt.wantCode, tt.wantOut)
		})
	}
}

func TestOptionsResources(t *testing.T) {
	o := newOptions()
	o.certFile, o.keyFile, o.sidecar.Image = "c", "k", "i"
	o.cpuLimit = "100m"
	o.memoryRequest = ""
	if err := o.complete(); err != nil {
		t.Fatal(err)
	}
	r := o.sidecar.Resources
	if r.Requests.Cpu().String() != "20m" || r.Limits.Cpu().String() != "100m" || r.Limits.Memory().String() != "256Mi" {
		t.Errorf("resources %+v", r)
	}
	if _, ok := r.Requests[corev1.ResourceMemory]; ok {
		t.Errorf("empty --sidecar-memory-request still set a request: %+v", r.Requests)
	}
}

// TestMetricsServerTimeouts: the plaintext metrics listener closes a
// connection that sends nothing, one that stops in the middle of its
// headers, and one left idle after a scrape, so that no client can hold
// connections open on it.
func TestMetricsServerTimeouts(t *testing.T) {
	for name, d := range map[string]time.Duration{
		"read-header": metricsTimeouts.readHeader, "read": metricsTimeouts.read,
		"write": metricsTimeouts.write, "idle": metricsTimeouts.idle,
	} {
		if d <= 0 {
			t.Errorf("metrics server %s timeout is %s; want one", name, d)
		}
	}
	short := timeouts{readHeader: 200 * time.Millisecond, read: 200 * time.Millisecond, write: time.Second, idle: 200 * time.Millisecond}
	srv := newMetricsServer(metrics.NewRegistry(), slog.New(slog.DiscardHandler), short)
	if err := srv.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	defer srv.Stop(context.Background())

	// closed reads c until the server closes it; a read that reaches the
	// deadline means the server kept the connection.
	closed := func(t *testing.T, r io.Reader, c net.Conn) {
		t.Helper()
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadAll(r); err != nil {
			t.Fatalf("the server kept the connection open for 10 s: %v", err)
		}
	}
	dial := func(t *testing.T) net.Conn {
		c, err := net.Dial("tcp", srv.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	t.Run("silent", func(t *testing.T) {
		c := dial(t)
		closed(t, c, c)
	})
	t.Run("partial header", func(t *testing.T) {
		c := dial(t)
		if _, err := io.WriteString(c, "GET /metrics HTTP/1.1\r\nHost: x\r\n"); err != nil {
			t.Fatal(err)
		}
		closed(t, c, c)
	})
	t.Run("idle after a scrape", func(t *testing.T) {
		c := dial(t)
		if _, err := io.WriteString(c, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "fanout_build_info") {
			t.Fatalf("GET /metrics: %d\n%s", resp.StatusCode, body)
		}
		closed(t, br, c)
	})
}

// TestLinksNoSidecarPackages: the injector binary links cmd/fanout-injector/webhook
// and nothing else of components/ (the proxy, balancer, transport, resolver,
// health and admin packages are the sidecar's).
func TestLinksNoSidecarPackages(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		rest, ok := strings.CutPrefix(p, "github.com/fanout-dev/fanout/")
		if !ok {
			continue
		}
		if strings.HasPrefix(rest, "components") && rest != "cmd/fanout-injector/webhook" || strings.HasPrefix(rest, "resolver") {
			t.Errorf("fanout-injector links %s; move what it needs to internal/", p)
		}
	}
}
