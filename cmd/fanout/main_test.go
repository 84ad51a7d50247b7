package main

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fanout-dev/fanout/components/sidecar"
	"github.com/fanout-dev/fanout/internal/testkit"
)

// buildFanout compiles this command once per test binary.
func buildFanout(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "fanout")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func TestFlags(t *testing.T) {
	bin := buildFanout(t)
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  string
	}{
		{"help", []string{"--help"}, 0, "--write-kubeconfig"},
		{"help lists the limits", []string{"--help"}, 0, "--max-long-running"},
		{"help lists listen-tls", []string{"--help"}, 0, "--listen-tls"},
		{"help lists pprof", []string{"--help"}, 0, "--enable-pprof"},
		{"listen-tls needs a kubeconfig to write", []string{"--kubeconfig", "x", "--listen-tls"}, 2, "--listen-tls needs --write-kubeconfig"},
		{"limits must be positive", []string{"--kubeconfig", "x", "--max-inflight", "0"}, 2, "--max-inflight must be positive"},
		{"no kubeconfig", nil, 2, "--kubeconfig is required"},
		{"remote listener refused", []string{"--kubeconfig", "x", "--listen-address", "0.0.0.0:7080"}, 2, "--allow-remote"},
		{"unknown flag", []string{"--nope"}, 2, "unknown flag"},
		{"missing kubeconfig file", []string{"--kubeconfig", "/nonexistent/kubeconfig", "--allow-shared-loopback"}, 1, "/nonexistent/kubeconfig"},
		{"help lists allow-shared-loopback", []string{"--help"}, 0, "--allow-shared-loopback"},
		{"help lists memory-limit", []string{"--help"}, 0, "--memory-limit"},
		{"help lists sysmon", []string{"--help"}, 0, "--sysmon"},
		{"help names fanout top", []string{"--help"}, 0, "fanout top [--admin-address ADDR] [--once] [-o json]"},
		{"help lists listen-from", []string{"--help"}, 0, "--listen-from"},
		{"help names fanout hold", []string{"--help"}, 0, "fanout hold --socket-dir DIR"},
		{"hold is a subcommand", []string{"hold", "--help"}, 0, "It never accepts a connection or reads data"},
		{"hold needs a socket directory", []string{"hold"}, 2, "--socket-dir is required"},
		{"hold holds loopback only", []string{"hold", "--socket-dir", "/tmp", "--listen-address", "0.0.0.0:7080"}, 2, "want a loopback host:port"},
		{"hold takes no arguments", []string{"hold", "--socket-dir", "/tmp", "extra"}, 2, "unexpected arguments"},
		{"top is a subcommand", []string{"top", "--help"}, 0, "Keys: r sort by requests/s"},
		{"top reports an unreachable admin address", []string{"top", "--admin-address", "127.0.0.1:1"}, 1, "fanout top: reading http://127.0.0.1:1/debug/cost"},
		{"sysmon must be go or steady", []string{"--kubeconfig", "x", "--sysmon", "off"}, 2, `--sysmon "off": want go or steady`},
		{"memory limit must be a size", []string{"--kubeconfig", "x", "--memory-limit", "lots"}, 2, `--memory-limit "lots": want auto, off, or a positive size`},
		{"memory limit is logged", []string{"--kubeconfig", "/nonexistent/kubeconfig", "--allow-shared-loopback", "--memory-limit", "96Mi"}, 1, `msg="Go memory limit set" bytes=100663296 source=flag`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			testkit.CheckExit(t, bin, tt.args, tt.wantCode, tt.wantOut)
		})
	}
}

// TestSIGTERMEndsWatchCleanly runs the real binary, opens a watch through
// it, and sends SIGTERM: the watch must end with a complete response (so
// client-go re-watches instead of reporting an error) and the process must
// exit 0.
func TestSIGTERMEndsWatchCleanly(t *testing.T) {
	bin := buildFanout(t)
	ca := testkit.NewCA(t)
	upstream := tlsUpstream(t, ca, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintln(w, `{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a"}}}`)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))

	dir := t.TempDir()
	kc := clientKubeconfig(t, dir, ca, "e2e", upstream.URL)
	written := filepath.Join(dir, "client.kubeconfig")
	cmd := exec.Command(bin, "--kubeconfig", kc,
		"--listen-address", "127.0.0.1:0", "--admin-address", "127.0.0.1:0",
		"--write-kubeconfig", written, "--shutdown-grace", "5s", "--allow-shared-loopback")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill() }()

	var server string
	for deadline := time.Now().Add(30 * time.Second); server == ""; {
		if raw, err := os.ReadFile(written); err == nil {
			for _, line := range strings.Split(string(raw), "\n") {
				if s, ok := strings.CutPrefix(strings.TrimSpace(line), "server: "); ok {
					server = s
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("fanout did not write its kubeconfig within 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}

	resp, err := http.Get(server + "/api/v1/namespaces/default/configmaps?watch=true")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	first, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || !strings.Contains(first, `"ADDED"`) {
		t.Fatalf("first watch event = %q, %v", first, err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatalf("watch ended with %v after SIGTERM, want a clean end of stream", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("fanout exited with %v after SIGTERM, want 0", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("fanout did not exit within 20s of SIGTERM")
	}
}

// TestSharedLoopbackRefused runs the binary in the test's own network
// namespace and, as root, in a new one that holds only lo, as a pod's holds
// only lo and its veth. Where the test's namespace is recognisably a node's
// (a hardware device or a bridge), plaintext must be refused there with
// exit 2 and accepted with --allow-shared-loopback or in the new namespace;
// it then gets as far as reading the (missing) kubeconfig, exit 1.
func TestSharedLoopbackRefused(t *testing.T) {
	bin := buildFanout(t)
	run := func(args ...string) (int, string) {
		out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), string(out)
		} else if err != nil {
			t.Fatal(err)
		}
		return 0, string(out)
	}
	base := []string{bin, "--kubeconfig", "/nonexistent/kubeconfig", "--admin-address", "127.0.0.1:0"}

	reason, err := sidecar.SharedNetworkNamespace(sidecar.SysClassNet)
	if err != nil {
		t.Skipf("cannot read %s: %v", sidecar.SysClassNet, err)
	}
	if reason != "" {
		if code, out := run(base...); code != 2 || !strings.Contains(out, "--allow-shared-loopback") || !strings.Contains(out, "--listen-tls") {
			t.Errorf("plaintext in a network namespace shared with the node (%s): exit %d, want 2 naming both ways out:\n%s", reason, code, out)
		}
		if code, out := run(append(base, "--allow-shared-loopback")...); code != 1 || !strings.Contains(out, "/nonexistent/kubeconfig") {
			t.Errorf("with --allow-shared-loopback: exit %d, want 1 (the missing kubeconfig):\n%s", code, out)
		}
	} else {
		t.Logf("this test's network namespace is not recognisably a node's; only the new namespace is checked")
	}

	if os.Geteuid() != 0 {
		t.Skip("creating a network namespace needs root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("no ip (iproute2)")
	}
	ns := fmt.Sprintf("fotestns%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	// ip netns exec mounts a sysfs of the new namespace, as a runtime does.
	if code, out := run(append([]string{"ip", "netns", "exec", ns}, base...)...); code != 1 || !strings.Contains(out, "/nonexistent/kubeconfig") {
		t.Errorf("plaintext in a namespace with only lo: exit %d, want 1 (the missing kubeconfig, not a refusal):\n%s", code, out)
	}
}

// clientKubeconfig writes a kubeconfig for server with a client
// certificate of user, signed by ca, into dir and returns its path.
func clientKubeconfig(t *testing.T, dir string, ca *testkit.CA, user, server string) string {
	t.Helper()
	client := ca.Client(user)
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %s, certificate-authority: %s}}]
users: [{name: u, user: {client-certificate: %s, client-key: %s}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`, server, testkit.WriteFile(t, dir, "ca.crt", ca.CertPEM),
		testkit.WriteFile(t, dir, "c.crt", client.CertPEM), testkit.WriteFile(t, dir, "c.key", client.KeyPEM))
	return testkit.WriteFile(t, dir, "kubeconfig", []byte(kc))
}

// tlsUpstream starts a fake kube-apiserver serving h, with a serving
// certificate from ca for kubernetes and 127.0.0.1, that requires a client
// certificate from it, as kube-apiserver does.
func tlsUpstream(t *testing.T, ca *testkit.CA, h http.Handler, opts ...testkit.APIServerOption) *testkit.APIServer {
	t.Helper()
	opts = append([]testkit.APIServerOption{testkit.WithNames("kubernetes", "127.0.0.1"), testkit.WithClientAuth(tls.RequireAndVerifyClientCert)}, opts...)
	return testkit.NewAPIServer(t, ca, h, opts...)
}
