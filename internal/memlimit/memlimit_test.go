package memlimit

import (
	"math"
	"os"
	"strings"
	"testing"
	"testing/fstest"
)

const (
	v2Mount       = "30 22 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
	v2MountHost   = "30 22 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n"
	v1Mounts      = "31 30 0:28 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n34 30 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
	v1MountsInPod = "34 30 0:31 /kubepods/pod1/c1 /sys/fs/cgroup/memory ro - cgroup cgroup rw,memory\n"
)

func TestCgroupLimit(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  int64
	}{
		{"v2 in a cgroup namespace", map[string]string{
			"proc/self/cgroup":          "0::/\n",
			"proc/self/mountinfo":       v2Mount,
			"sys/fs/cgroup/memory.max":  "134217728\n",
			"sys/fs/cgroup/memory.high": "max\n",
		}, 128 << 20},
		{"v2 unlimited", map[string]string{
			"proc/self/cgroup":         "0::/\n",
			"proc/self/mountinfo":      v2Mount,
			"sys/fs/cgroup/memory.max": "max\n",
		}, 0},
		{"v2 without a namespace: the smallest limit on the way up", map[string]string{
			"proc/self/cgroup":                          "0::/kubepods/pod1/c1\n",
			"proc/self/mountinfo":                       v2MountHost,
			"sys/fs/cgroup/kubepods/pod1/c1/memory.max": "1073741824\n",
			"sys/fs/cgroup/kubepods/pod1/memory.max":    "67108864\n",
			"sys/fs/cgroup/kubepods/memory.max":         "max\n",
		}, 64 << 20},
		{"v1", map[string]string{
			"proc/self/cgroup":    "4:memory:/process_api/x\n1:cpu:/\n0::/\n",
			"proc/self/mountinfo": v1Mounts,
			"sys/fs/cgroup/memory/process_api/x/memory.limit_in_bytes": "104857600\n",
			"sys/fs/cgroup/memory/process_api/memory.limit_in_bytes":   "9223372036854771712\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes":               "9223372036854771712\n",
		}, 100 << 20},
		{"v1 unlimited", map[string]string{
			"proc/self/cgroup":                           "4:memory:/\n",
			"proc/self/mountinfo":                        v1Mounts,
			"sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n",
		}, 0},
		{"v1 with the pod's cgroup as the mount root", map[string]string{
			"proc/self/cgroup":                           "4:memory:/kubepods/pod1/c1\n",
			"proc/self/mountinfo":                        v1MountsInPod,
			"sys/fs/cgroup/memory/memory.limit_in_bytes": "50331648\n",
		}, 48 << 20},
		{"no cgroup mount", map[string]string{
			"proc/self/cgroup":    "0::/\n",
			"proc/self/mountinfo": "1 0 8:1 / / rw - ext4 /dev/sda1 rw\n",
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := CgroupLimit(mapFS(tc.files))
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("CgroupLimit = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestApply(t *testing.T) {
	limited := mapFS(map[string]string{
		"proc/self/cgroup":         "0::/\n",
		"proc/self/mountinfo":      v2Mount,
		"sys/fs/cgroup/memory.max": "100000000\n",
	})
	for _, tc := range []struct {
		name, spec, env string
		root            fstest.MapFS
		want            Limit
		wantSet         int64 // 0: SetMemoryLimit only read (-1)
		wantErr         string
	}{
		{name: "auto from the cgroup", spec: "auto", root: limited,
			want: Limit{Bytes: 90000000, Cgroup: 100000000, Source: SourceCgroup}, wantSet: 90000000},
		{name: "empty is auto", root: limited,
			want: Limit{Bytes: 90000000, Cgroup: 100000000, Source: SourceCgroup}, wantSet: 90000000},
		{name: "GOMEMLIMIT wins over auto", spec: "auto", env: "50MiB", root: limited,
			want: Limit{Bytes: 12345, Source: SourceGOMEMLIMIT}},
		{name: "the flag wins over GOMEMLIMIT", spec: "96Mi", env: "50MiB", root: limited,
			want: Limit{Bytes: 96 << 20, Source: SourceFlag}, wantSet: 96 << 20},
		{name: "off", spec: "off", root: limited,
			want: Limit{Bytes: math.MaxInt64, Source: SourceNone}, wantSet: math.MaxInt64},
		{name: "no cgroup limit", spec: "auto", root: mapFS(map[string]string{
			"proc/self/cgroup": "0::/\n", "proc/self/mountinfo": v2Mount, "sys/fs/cgroup/memory.max": "max\n"}),
			want: Limit{Bytes: 12345, Source: SourceNone}},
		{name: "garbage", spec: "lots", root: limited, wantErr: "want auto, off, or a positive size"},
		{name: "negative", spec: "-1Mi", root: limited, wantErr: "want auto, off, or a positive size"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var set int64
			got, err := apply(tc.spec, tc.env, tc.root, func(b int64) int64 {
				if b < 0 {
					return 12345 // what the runtime has
				}
				set = b
				return 0
			})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("Limit = %+v, want %+v", got, tc.want)
			}
			if set != tc.wantSet {
				t.Errorf("SetMemoryLimit(%d), want %d", set, tc.wantSet)
			}
		})
	}
}

// TestCgroupLimitOfThisMachine reads the real files, so that the parser
// meets at least one real mountinfo; it checks only that it does not fail.
func TestCgroupLimitOfThisMachine(t *testing.T) {
	if _, err := os.Stat("/proc/self/mountinfo"); err != nil {
		t.Skip("no /proc")
	}
	lim, err := CgroupLimit(os.DirFS("/"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cgroup memory limit: %d bytes (0: none)", lim)
}

func mapFS(files map[string]string) fstest.MapFS {
	m := fstest.MapFS{}
	for k, v := range files {
		m[k] = &fstest.MapFile{Data: []byte(v)}
	}
	return m
}
