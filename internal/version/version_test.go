package version

import (
	"os/exec"
	"runtime/debug"
	"strings"
	"testing"
)

func TestGet(t *testing.T) {
	vcs := &debug.BuildInfo{
		Main: debug.Module{Version: "v0.0.0-20261205033931-2ff7e346529b+dirty"},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "2ff7e346529b82cb75b60ffce3f09afc533b1cd4"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	tests := []struct {
		name           string
		stampV, stampC string
		bi             *debug.BuildInfo
		wantV, wantC   string
		wantModified   bool
	}{
		{"no build info", "", "", nil, "(devel)", "unknown", false},
		{"devel build without VCS", "", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "(devel)", "unknown", false},
		{"go build with VCS", "", "", vcs, vcs.Main.Version, "2ff7e346529b82cb75b60ffce3f09afc533b1cd4", true},
		{"go install of a tag", "", "", &debug.BuildInfo{Main: debug.Module{Version: "v0.3.0"}}, "v0.3.0", "unknown", false},
		{"stamped, as make and the Dockerfile do", "v0.3.0-4-gabcdef1", "abcdef1234", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "v0.3.0-4-gabcdef1", "abcdef1234", false},
		{"stamped from a dirty tree", "abcdef1-dirty", "abcdef1234", nil, "abcdef1-dirty", "abcdef1234", true},
		{"stamps win over the build info", "v1.0.0", "1111", vcs, "v1.0.0", "1111", true},
		{"a version stamped alone keeps the recorded commit", "v1.0.0", "", vcs, "v1.0.0", "2ff7e346529b82cb75b60ffce3f09afc533b1cd4", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := get(tt.stampV, tt.stampC, tt.bi)
			if got.Version != tt.wantV || got.Commit != tt.wantC || got.Modified != tt.wantModified || got.GoVersion == "" {
				t.Errorf("get(%q, %q, ...) = %+v, want version %q, commit %q, modified %v", tt.stampV, tt.stampC, got, tt.wantV, tt.wantC, tt.wantModified)
			}
		})
	}
}

// TestBuildsStamp: make build and make image-binaries pass the version and
// commit to the variables Get reads (a renamed variable would silently
// leave every build at "(devel)"), and the Dockerfile takes them as build
// arguments.
func TestBuildsStamp(t *testing.T) {
	const pkg = "github.com/fanout-dev/fanout/internal/version"
	out, err := exec.Command("make", "-C", "../..", "-n", "build", "image-binaries", "VERSION=v7.7.7", "COMMIT=c0ffee").CombinedOutput()
	if err != nil {
		t.Skipf("make -n: %v\n%s", err, out)
	}
	builds := 0
	for l := range strings.Lines(string(out)) {
		if !strings.Contains(l, " build ") {
			continue
		}
		builds++
		for _, want := range []string{"-X " + pkg + ".version=v7.7.7", "-X " + pkg + ".commit=c0ffee"} {
			if !strings.Contains(l, want) {
				t.Errorf("make runs a go build without %q:\n%s", want, l)
			}
		}
	}
	// build: fanout, fanout-injector, kubectl-fanout; image-binaries: the
	// first two, static.
	if builds != 5 {
		t.Errorf("make -n build image-binaries ran %d go builds, want 5:\n%s", builds, out)
	}
}
