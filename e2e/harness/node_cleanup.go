package harness

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cgroupHierarchies returns the mounted cgroup hierarchies: on these
// machines the v1 controllers, the named systemd one and the (empty) v2
// unified one; on a pure v2 machine just /sys/fs/cgroup.
func cgroupHierarchies() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// "36 25 0:31 / /sys/fs/cgroup/memory rw,... - cgroup cgroup rw,memory"
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, fl := range fields {
			if fl == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+1 >= len(fields) || len(fields) < 5 {
			continue
		}
		if t := fields[sep+1]; t == "cgroup" || t == "cgroup2" {
			out = append(out, unescapeMount(fields[4]))
		}
	}
	return out, sc.Err()
}

// setUpCgroups makes the kubelet's cgroup root in every hierarchy. It is
// named like the run's directories (fanout-e2e-<pid>-<n>), so SweepStale can
// tell a dead run's.
func (n *Node) setUpCgroups(seq int) error {
	hs, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	root := fmt.Sprintf("/fanout-e2e-%s-%d", runID(), seq)
	n.CgroupRoot = root
	for _, h := range hs {
		dir := filepath.Join(h, root)
		if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
			return err
		}
		// A new v1 cpuset has no CPUs and no memory nodes, and nothing can
		// join it until it has: inherit the parent's.
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if v, err := os.ReadFile(filepath.Join(h, f)); err == nil {
				if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
					return fmt.Errorf("copying %s to %s: %w", f, dir, err)
				}
			}
		}
	}
	return nil
}

// removeCgroupTree kills every process in root (a cgroup path such as
// /fanout-e2e-123-1) in any hierarchy and removes the cgroups, deepest
// first.
func removeCgroupTree(root string) error {
	hs, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	var dirs []string
	for _, h := range hs {
		_ = filepath.WalkDir(filepath.Join(h, root), func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
	}
	// Deepest first: a cgroup with children cannot be removed.
	sort.Slice(dirs, func(i, j int) bool { return strings.Count(dirs[i], "/") > strings.Count(dirs[j], "/") })
	for _, d := range dirs {
		killCgroupProcs(d)
	}
	var errs []error
	for _, d := range dirs {
		var err error
		// Killed processes leave their cgroup a moment after the signal.
		for range 50 {
			if err = syscall.Rmdir(d); err == nil || errors.Is(err, syscall.ENOENT) {
				err = nil
				break
			}
			killCgroupProcs(d)
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("removing cgroup %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

func killCgroupProcs(dir string) {
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return
	}
	for _, f := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 1 && pid != os.Getpid() {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// killByCmdline SIGKILLs every process whose command line contains s. The
// containerd shims outlive containerd by design (they keep containers
// running across its restarts); they name the containerd socket of their
// node on their command line, which is unique to the run.
func killByCmdline(s string) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if strings.Contains(strings.ReplaceAll(string(data), "\x00", " "), s) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// unmountUnder detaches every mount below dir (pod volumes the kubelet
// mounted, container root filesystems, sandbox files), deepest first.
func unmountUnder(dir string) error {
	mounts, err := mountsUnder(func(mp string) bool { return strings.HasPrefix(mp, dir+"/") })
	if err != nil {
		return err
	}
	var errs []error
	for _, mp := range mounts {
		if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", mp, err))
		}
	}
	return errors.Join(errs...)
}

// mountsUnder returns the mount points that match, deepest first.
func mountsUnder(match func(string) bool) ([]string, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		if mp := unescapeMount(f[4]); match(mp) {
			out = append(out, mp)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out, nil
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// sweepNodes removes what the nodes of dead runs left behind, before their
// directories go: containerd shims and containers (processes naming a dead
// run's directory, processes in its cgroups), its mounts and its cgroups.
func sweepNodes() error {
	var errs []error
	tmp := os.TempDir()
	deadPrefix := func(name string) bool {
		m := staleDir.FindStringSubmatch(name)
		return m != nil && !alive(m[1])
	}
	if entries, err := os.ReadDir(tmp); err == nil {
		for _, e := range entries {
			if e.IsDir() && deadPrefix(e.Name()) {
				killByCmdline(filepath.Join(tmp, e.Name()) + "/")
			}
		}
	}
	if hs, err := cgroupHierarchies(); err == nil {
		roots := map[string]bool{}
		for _, h := range hs {
			entries, _ := os.ReadDir(h)
			for _, e := range entries {
				if e.IsDir() && deadPrefix(e.Name()) {
					roots["/"+e.Name()] = true
				}
			}
		}
		for r := range roots {
			if err := removeCgroupTree(r); err != nil {
				errs = append(errs, err)
			}
		}
	}
	mounts, err := mountsUnder(func(mp string) bool {
		rel, ok := strings.CutPrefix(mp, tmp+"/")
		if !ok {
			return false
		}
		first, _, _ := strings.Cut(rel, "/")
		return deadPrefix(first)
	})
	if err == nil {
		for _, mp := range mounts {
			if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
				errs = append(errs, fmt.Errorf("unmounting %s: %w", mp, err))
			}
		}
	}
	return errors.Join(errs...)
}
