package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/fanout-dev/fanout/internal/testkit"
)

// TestStartFailuresSayWhy runs the real binary with each input that keeps
// it from starting. Each must exit with its code (2 for a flag's value, 1
// for the environment) and leave on stderr exactly one cause line (fanout's
// own for bad flags, else the ERROR log line) that names the flag, file or
// port and what to do, and no dependency-injection trace: a sidecar that
// exits during its start crash-loops its pod, and kubectl logs shows only
// these lines.
func TestStartFailuresSayWhy(t *testing.T) {
	bin := buildFanout(t)
	dir := t.TempDir()
	ca := testkit.NewCA(t)
	// No apiserver listens there: these runs fail before they need one.
	kc := clientKubeconfig(t, dir, ca, "u", "https://127.0.0.1:1")
	missingToken := filepath.Join(dir, "missing-token")
	tokenKC := testkit.WriteFile(t, dir, "token.kubeconfig", []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: https://127.0.0.1:1, certificate-authority: %s}}]
users: [{name: u, user: {tokenFile: %s}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`, filepath.Join(dir, "ca.crt"), missingToken)))
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	busy := taken.Addr().String()
	free := []string{"--listen-address", "127.0.0.1:0", "--admin-address", "127.0.0.1:0", "--allow-shared-loopback"}
	with := func(args ...string) []string { return append(append([]string{}, free...), args...) }
	noDir := filepath.Join(dir, "absent", "client.kubeconfig")

	tests := []struct {
		name string
		args []string
		code int
		want []string // all in the cause line
	}{
		{"listen port taken", []string{"--kubeconfig", kc, "--listen-address", busy, "--admin-address", "127.0.0.1:0", "--allow-shared-loopback"},
			1, []string{"--listen-address " + busy, "address already in use", "pass a free port to --listen-address"}},
		{"admin port taken", []string{"--kubeconfig", kc, "--listen-address", "127.0.0.1:0", "--admin-address", busy, "--allow-shared-loopback"},
			1, []string{"--admin-address " + busy, "address already in use", "pass a free port to --admin-address"}},
		{"write-kubeconfig in a missing directory", with("--kubeconfig", kc, "--write-kubeconfig", noDir),
			1, []string{"--write-kubeconfig " + noDir, filepath.Dir(noDir) + " does not exist", "mount a volume there"}},
		{"missing tokenFile", with("--kubeconfig", tokenKC),
			1, []string{"--kubeconfig " + tokenKC, missingToken, "no such file or directory", "mount them"}},
		{"malformed endpoints", with("--kubeconfig", kc, "--endpoints", "https://[bad"),
			2, []string{"--endpoints", `https://[bad`, "expected https://host:port"}},
		{"endpoints of another scheme", with("--kubeconfig", kc, "--endpoints", "http://10.0.0.1:6443"),
			2, []string{"--endpoints", "http://10.0.0.1:6443", "scheme must be https"}},
		{"missing kubeconfig", with("--kubeconfig", filepath.Join(dir, "nope")),
			1, []string{"--kubeconfig " + filepath.Join(dir, "nope"), "pass the path of the kubeconfig"}},
		{"kubeconfig is a directory", with("--kubeconfig", dir),
			1, []string{"--kubeconfig " + dir, "is a directory", "readable by fanout's user"}},
		{"flag value of the wrong type", with("--kubeconfig", kc, "--max-inflight", "many"),
			2, []string{`"--max-inflight"`, `"many"`, "fanout --help lists the flags"}},
		{"flag values out of range", with("--kubeconfig", kc, "--max-inflight", "0", "--probe-fall", "0"),
			2, []string{"--max-inflight must be positive", "--probe-fall must be positive"}},
		{"bad log format", with("--kubeconfig", kc, "--log-format", "xml"),
			2, []string{"--log-format must be text or json"}},
		{"unknown flag", with("--kubeconfig", kc, "--listen", "127.0.0.1:7080"),
			2, []string{"unknown flag: --listen", "fanout --help lists the flags"}},
		{"no kubeconfig", nil, 2, []string{"--kubeconfig is required"}},
		{"stray argument", with("--kubeconfig", kc, "extra"),
			2, []string{`unexpected argument "extra"`, "subcommands (status, top, hold, version) come first"}},
		{"subcommand after flags", with("--kubeconfig", kc, "status"),
			2, []string{`unexpected argument "status"`}},
	}
	if os.Geteuid() != 0 {
		// root reads a file of mode 0000 anyway.
		unreadable := testkit.WriteFile(t, dir, "unreadable.kubeconfig", []byte("apiVersion: v1\n"))
		if err := os.Chmod(unreadable, 0); err != nil {
			t.Fatal(err)
		}
		tests = append(tests, struct {
			name string
			args []string
			code int
			want []string
		}{"unreadable kubeconfig", with("--kubeconfig", unreadable), 1, []string{"--kubeconfig " + unreadable, "permission denied", "readable by fanout's user"}})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			testkit.CheckStartFailure(t, bin, tt.args, tt.code, tt.want)
		})
	}
}
