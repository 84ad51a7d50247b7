package harness

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// serverCommands are what ReleaseBinaries builds: the control plane of
// another release (an upgrade keeps its kube-controller-manager and
// kube-scheduler until the apiservers are done; etcd is the harness's own).
var serverCommands = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"}

// ReleaseBinaries makes sure kube-apiserver, kube-controller-manager and
// kube-scheduler of Kubernetes version (e.g. v1.36.3, the release before
// the e2e module's) exist in CacheDir(version) and returns their paths;
// Kubectl, Kubelet and KubeProxy stay empty. The k8s.io/kubernetes module
// cannot be built where the go command unpacks it (its go.mod replaces the
// k8s.io/* modules with staging/ directories, which module zips leave
// out), so missing binaries are built, with cgo off, from a module of
// their own in CacheDir(version)/module that requires k8s.io/kubernetes at
// version, replaces each staging module with its published v0.X.Y and
// takes the go and godebug lines of k8s.io/kubernetes's go.mod. Progress
// goes to progress every 30 s, as for Binaries.
func ReleaseBinaries(ctx context.Context, version string, progress io.Writer) (*Bins, error) {
	if progress == nil {
		progress = os.Stderr
	}
	staging, err := stagingVersion(version)
	if err != nil {
		return nil, err
	}
	dir, err := CacheDir(version)
	if err != nil {
		return nil, err
	}
	b := binsIn(version, dir)
	b.Kubectl, b.Kubelet, b.KubeProxy = "", "", ""
	err = cachedBuilds(ctx, dir, serverCommands, progress, "another process is building the Kubernetes binaries; waiting for it", func(todo []string) error {
		modDir := filepath.Join(dir, "module")
		if err := writeReleaseModule(ctx, modDir, version, staging, todo); err != nil {
			return err
		}
		fmt.Fprintf(progress, "harness: resolving the modules of k8s.io/kubernetes %s in %s\n", version, modDir)
		if err := runWithProgress(ctx, modDir, []string{"mod", "tidy"}, progress, "resolving k8s.io/kubernetes "+version); err != nil {
			return err
		}
		return buildKubeIn(ctx, modDir, dir, todo, []string{"CGO_ENABLED=0"}, progress)
	})
	if err != nil {
		return nil, err
	}
	return b, nil
}

// stagingVersion is the version of the k8s.io/* staging modules published
// with Kubernetes version: v1.36.3 → v0.36.3.
func stagingVersion(version string) (string, error) {
	rest, ok := strings.CutPrefix(version, "v1.")
	if !ok || rest == "" {
		return "", fmt.Errorf("Kubernetes version %q: want v1.<minor>.<patch>", version)
	}
	return "v0." + rest, nil
}

// writeReleaseModule writes go.mod and a file importing the commands to
// build into modDir (see ReleaseBinaries).
func writeReleaseModule(ctx context.Context, modDir, version, staging string, commands []string) error {
	if err := os.MkdirAll(modDir, 0o755); err != nil {
		return err
	}
	// Outside any module, so no go.mod or go.work of the caller applies.
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", "k8s.io/kubernetes@"+version)
	cmd.Dir = modDir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		return fmt.Errorf("go mod download k8s.io/kubernetes@%s: %w\n%s%s", version, err, out, stderr)
	}
	var dl struct{ GoMod, Error string }
	if err := json.Unmarshal(out, &dl); err != nil {
		return fmt.Errorf("go mod download k8s.io/kubernetes@%s: %w", version, err)
	}
	if dl.Error != "" {
		return fmt.Errorf("go mod download k8s.io/kubernetes@%s: %s", version, dl.Error)
	}
	upstream, err := os.ReadFile(dl.GoMod)
	if err != nil {
		return err
	}
	gomod, err := releaseGoMod(upstream, version, staging)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(modDir, "go.mod"), gomod, 0o644); err != nil {
		return err
	}
	var imports strings.Builder
	imports.WriteString("//go:build tools\n\n// Package kubebuild only names the commands the harness builds.\npackage kubebuild\n\nimport (\n")
	for _, c := range commands {
		fmt.Fprintf(&imports, "\t_ %q\n", "k8s.io/kubernetes/cmd/"+c)
	}
	imports.WriteString(")\n")
	return os.WriteFile(filepath.Join(modDir, "tools.go"), []byte(imports.String()), 0o644)
}

// releaseGoMod derives the build module's go.mod from k8s.io/kubernetes's
// at version: its go and godebug lines, a requirement of it, and each of
// its `k8s.io/x => ./staging/src/k8s.io/x` replacements pointed at the
// published module k8s.io/x at staging.
func releaseGoMod(upstream []byte, version, staging string) ([]byte, error) {
	var head, replace []string
	sc := bufio.NewScanner(strings.NewReader(string(upstream)))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		f := strings.Fields(line)
		switch {
		case len(f) == 2 && (f[0] == "go" || f[0] == "godebug"):
			head = append(head, line)
		case len(f) == 3 && f[1] == "=>" && strings.HasPrefix(f[2], "./staging/"):
			replace = append(replace, fmt.Sprintf("\t%s => %s %s", f[0], f[0], staging))
		}
	}
	if len(replace) == 0 {
		return nil, fmt.Errorf("go.mod of k8s.io/kubernetes %s replaces no module with a staging directory: cannot build it this way", version)
	}
	var b strings.Builder
	b.WriteString("// Written by the fanout e2e harness (ReleaseBinaries).\nmodule fanout-e2e/kubebuild\n\n")
	for _, l := range head {
		b.WriteString(l + "\n")
	}
	fmt.Fprintf(&b, "\nrequire k8s.io/kubernetes %s\n\nreplace (\n%s\n)\n", version, strings.Join(replace, "\n"))
	return []byte(b.String()), nil
}
