package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// ProcUsage is one reading of a process's resource use from /proc.
type ProcUsage struct {
	// CPUTicks is utime+stime over all the process's threads, in clock
	// ticks (see clockTicks); UserTicks is the utime part: the process's
	// own code, where CPUTicks less UserTicks is the kernel's work for it.
	CPUTicks, UserTicks uint64
	// RSSKiB is the resident set now (VmRSS), HWMKiB its peak so far
	// (VmHWM).
	RSSKiB, HWMKiB uint64
}

// CPUSeconds converts CPUTicks.
func (u ProcUsage) CPUSeconds() float64 { return float64(u.CPUTicks) / float64(clockTicks) }

// UserCPUSeconds converts UserTicks.
func (u ProcUsage) UserCPUSeconds() float64 { return float64(u.UserTicks) / float64(clockTicks) }

// clockTicks is USER_HZ, the unit of utime and stime; 100 on every Linux
// architecture Go supports, but asked of getconf when it is there.
var clockTicks = func() int {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(out))); err == nil && n > 0 {
			return n
		}
	}
	return 100
}()

// ReadProc reads /proc/<pid>/stat and /proc/<pid>/status.
func ReadProc(pid int) (ProcUsage, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ProcUsage{}, err
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return ProcUsage{}, err
	}
	var u ProcUsage
	user, system, err := ParseStatCPU(string(stat))
	if err != nil {
		return u, err
	}
	u.CPUTicks, u.UserTicks = user+system, user
	if u.RSSKiB, err = ParseStatusKiB(string(status), "VmRSS"); err != nil {
		return u, err
	}
	if u.HWMKiB, err = ParseStatusKiB(string(status), "VmHWM"); err != nil {
		return u, err
	}
	return u, nil
}

// ParseStatCPU returns utime and stime (fields 14 and 15, see proc(5)) of a
// /proc/<pid>/stat line. The command name (field 2) is in parentheses and may
// hold spaces and parentheses itself, so fields are counted after the last
// ')'.
func ParseStatCPU(stat string) (user, system uint64, err error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("/proc stat line without a command name in parentheses: %q", stat)
	}
	f := strings.Fields(stat[i+1:])
	// f[0] is field 3 (state), so field n is f[n-3].
	if len(f) < 13 {
		return 0, 0, fmt.Errorf("/proc stat line has %d fields after the command name, want at least 13", len(f))
	}
	if user, err = strconv.ParseUint(f[11], 10, 64); err != nil {
		return 0, 0, fmt.Errorf("utime %q: %w", f[11], err)
	}
	if system, err = strconv.ParseUint(f[12], 10, 64); err != nil {
		return 0, 0, fmt.Errorf("stime %q: %w", f[12], err)
	}
	return user, system, nil
}

// ParseStatusKiB returns the value of a "Key:  1234 kB" line of
// /proc/<pid>/status.
func ParseStatusKiB(status, key string) (uint64, error) {
	sc := bufio.NewScanner(strings.NewReader(status))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || k != key {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("%s: want \"<n> kB\", got %q", key, strings.TrimSpace(v))
		}
		return strconv.ParseUint(f[0], 10, 64)
	}
	return 0, fmt.Errorf("no %s line in /proc status", key)
}
