package harness

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
)

// HelmVersion is the helm release the chart tests run (e2e/chart and
// TestNodeHelmInstall). It is built from the Go module proxy with its own
// go.mod, not this module's, so helm's dependencies never move the
// Kubernetes version the harness builds.
const HelmVersion = "v4.3.2"

// Helm returns the path of helm HelmVersion in the harness's cache
// (${XDG_CACHE_HOME:-$HOME/.cache}/fanout-e2e/helm-<version>/helm), built
// with `go install helm.sh/helm/v4/cmd/helm@<version>` when missing, with
// progress on progress (nil means os.Stderr), as cachedBuild does.
func Helm(ctx context.Context, progress io.Writer) (string, error) {
	if progress == nil {
		progress = os.Stderr
	}
	dir, err := CacheDir("helm-" + HelmVersion)
	if err != nil {
		return "", err
	}
	return cachedBuild(ctx, dir, "helm", progress, "another process is building helm; waiting for it", func(out string) error {
		fmt.Fprintf(progress, "harness: building helm %s into %s with go install\n", HelmVersion, dir)
		// Run outside any module: go install pkg@version ignores the
		// current one anyway, and a temporary directory has none.
		tmp := filepath.Dir(out)
		return runWithProgressEnv(ctx, tmp, []string{"install", "helm.sh/helm/v4/cmd/helm@" + HelmVersion}, []string{"GOBIN=" + tmp}, progress, "building helm "+HelmVersion)
	})
}

// HelmCommand is helm with args, its state (repositories, cache, plugins)
// kept under home rather than the user's: a test's helm reads and writes
// nothing else.
func HelmCommand(ctx context.Context, helm, home string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, helm, args...)
	cmd.Env = []string{"HOME=" + home, "PATH=" + os.Getenv("PATH")}
	return cmd
}
