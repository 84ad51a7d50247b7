// Package version says which build of fanout is running: the version and
// commit stamped at build time (-ldflags -X, as make build, make image and
// the Dockerfile do), else what the Go toolchain recorded (module version,
// vcs.revision, vcs.modified). `fanout version`, `fanout-injector
// --version` and fanout_build_info all read Get, so they agree.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Stamped at build time with
//
//	-ldflags "-X github.com/fanout-dev/fanout/internal/version.version=V -X github.com/fanout-dev/fanout/internal/version.commit=C"
//
// Empty means unstamped: Get falls back to the build info.
var version, commit string

// Info is one build's identity.
type Info struct {
	// Version is the stamped version (make: git describe --tags --always
	// --dirty), else the main module's version as go build recorded it
	// (a tag, or a pseudo-version ending in +dirty for uncommitted
	// changes), else "(devel)".
	Version string
	// Commit is the VCS revision, or "unknown".
	Commit string
	// Modified is true when the tree had uncommitted changes.
	Modified bool
	// GoVersion is the Go release that compiled the binary.
	GoVersion string
	// Platform is GOOS/GOARCH.
	Platform string
}

// Get returns the running binary's Info.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return get(version, commit, bi)
}

// get is Get with the stamps and the build info (nil when the binary has
// none) as arguments.
func get(stampVersion, stampCommit string, bi *debug.BuildInfo) Info {
	i := Info{
		Version:   "(devel)",
		Commit:    "unknown",
		GoVersion: runtime.Version(),
		Platform:  runtime.GOOS + "/" + runtime.GOARCH,
	}
	if bi != nil {
		if v := bi.Main.Version; v != "" {
			i.Version = v
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				i.Commit = s.Value
			case "vcs.modified":
				i.Modified = s.Value == "true"
			}
		}
		i.Modified = i.Modified || strings.HasSuffix(i.Version, "+dirty")
	}
	if stampVersion != "" {
		i.Version = stampVersion
		i.Modified = i.Modified || strings.HasSuffix(stampVersion, "-dirty")
	}
	if stampCommit != "" {
		i.Commit = stampCommit
	}
	return i
}

// Text is what `fanout version` prints: the program's name, then one
// field a line.
func (i Info) Text(program string) string {
	commit := i.Commit
	if i.Modified {
		commit += " (modified)"
	}
	return fmt.Sprintf("%s %s\ncommit: %s\ngo: %s %s\n", program, i.Version, commit, i.GoVersion, i.Platform)
}
