package version

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// newestRelease is the version of CHANGELOG.md's newest section below
// [Unreleased], with its leading v: what the manifests ship and the next
// `make release` builds.
func newestRelease(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`(?m)^## \[([^\]]+)\]`).FindAllStringSubmatch(string(b), -1) {
		if m[1] != "Unreleased" {
			if !regexp.MustCompile(`^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$`).MatchString(m[1]) {
				t.Fatalf("CHANGELOG.md's newest section is [%s], not a semantic version", m[1])
			}
			return "v" + m[1]
		}
	}
	t.Fatal("CHANGELOG.md has no release section (## [X.Y.Z] - date)")
	return ""
}

// TestReleaseBuild: `make release` of CHANGELOG.md's newest version builds
// binaries that print exactly that version (and the commit checked out),
// and refuses a version that is not semantic or has no CHANGELOG section.
// It builds for this machine's architecture only, without the image, and
// without the git tag check (the tag comes after the merge).
func TestReleaseBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds both binaries")
	}
	v := newestRelease(t)
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("git rev-parse HEAD: %v", err)
	}
	bin := t.TempDir()
	make := func(args ...string) (string, error) {
		out, err := exec.Command("make", append([]string{"-C", "../..", "BIN=" + bin, "RELEASE_CHECK_TAG=0", "RELEASE_IMAGE=0", "RELEASE_ARCHES=" + runtime.GOARCH}, args...)...).CombinedOutput()
		return string(out), err
	}
	for _, bad := range []struct{ version, want string }{
		{"0.1.0", "not a semantic version with a leading v"},
		{"v1.2", "not a semantic version with a leading v"},
		{"v99.0.0", "CHANGELOG.md's newest section is [" + strings.TrimPrefix(v, "v") + "], want [99.0.0]"},
	} {
		if out, err := make("release", "VERSION="+bad.version); err == nil || !strings.Contains(out, bad.want) {
			t.Errorf("make release VERSION=%s: %v, output:\n%s\nwant a failure saying %q", bad.version, err, out, bad.want)
		}
	}
	if out, err := make("release", "VERSION="+v); err != nil {
		t.Fatalf("make release VERSION=%s: %v\n%s", v, err, out)
	}
	dir := filepath.Join(bin, "release", v)
	for _, c := range []struct{ name, flag string }{{"fanout", "version"}, {"fanout-injector", "--version"}} {
		path := filepath.Join(dir, c.name+"-linux-"+runtime.GOARCH)
		out, err := exec.Command(path, c.flag).Output()
		if err != nil {
			t.Fatalf("%s %s: %v", path, c.flag, err)
		}
		lines := strings.Split(string(out), "\n")
		if lines[0] != c.name+" "+v || !strings.HasPrefix(lines[1], "commit: "+strings.TrimSpace(string(head))) {
			t.Errorf("%s %s printed:\n%s\nwant %q and the commit %s", c.name, c.flag, out, c.name+" "+v, head)
		}
	}
	sums, err := os.ReadFile(filepath.Join(dir, "SHA256SUMS"))
	if err != nil || strings.Count(string(sums), "\n") != 2 {
		t.Errorf("SHA256SUMS: %v\n%s\nwant a line for each binary", err, sums)
	}
}

// TestManifestsShipTheRelease: every image of fanout the manifests and the
// install docs name is CHANGELOG.md's newest release, never a moving tag
// such as latest, which IfNotPresent would pin to whatever a node pulled
// first; so are the Helm chart's appVersion (its default image tag) and
// version.
func TestManifestsShipTheRelease(t *testing.T) {
	v := newestRelease(t)
	ref := regexp.MustCompile(`ghcr\.io/fanout-dev/fanout:[A-Za-z0-9._-]+`)
	found := 0
	for _, root := range []string{"../../manifests", "../../docs/injector.md", "../../docs/static-pods.md"} {
		err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range ref.FindAllString(string(b), -1) {
				found++
				if m != "ghcr.io/fanout-dev/fanout:"+v {
					t.Errorf("%s names %s, want ghcr.io/fanout-dev/fanout:%s (docs/releasing.md)", path, m, v)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if found < 3 {
		t.Errorf("found %d references to fanout's image, want the injector's, the sidecar example's and the static pod's", found)
	}
	// The Helm chart's image tag defaults to its appVersion; its own version
	// is the release's, without the v.
	chart, err := os.ReadFile("../../charts/fanout/Chart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"appVersion: \"" + v + "\"", "version: " + strings.TrimPrefix(v, "v")} {
		key, _, _ := strings.Cut(want, ":")
		got := regexp.MustCompile(`(?m)^` + key + `: .*$`).FindString(string(chart))
		if got != want {
			t.Errorf("charts/fanout/Chart.yaml has %q, want %q (docs/releasing.md)", got, want)
		}
	}
}
