package runtimetune

import (
	"math"
	"strings"
	"testing"
)

// TestOptionsPlan parses each flag's forms, and checks that every value
// refused names the flag and says what it wants.
func TestOptionsPlan(t *testing.T) {
	defaults := plan{memoryLimit: memoryLimitAuto, steady: false}
	for _, tc := range []struct {
		name    string
		edit    func(*Options)
		want    plan
		wantErr string
	}{
		{"defaults: Go's runtime, the memory limit from the cgroup", func(*Options) {}, defaults, ""},
		{"memory limit off", func(o *Options) { o.MemoryLimit = "off" }, plan{math.MaxInt64, false}, ""},
		{"memory limit size", func(o *Options) { o.MemoryLimit = " 96Mi " }, plan{96 << 20, false}, ""},
		{"memory limit empty is auto", func(o *Options) { o.MemoryLimit = "" }, defaults, ""},
		{"memory limit garbage", func(o *Options) { o.MemoryLimit = "lots" }, plan{},
			`--memory-limit "lots": want auto, off, or a positive size such as 96Mi`},
		{"memory limit negative", func(o *Options) { o.MemoryLimit = "-1Mi" }, plan{},
			`--memory-limit "-1Mi": want auto, off, or a positive size`},
		{"memory limit zero", func(o *Options) { o.MemoryLimit = "0" }, plan{},
			`--memory-limit "0": want auto, off, or a positive size`},
		{"sysmon steady, opt-in", func(o *Options) { o.Sysmon = "steady" }, plan{memoryLimitAuto, true}, ""},
		{"sysmon go", func(o *Options) { o.Sysmon = "go" }, defaults, ""},
		{"sysmon invalid", func(o *Options) { o.Sysmon = "never" }, plan{}, `--sysmon "never": want go or steady`},
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
