package main

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/fanout-dev/fanout/internal/testkit"
)

// TestHelpGoesToStdout: --help and -h, of fanout and of each subcommand,
// print on stdout and exit 0, so that `fanout --help | less` works; the
// help names the version command.
func TestHelpGoesToStdout(t *testing.T) {
	bin := buildFanout(t)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--help"}, "fanout version"},
		{[]string{"-h"}, "--kubeconfig"},
		{[]string{"--help"}, "Exit codes: 0 after --help, --version or SIGTERM; 2 for bad flags"},
		{[]string{"status", "--help"}, "Usage: fanout status"},
		{[]string{"top", "-h"}, "Usage: fanout top"},
		{[]string{"hold", "--help"}, "Usage: fanout hold"},
		{[]string{"version", "--help"}, "Usage: fanout version"},
	} {
		code, stdout, stderr := testkit.RunBinary(t, bin, tt.args...)
		if code != 0 || stderr != "" || !strings.Contains(stdout, tt.want) {
			t.Errorf("fanout %v: exit %d, stderr %q, stdout:\n%s\nwant exit 0, no stderr, stdout containing %q", tt.args, code, stderr, stdout, tt.want)
		}
	}
}

// TestVersion builds fanout as make build does, with the version and
// commit stamped, and as a plain go build does, which records the module
// version and VCS revision: `fanout version`, `fanout --version` and the
// fanout_build_info series of the running binary must carry the same
// values, those of the build.
func TestVersion(t *testing.T) {
	const pkg = "github.com/fanout-dev/fanout/internal/version"
	stamped := filepath.Join(t.TempDir(), "fanout")
	ldflags := "-X " + pkg + ".version=v9.8.7-test-dirty -X " + pkg + ".commit=0123456789abcdef"
	if out, err := exec.Command("go", "build", "-ldflags", ldflags, "-o", stamped, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	t.Run("stamped", func(t *testing.T) {
		checkVersion(t, stamped, "v9.8.7-test-dirty", "0123456789abcdef (modified)", "0123456789abcdef")
	})

	t.Run("build info", func(t *testing.T) {
		plain := filepath.Join(t.TempDir(), "fanout")
		if out, err := exec.Command("go", "build", "-buildvcs=true", "-o", plain, ".").CombinedOutput(); err != nil {
			t.Skipf("go build -buildvcs=true (no git or no repository?): %v\n%s", err, out)
		}
		// What the toolchain recorded, read by go version -m.
		out, err := exec.Command("go", "version", "-m", plain).Output()
		if err != nil {
			t.Fatal(err)
		}
		var modVersion, revision, modified string
		for l := range strings.Lines(string(out)) {
			f := strings.Fields(l)
			switch {
			case len(f) >= 3 && f[0] == "mod" && f[1] == "github.com/fanout-dev/fanout":
				modVersion = f[2]
			case len(f) == 2 && f[0] == "build":
				if v, ok := strings.CutPrefix(f[1], "vcs.revision="); ok {
					revision = v
				}
				if v, ok := strings.CutPrefix(f[1], "vcs.modified="); ok {
					modified = v
				}
			}
		}
		if modVersion == "" || revision == "" {
			t.Fatalf("go version -m records no module version or vcs.revision:\n%s", out)
		}
		commit := revision
		if modified == "true" {
			commit += " (modified)"
		}
		checkVersion(t, plain, modVersion, commit, revision)
	})
}

// checkVersion runs bin version, bin --version and bin itself, and checks
// the version and commit lines and fanout_build_info's labels.
func checkVersion(t *testing.T, bin, version, commitLine, revision string) {
	t.Helper()
	want := "fanout " + version + "\ncommit: " + commitLine + "\ngo: " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + "\n"
	for _, args := range [][]string{{"version"}, {"--version"}} {
		code, stdout, stderr := testkit.RunBinary(t, bin, args...)
		if code != 0 || stdout != want || stderr != "" {
			t.Errorf("fanout %v: exit %d, stderr %q, stdout:\n%s\nwant exit 0 and:\n%s", args, code, stderr, stdout, want)
		}
	}
	labels := buildInfoLabels(t, bin)
	for k, v := range map[string]string{"version": version, "revision": revision, "goversion": runtime.Version()} {
		if labels[k] != v {
			t.Errorf("fanout_build_info %s=%q, want %q (all labels: %v)", k, labels[k], v, labels)
		}
	}
}

// buildInfoLabels starts bin, reads fanout_build_info from its admin
// server's /metrics, and stops it.
func buildInfoLabels(t *testing.T, bin string) map[string]string {
	t.Helper()
	dir := t.TempDir()
	kc := clientKubeconfig(t, dir, testkit.NewCA(t), "u", "https://127.0.0.1:1")
	cmd := exec.Command(bin, "--kubeconfig", kc, "--listen-address", "127.0.0.1:0", "--admin-address", "127.0.0.1:0", "--allow-shared-loopback", "--probe-interval", "0")
	a := testkit.StartLogged(t, cmd, "admin server listening")
	body := scrape(t, "http://"+a)
	m := regexp.MustCompile(`(?m)^fanout_build_info\{([^}]*)\} 1$`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no fanout_build_info in /metrics:\n%s", body)
	}
	labels := map[string]string{}
	for _, kv := range regexp.MustCompile(`(\w+)="([^"]*)"`).FindAllStringSubmatch(m[1], -1) {
		labels[kv[1]] = kv[2]
	}
	return labels
}
