package harness

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// HAProxy is a running HAProxy in front of the apiservers, configured the
// way an expert would for kube-apiserver: L7, round robin, HTTP/2 over TLS
// to the backends with the client's certificate, /readyz health checks
// with rise and fall, retries with redispatch.
type HAProxy struct {
	// Config talks to HAProxy's frontend (plain HTTP on loopback) with no
	// credentials: HAProxy presents the user's certificate upstream.
	Config     *rest.Config
	ConfigPath string
	LogPath    string
	proc       *process
}

// HAProxyConfig is the configuration StartHAProxy writes, with %s for the
// listen address, the CA file, the client PEM (certificate and key) and
// the server lines. It is published in docs/resilience.md.
const HAProxyConfig = `global
    maxconn 4000

defaults
    mode http
    timeout connect 5s
    timeout client 1h
    timeout server 1h
    timeout tunnel 1h
    timeout check 1s
    # Resend a request that failed before a response to another server,
    # and the retryable status codes too; 429 is not among those HAProxy
    # can retry on.
    retries 3
    option redispatch 1
    retry-on all-retryable-errors
    option http-buffer-request

frontend apiserver
    bind %s

    default_backend apiservers

backend apiservers
    balance roundrobin
    option httpchk
    http-check send meth GET uri /readyz
    http-check expect status 200
    default-server check inter 2s fall 2 rise 2 ssl verify required ca-file %s crt %s alpn h2 check-alpn http/1.1
%s`

// StartHAProxy runs haproxy (from PATH) for user, whose certificate it
// presents to every apiserver. It stops when tb ends.
func (cp *ControlPlane) StartHAProxy(ctx context.Context, tb testing.TB, user string) (*HAProxy, error) {
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		return nil, fmt.Errorf("haproxy is not installed (apt-get install haproxy): %w", err)
	}
	ck, err := cp.PKI.MintUser(user)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(cp.Dir, "haproxy-")
	if err != nil {
		return nil, err
	}
	pem := filepath.Join(dir, "client.pem")
	if err := os.WriteFile(pem, append(append([]byte(nil), ck.CertPEM...), ck.KeyPEM...), 0o600); err != nil {
		return nil, err
	}
	port, err := freePort(net.ParseIP("127.0.0.1"))
	if err != nil {
		return nil, err
	}
	listen := fmt.Sprintf("127.0.0.1:%d", port)
	var servers strings.Builder
	for i, h := range cp.Net.Hosts {
		fmt.Fprintf(&servers, "    server api%d %s\n", i+1, net.JoinHostPort(h.IP.String(), fmt.Sprint(APIServerPort)))
	}
	h := &HAProxy{ConfigPath: filepath.Join(dir, "haproxy.cfg"), LogPath: filepath.Join(dir, "haproxy.log")}
	cfg := fmt.Sprintf(HAProxyConfig, listen, cp.PKI.CA.CertFile, pem, servers.String())
	if err := os.WriteFile(h.ConfigPath, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	proc, err := startProcess("haproxy", h.LogPath, []string{bin, "-db", "-f", h.ConfigPath}, nil)
	if err != nil {
		return nil, err
	}
	h.proc = proc
	onCleanup(tb, func() { _ = proc.stop(10 * time.Second) })
	h.Config = &rest.Config{Host: "http://" + listen}
	// Wait until it forwards.
	client := &http.Client{Timeout: 2 * time.Second}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if proc.exited() {
			return nil, fmt.Errorf("haproxy exited: %v; log %s:\n%s", proc.exitError(), h.LogPath, tail(h.LogPath, 20))
		}
		resp, err := client.Get(h.Config.Host + "/version")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return h, nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("haproxy at %s does not answer /version: %v; log %s:\n%s", listen, err, h.LogPath, tail(h.LogPath, 20))
		}
	}
}
