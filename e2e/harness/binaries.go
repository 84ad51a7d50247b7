package harness

import (
	"bufio"
	"context"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// e2eModule is the module path of the e2e module, whose go.mod pins the
// Kubernetes version the harness builds.
const e2eModule = "github.com/fanout-dev/fanout/e2e"

// kubeCommands are the Kubernetes commands the harness runs, by binary name.
// kubelet and kube-proxy run the real node (StartNode).
var kubeCommands = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kubelet", "kube-proxy"}

// staticCommands go into the real node's container images, which have no C
// library: they must be static. Binaries builds every command with cgo off,
// as upstream builds its release binaries, so one build serves the host and
// the images; a cache filled by an older harness (with cgo) gets static
// builds of these in its static/ subdirectory.
var staticCommands = []string{"kube-controller-manager", "kube-scheduler", "kube-apiserver"}

// Bins are the paths of the Kubernetes binaries at Version.
type Bins struct {
	Version               string
	Dir                   string
	KubeAPIServer         string
	KubeControllerManager string
	KubeScheduler         string
	Kubectl               string
	Kubelet               string
	KubeProxy             string
}

// ModuleDir returns the directory of the e2e module, found by walking up
// from the working directory (go test runs each package in its own
// directory).
func ModuleDir() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && modulePath(data) == e2eModule {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of module %s above the working directory; run the tests from inside the e2e module", e2eModule)
		}
		dir = parent
	}
}

func modulePath(gomod []byte) string {
	sc := bufio.NewScanner(strings.NewReader(string(gomod)))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`)
		}
	}
	return ""
}

// KubeVersion returns the version of k8s.io/kubernetes that the e2e module
// requires, as the go command resolves it.
func KubeVersion(ctx context.Context) (string, error) {
	dir, err := ModuleDir()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Version}}", "k8s.io/kubernetes")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		return "", fmt.Errorf("asking the go command for the k8s.io/kubernetes version in %s: %w\n%s", dir, err, stderr)
	}
	v := strings.TrimSpace(string(out))
	if v == "" {
		return "", fmt.Errorf("the e2e module in %s does not require k8s.io/kubernetes", dir)
	}
	return v, nil
}

// CacheDir returns ${XDG_CACHE_HOME:-$HOME/.cache}/fanout-e2e/<version>.
func CacheDir(version string) (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("finding the user cache directory (set XDG_CACHE_HOME or HOME): %w", err)
	}
	return filepath.Join(base, "fanout-e2e", version), nil
}

// Binaries makes sure kube-apiserver, kube-controller-manager,
// kube-scheduler, kubectl, kubelet and kube-proxy of the e2e module's
// Kubernetes version exist in the cache and returns their paths. Missing
// ones are built with go build (CGO_ENABLED=0) from the e2e module, which
// takes about 13 minutes cold on two cores;
// progress goes to progress (nil means os.Stderr) so a long silent wait is
// never mistaken for a hang. Builds land in a temporary directory and are
// renamed into place, so an interrupted build never leaves half a binary, and
// a lock file keeps concurrent test binaries from building twice.
func Binaries(ctx context.Context, progress io.Writer) (*Bins, error) {
	if progress == nil {
		progress = os.Stderr
	}
	version, err := KubeVersion(ctx)
	if err != nil {
		return nil, err
	}
	dir, err := CacheDir(version)
	if err != nil {
		return nil, err
	}
	b := binsIn(version, dir)
	err = cachedBuilds(ctx, dir, kubeCommands, progress, "another process is building the Kubernetes binaries; waiting for it", func(todo []string) error {
		return buildKube(ctx, dir, todo, []string{"CGO_ENABLED=0"}, progress)
	})
	if err != nil {
		return nil, err
	}
	return b, nil
}

// binsIn names the binaries of version in the cache directory dir.
func binsIn(version, dir string) *Bins {
	return &Bins{
		Version:               version,
		Dir:                   dir,
		KubeAPIServer:         filepath.Join(dir, "kube-apiserver"),
		KubeControllerManager: filepath.Join(dir, "kube-controller-manager"),
		KubeScheduler:         filepath.Join(dir, "kube-scheduler"),
		Kubectl:               filepath.Join(dir, "kubectl"),
		Kubelet:               filepath.Join(dir, "kubelet"),
		KubeProxy:             filepath.Join(dir, "kube-proxy"),
	}
}

// cachedBuilds makes sure the executables names exist in dir, calling
// build with the missing ones under dir's build lock (rechecked once the
// lock is held: whoever held it may have built them meanwhile); waitMsg
// is printed while another process holds the lock.
func cachedBuilds(ctx context.Context, dir string, names []string, progress io.Writer, waitMsg string, build func(todo []string) error) error {
	if len(missing(dir, names)) == 0 {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	unlock, err := lockFile(ctx, filepath.Join(dir, ".build.lock"), progress, waitMsg)
	if err != nil {
		return err
	}
	defer unlock()
	todo := missing(dir, names)
	if len(todo) == 0 {
		return nil
	}
	return build(todo)
}

func missing(dir string, names []string) []string {
	var out []string
	for _, name := range names {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
			out = append(out, name)
		}
	}
	return out
}

// StaticBinaries returns the directory holding static kube-controller-manager
// and kube-scheduler binaries (for images): b.Dir when Binaries built them
// (with CGO_ENABLED=0), else b.Dir/static, where missing ones are built the
// way Binaries builds the others.
func (b *Bins) StaticBinaries(ctx context.Context, progress io.Writer) (string, error) {
	if progress == nil {
		progress = os.Stderr
	}
	static := true
	for _, name := range staticCommands {
		if ok, err := isStatic(filepath.Join(b.Dir, name)); err != nil || !ok {
			static = false
		}
	}
	if static {
		return b.Dir, nil
	}
	dir := filepath.Join(b.Dir, "static")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if len(missing(dir, staticCommands)) == 0 {
		return dir, nil
	}
	unlock, err := lockFile(ctx, filepath.Join(b.Dir, ".build.lock"), progress, "another process is building the Kubernetes binaries; waiting for it")
	if err != nil {
		return "", err
	}
	defer unlock()
	todo := missing(dir, staticCommands)
	if len(todo) == 0 {
		return dir, nil
	}
	return dir, buildKube(ctx, dir, todo, []string{"CGO_ENABLED=0"}, progress)
}

// isStatic reports whether the ELF executable at path has no program
// interpreter, i.e. needs no C library.
func isStatic(path string) (bool, error) {
	f, err := elf.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false, nil
		}
	}
	return true, nil
}

func buildKube(ctx context.Context, dir string, names, env []string, progress io.Writer) error {
	modDir, err := ModuleDir()
	if err != nil {
		return err
	}
	return buildKubeIn(ctx, modDir, dir, names, env, progress)
}

// buildKubeIn builds the k8s.io/kubernetes commands names from the module
// in modDir into dir, through a temporary directory so an interrupted
// build never leaves half a binary.
func buildKubeIn(ctx context.Context, modDir, dir string, names, env []string, progress io.Writer) error {
	tmp, err := os.MkdirTemp(dir, ".build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	args := []string{"build", "-o", tmp + string(filepath.Separator)}
	for _, n := range names {
		args = append(args, "k8s.io/kubernetes/cmd/"+n)
	}
	what := strings.Join(names, ", ")
	fmt.Fprintf(progress, "harness: building %s into %s (about 13 minutes on 2 cores when the Go build cache is cold)\n", what, dir)
	if err := runWithProgressEnv(ctx, modDir, args, env, progress, "building "+what); err != nil {
		return err
	}
	for _, n := range names {
		if err := os.Rename(filepath.Join(tmp, n), filepath.Join(dir, n)); err != nil {
			return fmt.Errorf("moving the freshly built %s into the cache: %w", n, err)
		}
	}
	return nil
}

// runWithProgress runs the go command in dir, printing the elapsed time every
// 30 seconds, and returns its output in the error when it fails.
func runWithProgress(ctx context.Context, dir string, args []string, progress io.Writer, what string) error {
	return runWithProgressEnv(ctx, dir, args, nil, progress, what)
}

// runWithProgressEnv is runWithProgress with env added to the environment.
func runWithProgressEnv(ctx context.Context, dir string, args, env []string, progress io.Writer, what string) error {
	return runCmdWithProgress(ctx, dir, "go", args, env, progress, what)
}

// runCmdWithProgress is runWithProgressEnv for any command.
func runCmdWithProgress(ctx context.Context, dir, name string, args, env []string, progress io.Writer, what string) error {
	start := time.Now()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	var out lockedBuffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: starting go: %w", what, err)
	}
	waitErr := make(chan error, 1)
	go func() { waitErr <- cmd.Wait() }()
	tick := time.NewTicker(30 * time.Second)
	defer tick.Stop()
	for {
		select {
		case err := <-waitErr:
			if err != nil {
				return fmt.Errorf("%s failed after %s: %s %s: %w\n%s", what, time.Since(start).Round(time.Second), name, strings.Join(args, " "), err, out.String())
			}
			fmt.Fprintf(progress, "harness: %s done in %s\n", what, time.Since(start).Round(time.Second))
			return nil
		case <-tick.C:
			fmt.Fprintf(progress, "harness: still %s (%s elapsed)\n", what, time.Since(start).Round(time.Second))
		}
	}
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// lockFile takes an exclusive flock on path, telling progress once if it has
// to wait, and returns the function that releases it.
func lockFile(ctx context.Context, path string, progress io.Writer, waitMsg string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening lock file: %w", err)
	}
	told := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if err != syscall.EWOULDBLOCK {
			f.Close()
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		if !told && progress != nil {
			fmt.Fprintf(progress, "harness: %s (lock %s)\n", waitMsg, path)
			told = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// cachedBuild returns dir/name, building it first when it is missing
// (cachedBuilds): build writes the file to out, in a temporary directory
// of dir, and it is renamed into place, so an interrupted build never
// leaves half a file.
func cachedBuild(ctx context.Context, dir, name string, progress io.Writer, waitMsg string, build func(out string) error) (string, error) {
	path := filepath.Join(dir, name)
	err := cachedBuilds(ctx, dir, []string{name}, progress, waitMsg, func([]string) error {
		tmp, err := os.MkdirTemp(dir, ".build-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		out := filepath.Join(tmp, name)
		if err := build(out); err != nil {
			return err
		}
		if err := os.Rename(out, path); err != nil {
			return fmt.Errorf("moving the freshly built %s into the cache: %w", name, err)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	return path, nil
}

// fanoutBuild makes one build of cmd/fanout per test binary: it is quick, and
// rebuilding on every run means a test never runs a stale sidecar.
var fanoutBuild struct {
	once sync.Once
	path string
	err  error
}

// FanoutBinary builds cmd/fanout from the repository root (the parent of the
// e2e module), once per process, and returns its path. The binary lives in a
// directory of its own that is removed when Main ends, because control planes
// (and their directories) may come and go while sidecars still need it.
func FanoutBinary(ctx context.Context, progress io.Writer) (string, error) {
	fanoutBuild.once.Do(func() {
		if progress == nil {
			progress = os.Stderr
		}
		modDir, err := ModuleDir()
		if err != nil {
			fanoutBuild.err = err
			return
		}
		root := filepath.Dir(modDir)
		if _, err := os.Stat(filepath.Join(root, "cmd", "fanout")); err != nil {
			fanoutBuild.err = fmt.Errorf("no cmd/fanout in %s: the e2e module must sit in the fanout repository: %w", root, err)
			return
		}
		dir, err := os.MkdirTemp("", "fanout-e2e-"+runID()+"-")
		if err != nil {
			fanoutBuild.err = err
			return
		}
		register(func() { os.RemoveAll(dir) })
		out := filepath.Join(dir, "fanout")
		fanoutBuild.err = runWithProgress(ctx, root, []string{"build", "-o", out, "./cmd/fanout"}, progress, "building fanout")
		fanoutBuild.path = out
	})
	return fanoutBuild.path, fanoutBuild.err
}
