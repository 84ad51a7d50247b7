package runtimetune

import (
	"errors"
	"math"
	"testing"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

func TestApplyMemoryLimit(t *testing.T) {
	limited := memlimit.Limit(100000000)
	unreadable := func() (uint64, error) { return 0, errors.New("permission denied") }
	notLimited := func() (uint64, error) { return 0, memlimit.ErrNoLimit }
	for _, tc := range []struct {
		name    string
		spec    int64
		env     string
		cgroup  memlimit.Provider
		want    memoryLimit
		wantSet int64 // 0: SetMemoryLimit only read (-1)
		wantErr bool
	}{
		{name: "auto from the cgroup", spec: memoryLimitAuto, cgroup: limited,
			want: memoryLimit{Bytes: 90000000, Cgroup: 100000000, Source: sourceCgroup}, wantSet: 90000000},
		{name: "GOMEMLIMIT wins over auto", spec: memoryLimitAuto, env: "50MiB", cgroup: limited,
			want: memoryLimit{Bytes: 12345, Source: sourceGOMEMLIMIT}},
		{name: "the flag wins over GOMEMLIMIT", spec: 96 << 20, env: "50MiB", cgroup: limited,
			want: memoryLimit{Bytes: 96 << 20, Source: sourceFlag}, wantSet: 96 << 20},
		{name: "off", spec: math.MaxInt64, cgroup: limited,
			want: memoryLimit{Bytes: math.MaxInt64, Source: sourceNone}, wantSet: math.MaxInt64},
		{name: "no cgroup limit", spec: memoryLimitAuto, cgroup: notLimited,
			want: memoryLimit{Bytes: 12345, Source: sourceNone}},
		{name: "not in a cgroup", spec: memoryLimitAuto, cgroup: func() (uint64, error) { return 0, memlimit.ErrNoCgroup },
			want: memoryLimit{Bytes: 12345, Source: sourceNone}},
		{name: "cgroup unreadable", spec: memoryLimitAuto, cgroup: unreadable,
			want: memoryLimit{Bytes: 12345, Source: sourceNone}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var set int64
			got, err := applyMemoryLimit(tc.spec, tc.env, tc.cgroup, func(b int64) int64 {
				if b < 0 {
					return 12345 // what the runtime has
				}
				set = b
				return 0
			})
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want an error: %v", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("memoryLimit = %+v, want %+v", got, tc.want)
			}
			if set != tc.wantSet {
				t.Errorf("SetMemoryLimit(%d), want %d", set, tc.wantSet)
			}
		})
	}
}
