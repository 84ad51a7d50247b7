// Package memlimit sets the Go runtime's soft memory limit from the
// container's cgroup memory limit, so that the garbage collector works to
// the memory the sidecar really has instead of letting the heap grow to
// twice the live data (GOGC=100) and the kernel OOM-kill the pod.
//
// Without a limit, a process with H bytes of live heap may use about 2H
// before the next collection; with one, the collector runs more often as
// the limit nears. fanout's memory grows with the watches it carries, so a
// pod limit sized for its steady state is only safe when the GC knows it.
package memlimit

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path"
	"runtime/debug"
	"strconv"
	"strings"
)

// DefaultRatio is the share of the cgroup limit given to the Go runtime.
// The rest is for what the runtime does not count but the cgroup does:
// the executable's pages and other file-backed memory, and C allocations.
const DefaultRatio = 0.9

// Source says where a Limit came from.
type Source string

// The sources of a Limit.
const (
	// SourceGOMEMLIMIT: the GOMEMLIMIT environment variable, which the Go
	// runtime applied itself before main; Apply leaves it alone.
	SourceGOMEMLIMIT Source = "GOMEMLIMIT"
	// SourceFlag: an explicit value (the --memory-limit flag).
	SourceFlag Source = "flag"
	// SourceCgroup: DefaultRatio of the cgroup's memory limit.
	SourceCgroup Source = "cgroup"
	// SourceNone: no limit (none set, no cgroup limit, or "off").
	SourceNone Source = "none"
)

// Limit is the outcome of Apply.
type Limit struct {
	// Bytes is the Go memory limit in effect; math.MaxInt64 means none.
	Bytes int64
	// Cgroup is the cgroup's memory limit, 0 when there is none or it
	// was not read.
	Cgroup int64
	Source Source
}

// Apply sets the Go memory limit as spec says and returns what it set:
//
//   - "auto" (or ""): DefaultRatio of the cgroup memory limit (v2
//     memory.max, or v1 memory.limit_in_bytes), none without one;
//   - "off": no limit;
//   - a quantity such as "96Mi" or "100000000": that many bytes.
//
// A GOMEMLIMIT environment variable wins over "auto": the runtime has
// applied it already, and an operator who set it meant it.
func Apply(spec string) (Limit, error) {
	return apply(spec, os.Getenv("GOMEMLIMIT"), os.DirFS("/"), debug.SetMemoryLimit)
}

func apply(spec, env string, root fs.FS, set func(int64) int64) (Limit, error) {
	spec = strings.TrimSpace(spec)
	switch {
	case spec == "off":
		set(math.MaxInt64)
		return Limit{Bytes: math.MaxInt64, Source: SourceNone}, nil
	case spec != "" && spec != "auto":
		b, err := ParseSize(spec)
		if err != nil || b <= 0 {
			return Limit{}, fmt.Errorf("--memory-limit %q: want auto, off, or a positive size such as 96Mi", spec)
		}
		set(b)
		return Limit{Bytes: b, Source: SourceFlag}, nil
	case env != "":
		// -1 reads the limit without changing it.
		return Limit{Bytes: set(-1), Source: SourceGOMEMLIMIT}, nil
	}
	cg, err := CgroupLimit(root)
	if err != nil {
		return Limit{Bytes: set(-1), Source: SourceNone}, err
	}
	if cg <= 0 {
		return Limit{Bytes: set(-1), Source: SourceNone}, nil
	}
	b := int64(float64(cg) * DefaultRatio)
	set(b)
	return Limit{Bytes: b, Cgroup: cg, Source: SourceCgroup}, nil
}

// CgroupLimit returns the memory limit of this process's cgroup, read
// from root (the file system root, os.DirFS("/") outside tests): the
// smallest limit on the way from its cgroup up to the mount's root, as
// the kernel enforces every one of them. 0 means none.
func CgroupLimit(root fs.FS) (int64, error) {
	cgroups, err := fs.ReadFile(root, "proc/self/cgroup")
	if err != nil {
		return 0, fmt.Errorf("reading /proc/self/cgroup: %w", err)
	}
	mounts, err := fs.ReadFile(root, "proc/self/mountinfo")
	if err != nil {
		return 0, fmt.Errorf("reading /proc/self/mountinfo: %w", err)
	}
	v2path, v1path, hasV1 := parseProcCgroup(string(cgroups))
	for _, m := range parseMountinfo(string(mounts)) {
		switch {
		case hasV1 && m.fsType == "cgroup" && m.memory:
			return walkLimit(root, m, v1path, "memory.limit_in_bytes")
		case !hasV1 && m.fsType == "cgroup2":
			return walkLimit(root, m, v2path, "memory.max")
		}
	}
	return 0, nil
}

// parseProcCgroup returns the v2 path ("0::/path") and the v1 memory
// controller's path ("N:...memory...:/path") of /proc/self/cgroup.
func parseProcCgroup(s string) (v2, v1 string, hasV1 bool) {
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), ":", 3)
		if len(f) != 3 {
			continue
		}
		if f[0] == "0" && f[1] == "" {
			v2 = f[2]
		}
		for _, c := range strings.Split(f[1], ",") {
			if c == "memory" {
				v1, hasV1 = f[2], true
			}
		}
	}
	return v2, v1, hasV1
}

type mount struct {
	root, point, fsType string
	memory              bool // v1 with the memory controller
}

// parseMountinfo reads proc(5) mountinfo lines: "id parent maj:min root
// mountpoint options [optional...] - fstype source superoptions".
func parseMountinfo(s string) []mount {
	var out []mount
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(g) < 3 {
			continue
		}
		m := mount{root: f[3], point: f[4], fsType: g[0]}
		for _, o := range strings.Split(g[2], ",") {
			if o == "memory" {
				m.memory = true
			}
		}
		out = append(out, m)
	}
	return out
}

// walkLimit reads file in the cgroup at cgPath under mount m and in each
// parent up to the mount's root, and returns the smallest limit.
func walkLimit(root fs.FS, m mount, cgPath, file string) (int64, error) {
	// Inside a cgroup namespace the mount's root is the process's own
	// cgroup ("/"); outside it the mount's root is a prefix of cgPath.
	rel := cgPath
	if m.root != "/" {
		rel = strings.TrimPrefix(cgPath, m.root)
	}
	dir := path.Join(strings.TrimPrefix(m.point, "/"), rel)
	top := strings.TrimPrefix(m.point, "/")
	var limit int64
	found := false
	for {
		b, err := fs.ReadFile(root, path.Join(dir, file))
		switch {
		case err == nil:
			found = true
			v, err := parseLimit(string(b))
			if err != nil {
				return 0, fmt.Errorf("reading /%s: %w", path.Join(dir, file), err)
			}
			if v > 0 && (limit == 0 || v < limit) {
				limit = v
			}
		case !errors.Is(err, fs.ErrNotExist):
			return 0, err
		}
		if dir == top || dir == "." || dir == "/" || dir == "" {
			break
		}
		dir = path.Dir(dir)
	}
	if !found {
		return 0, fmt.Errorf("no %s under /%s for cgroup %s", file, top, cgPath)
	}
	return limit, nil
}

// unlimitedV1 is the smallest value cgroup v1 reports for "no limit"
// (PAGE_COUNTER_MAX pages, rounded): anything at or above means none.
const unlimitedV1 = 1 << 62

// parseLimit reads memory.max ("max" or bytes) or memory.limit_in_bytes;
// 0 is no limit.
func parseLimit(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "max" {
		return 0, nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("want a byte count or max, got %q", s)
	}
	if v >= unlimitedV1 {
		return 0, nil
	}
	return int64(v), nil
}
