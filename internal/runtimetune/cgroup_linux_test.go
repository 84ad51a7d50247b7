package runtimetune

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// cgroupLayoutEnv names the directory of a cgroup layout for
// TestCgroupLayoutChild.
const cgroupLayoutEnv = "FANOUT_TEST_CGROUP_LAYOUT"

// cgroupLayout is what a process sees of its cgroups: the lines of
// /proc/self/mountinfo and /proc/self/cgroup, and the files under the
// mount points. {{ROOT}} stands for the layout's directory.
type cgroupLayout struct {
	mountinfo, cgroup []string
	files             map[string]string
}

// write puts the layout under dir.
func (l cgroupLayout) write(t *testing.T, dir string) {
	t.Helper()
	fill := func(s string) string { return strings.ReplaceAll(s, "{{ROOT}}", dir) }
	files := map[string]string{
		"mountinfo": fill(strings.Join(l.mountinfo, "\n") + "\n"),
		"cgroup":    strings.Join(l.cgroup, "\n") + "\n",
	}
	for name, content := range l.files {
		files[name] = content
	}
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// The mount lines of a cgroup v1 hierarchy with the memory controller,
// of a v1 hierarchy without it, and of the cgroup v2 hierarchy, mounted
// under {{ROOT}}/sys/fs/cgroup.
const (
	v1MemoryMount = "34 30 0:31 %s {{ROOT}}/sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime - cgroup cgroup rw,memory"
	v1CPUMount    = "33 30 0:30 / {{ROOT}}/sys/fs/cgroup/cpu rw,nosuid,nodev,noexec,relatime - cgroup cgroup rw,cpu"
	v2Mount       = "40 30 0:37 %s {{ROOT}}/sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw"
	// v1NoLimit is what cgroup v1 reports for no limit: the largest page
	// count the kernel keeps, in bytes.
	v1NoLimit = "9223372036854771712"
	pod       = "/kubepods/burstable/pod1/c1"
)

// TestMemoryLimitFromCgroupLayouts runs Apply with --memory-limit auto
// in a process that sees each layout's cgroup files, as fanout does at
// start, and checks the Go memory limit it set: 90% of the container's
// limit, none without one. The hybrid layout (cgroup v1 controllers, the
// memory controller among them, beside an empty cgroup v2 hierarchy) is
// the benchmark machine's and the e2e node's: there the limit is in v1's
// memory.limit_in_bytes, and the v2 hierarchy has no memory.max.
//
// Each layout is seen through bind mounts over /proc/self/mountinfo and
// /proc/self/cgroup in a mount namespace of its own (this test binary run
// again), so it needs root.
func TestMemoryLimitFromCgroupLayouts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a mount namespace")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		layout cgroupLayout
		limit  string // the line the child prints
		logged string // what Apply logged
	}{
		{"hybrid", cgroupLayout{
			mountinfo: []string{v1CPUMount, fmt.Sprintf(v1MemoryMount, "/"), fmt.Sprintf(v2Mount, "/")},
			cgroup:    []string{"5:cpu:" + pod, "4:memory:" + pod, "0::" + pod},
			files: map[string]string{
				"sys/fs/cgroup/memory" + pod + "/memory.limit_in_bytes": "268435456\n",
				"sys/fs/cgroup/unified" + pod + "/cgroup.procs":         "1\n",
				"sys/fs/cgroup/unified" + pod + "/cgroup.controllers":   "\n",
				"sys/fs/cgroup/memory/kubepods/memory.limit_in_bytes":   v1NoLimit + "\n",
			},
		}, "limit=241591910", "bytes=241591910 source=cgroup cgroupBytes=268435456 ratio=0.9"},
		{"hybrid, container's own view of its cgroup", cgroupLayout{
			mountinfo: []string{fmt.Sprintf(v1MemoryMount, pod), fmt.Sprintf(v2Mount, pod)},
			cgroup:    []string{"4:memory:" + pod, "0::" + pod},
			files:     map[string]string{"sys/fs/cgroup/memory/memory.limit_in_bytes": "134217728\n"},
		}, "limit=120795955", "bytes=120795955 source=cgroup cgroupBytes=134217728 ratio=0.9"},
		{"hybrid without a limit", cgroupLayout{
			mountinfo: []string{fmt.Sprintf(v1MemoryMount, "/"), fmt.Sprintf(v2Mount, "/")},
			cgroup:    []string{"4:memory:" + pod, "0::" + pod},
			files: map[string]string{
				"sys/fs/cgroup/memory" + pod + "/memory.limit_in_bytes": v1NoLimit + "\n",
				"sys/fs/cgroup/unified" + pod + "/cgroup.procs":         "1\n",
			},
		}, "limit=9223372036854775807", `msg="Go memory limit: none" source=none`},
		{"v1", cgroupLayout{
			mountinfo: []string{fmt.Sprintf(v1MemoryMount, "/")},
			cgroup:    []string{"4:memory:" + pod},
			files:     map[string]string{"sys/fs/cgroup/memory" + pod + "/memory.limit_in_bytes": "268435456\n"},
		}, "limit=241591910", "bytes=241591910 source=cgroup cgroupBytes=268435456 ratio=0.9"},
		{"v2", cgroupLayout{
			mountinfo: []string{fmt.Sprintf(v2Mount, "/")},
			cgroup:    []string{"0::" + pod},
			files: map[string]string{
				"sys/fs/cgroup/unified" + pod + "/memory.max":         "100000000\n",
				"sys/fs/cgroup/unified/kubepods/burstable/memory.max": "max\n",
			},
		}, "limit=90000000", "bytes=90000000 source=cgroup cgroupBytes=100000000 ratio=0.9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.layout.write(t, dir)
			cmd := exec.Command(exe, "-test.run=^TestCgroupLayoutChild$", "-test.v")
			cmd.Env = append(withoutEnv(os.Environ(), "GOMEMLIMIT"), cgroupLayoutEnv+"="+dir)
			cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
			out, err := cmd.CombinedOutput()
			if errors.Is(err, syscall.EPERM) {
				t.Skipf("no mount namespace: %v", err)
			}
			if err != nil {
				t.Fatalf("child: %v\n%s", err, out)
			}
			if !strings.Contains(string(out), "\n"+tc.limit+"\n") || !strings.Contains(string(out), tc.logged) {
				t.Errorf("child printed\n%s\nwant the line %q and a log line with %q", out, tc.limit, tc.logged)
			}
		})
	}
}

// TestCgroupLayoutChild is TestMemoryLimitFromCgroupLayouts' child: in
// its own mount namespace, it puts the layout's files over the process's
// /proc/self/mountinfo and /proc/self/cgroup, runs Apply, and prints the
// Go memory limit in effect and what Apply logged.
func TestCgroupLayoutChild(t *testing.T) {
	dir := os.Getenv(cgroupLayoutEnv)
	if dir == "" {
		t.Skip("run by TestMemoryLimitFromCgroupLayouts")
	}
	for _, f := range []string{"mountinfo", "cgroup"} {
		if err := unix.Mount(filepath.Join(dir, f), "/proc/self/"+f, "", unix.MS_BIND, ""); err != nil {
			t.Fatalf("bind-mounting the layout's %s: %v", f, err)
		}
	}
	var logged bytes.Buffer
	if _, err := Apply(Options{MemoryLimit: "auto", Sysmon: "go"}, slog.New(slog.NewTextHandler(&logged, nil))); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("\nlimit=%d\n%s", debug.SetMemoryLimit(-1), logged.String())
}

// withoutEnv is environ without the variable name.
func withoutEnv(environ []string, name string) []string {
	var out []string
	for _, kv := range environ {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}
