package runtimetune

import (
	"math"
	"strings"
	"testing"
)

// TestOptionsPlan parses each flag's forms, and checks that every value
// refused names the flag and says what it wants.
func TestOptionsPlan(t *testing.T) {
	defaults := plan{memoryLimit: memoryLimitAuto, headroom: 16 << 20, maxProcs: maxProcsAuto, steady: true}
	for _, tc := range []struct {
		name    string
		edit    func(*Options)
		want    plan
		wantErr string
	}{
		{"defaults", func(*Options) {}, defaults, ""},
		{"memory limit off", func(o *Options) { o.MemoryLimit = "off" },
			plan{math.MaxInt64, 16 << 20, maxProcsAuto, true}, ""},
		{"memory limit size", func(o *Options) { o.MemoryLimit = " 96Mi " },
			plan{96 << 20, 16 << 20, maxProcsAuto, true}, ""},
		{"memory limit empty is auto", func(o *Options) { o.MemoryLimit = "" }, defaults, ""},
		{"memory limit garbage", func(o *Options) { o.MemoryLimit = "lots" }, plan{},
			`--memory-limit "lots": want auto, off, or a positive size such as 96Mi`},
		{"memory limit negative", func(o *Options) { o.MemoryLimit = "-1Mi" }, plan{},
			`--memory-limit "-1Mi": want auto, off, or a positive size`},
		{"memory limit zero", func(o *Options) { o.MemoryLimit = "0" }, plan{},
			`--memory-limit "0": want auto, off, or a positive size`},
		{"headroom off", func(o *Options) { o.GCHeadroom = "0" },
			plan{memoryLimitAuto, 0, maxProcsAuto, true}, ""},
		{"headroom garbage", func(o *Options) { o.GCHeadroom = "much" }, plan{},
			`--gc-headroom "much": want 0 or a size such as 16Mi`},
		{"adaptive", func(o *Options) { o.MaxProcs = "adaptive" },
			plan{memoryLimitAuto, 16 << 20, maxProcsAdapt, true}, ""},
		{"a number of threads", func(o *Options) { o.MaxProcs = " 3 " },
			plan{memoryLimitAuto, 16 << 20, 3, true}, ""},
		{"zero threads", func(o *Options) { o.MaxProcs = "0" }, plan{},
			`--max-procs "0": want auto, adaptive or a whole number of at least 1`},
		{"threads not a number", func(o *Options) { o.MaxProcs = "two" }, plan{},
			`--max-procs "two": want auto, adaptive or a whole number`},
		{"sysmon go", func(o *Options) { o.Sysmon = "go" },
			plan{memoryLimitAuto, 16 << 20, maxProcsAuto, false}, ""},
		{"sysmon invalid", func(o *Options) { o.Sysmon = "never" }, plan{}, `--sysmon "never": want steady or go`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := NewOptions()
			tc.edit(o)
			got, err := o.plan()
			if verr := o.Validate(); (verr == nil) != (err == nil) {
				t.Errorf("Validate() = %v, plan's error %v", verr, err)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("plan() = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}
