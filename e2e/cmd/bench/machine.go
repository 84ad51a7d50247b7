package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
)

// Machine describes where the numbers were taken.
type Machine struct {
	CPUs     int
	CPUModel string
	MemTotal string
	Kernel   string
	Go       string
	HAProxy  string
	LoadAvg  string // at the start of the run
}

func describeMachine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), Go: runtime.Version(), HAProxy: haproxyVersion()}
	if out, err := exec.Command("nproc").Output(); err == nil {
		fmt.Sscan(string(out), &m.CPUs)
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		m.CPUModel = CPUInfoModel(string(b))
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		if kb, err := ParseStatusKiB(string(b), "MemTotal"); err == nil {
			m.MemTotal = fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
		}
	}
	if out, err := exec.Command("uname", "-srm").Output(); err == nil {
		m.Kernel = strings.TrimSpace(string(out))
	}
	if out, err := exec.Command("go", "version").Output(); err == nil {
		m.Go = strings.TrimSpace(string(out))
	}
	m.LoadAvg = loadAvg()
	return m
}

// loadAvg is the 1, 5 and 15 minute load averages of /proc/loadavg, "" if
// unreadable.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// CPUInfoModel returns the first "model name" of /proc/cpuinfo (or, on
// architectures without one, the first "Hardware" or "cpu model").
func CPUInfoModel(cpuinfo string) string {
	sc := bufio.NewScanner(strings.NewReader(cpuinfo))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "model name", "Hardware", "cpu model":
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}
