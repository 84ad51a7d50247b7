package main

import (
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/fanout-dev/fanout/internal/testkit"
)

// buildInjector compiles this command with extra go build arguments.
func buildInjector(t *testing.T, args ...string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "fanout-injector")
	out, err := exec.Command("go", append(append([]string{"build"}, args...), "-o", bin, ".")...).CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestStartFailuresSayWhy: each input that keeps the injector from
// starting gives its exit code and exactly one cause line on stderr that
// names the flag, file or port, with no dependency-injection trace.
func TestStartFailuresSayWhy(t *testing.T) {
	bin := buildInjector(t)
	dir := t.TempDir()
	kp := testkit.NewCA(t).Serving("fanout-injector.fanout-system.svc")
	cert := testkit.WriteFile(t, dir, "tls.crt", kp.CertPEM)
	key := testkit.WriteFile(t, dir, "tls.key", kp.KeyPEM)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	busy := taken.Addr().String()
	base := []string{"--tls-cert-file", cert, "--tls-private-key-file", key, "--sidecar-image", "i"}
	with := func(args ...string) []string { return append(append([]string{}, base...), args...) }
	for _, tt := range []struct {
		name string
		args []string
		env  map[string]string
		code int
		want []string
	}{
		{"webhook port taken", with("--listen-address", busy, "--metrics-address", "127.0.0.1:0"),
			nil, 1, []string{"--listen-address " + busy, "address already in use", "stop it or pass a free port"}},
		{"metrics port taken", with("--listen-address", "127.0.0.1:0", "--metrics-address", busy),
			nil, 1, []string{"--metrics-address " + busy, "address already in use", "pass a free port to --metrics-address"}},
		{"missing certificate", []string{"--tls-cert-file", filepath.Join(dir, "nope.crt"), "--tls-private-key-file", key, "--sidecar-image", "i", "--listen-address", "127.0.0.1:0", "--metrics-address", ""},
			nil, 1, []string{"--tls-cert-file " + filepath.Join(dir, "nope.crt"), "no such file or directory"}},
		{"key file holds a certificate", []string{"--tls-cert-file", cert, "--tls-private-key-file", cert, "--sidecar-image", "i", "--listen-address", "127.0.0.1:0", "--metrics-address", ""},
			nil, 1, []string{"--tls-private-key-file " + cert, "not a usable key pair"}},
		{"bad quantities", with("--sidecar-memory-limit", "lots", "--sidecar-cpu-limit", "x"),
			nil, 2, []string{"invalid flags", `--sidecar-memory-limit "lots"`, `--sidecar-cpu-limit "x"`}},
		{"flag value of the wrong type", with("--sidecar-listen-port", "http"),
			nil, 2, []string{`"--sidecar-listen-port"`, "fanout-injector --help lists the flags"}},
		{"unknown flag", with("--nope"), nil, 2, []string{"unknown flag: --nope"}},
		{"stray argument", with("extra"), nil, 2, []string{`unexpected argument "extra"`}},
		{"own image without its pod's name", base[:4], nil, 2, []string{"invalid flags", "--sidecar-image is empty and POD_NAMESPACE and POD_NAME are not both set"}},
		{"own image outside a pod", append(base[:4:4], "--listen-address", "127.0.0.1:0", "--metrics-address", ""), map[string]string{"POD_NAMESPACE": "ns", "POD_NAME": "p"},
			1, []string{"--sidecar-image empty (the injector's own image) needs the pod's ServiceAccount token"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			testkit.CheckStartFailure(t, bin, tt.args, tt.code, tt.want)
		})
	}
}

// TestHelpAndVersion: --help and -h go to stdout and exit 0; --version
// prints the stamped version and commit, which fanout_build_info carries
// too.
func TestHelpAndVersion(t *testing.T) {
	const pkg = "github.com/fanout-dev/fanout/internal/version"
	bin := buildInjector(t, "-ldflags", "-X "+pkg+".version=v9.8.7-test -X "+pkg+".commit=fedcba9876543210")
	for _, args := range [][]string{{"--help"}, {"-h"}} {
		code, stdout, stderr := testkit.RunBinary(t, bin, args...)
		if code != 0 || stderr != "" || !strings.Contains(stdout, "--sidecar-image") || !strings.Contains(stdout, "fanout-injector --version") {
			t.Errorf("fanout-injector %v: exit %d, stderr %q, stdout:\n%s", args, code, stderr, stdout)
		}
	}
	want := "fanout-injector v9.8.7-test\ncommit: fedcba9876543210\ngo: " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + "\n"
	if code, stdout, stderr := testkit.RunBinary(t, bin, "--version"); code != 0 || stdout != want || stderr != "" {
		t.Errorf("fanout-injector --version: exit %d, stderr %q, stdout:\n%s\nwant:\n%s", code, stderr, stdout, want)
	}

	dir := t.TempDir()
	kp := testkit.NewCA(t).Serving("fanout-injector.fanout-system.svc")
	cmd := exec.Command(bin, "--tls-cert-file", testkit.WriteFile(t, dir, "tls.crt", kp.CertPEM), "--tls-private-key-file", testkit.WriteFile(t, dir, "tls.key", kp.KeyPEM),
		"--sidecar-image", "i", "--listen-address", "127.0.0.1:0", "--metrics-address", "127.0.0.1:0")
	a := testkit.StartLogged(t, cmd, "metrics server listening")
	resp, err := http.Get("http://" + a + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	wantSeries := `fanout_build_info{goversion="` + runtime.Version() + `",revision="fedcba9876543210",version="v9.8.7-test"} 1`
	if !strings.Contains(string(body), wantSeries) {
		t.Errorf("/metrics lacks %s:\n%s", wantSeries, body)
	}
}
