package main

import (
	"os"
	"strings"
	"testing"
)

func TestParseStatCPU(t *testing.T) {
	for _, tc := range []struct {
		name              string
		stat              string
		wantUser, wantSys uint64
		wantErr           string
	}{
		{
			name: "plain",
			// pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime ...
			stat:     "1234 (fanout) S 1 1234 1234 0 -1 4194560 2950 0 0 0 417 83 0 0 20 0 9 0 5000 1300000000 4000 18446744073709551615",
			wantUser: 417, wantSys: 83,
		},
		{
			name:     "command name with spaces and parentheses",
			stat:     "99 (my (weird) proc) R 1 99 99 0 -1 0 0 0 0 0 7 3 0 0 20 0 1 0 1 1 1",
			wantUser: 7, wantSys: 3,
		},
		{name: "no parentheses", stat: "99 fanout R 1", wantErr: "parentheses"},
		{name: "too short", stat: "99 (x) R 1 2 3", wantErr: "at least 13"},
		{name: "not a number", stat: "99 (x) R 1 99 99 0 -1 0 0 0 0 0 seven 3 0", wantErr: "utime"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			user, sys, err := ParseStatCPU(tc.stat)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one mentioning %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || user != tc.wantUser || sys != tc.wantSys {
				t.Fatalf("ParseStatCPU = %d, %d, %v; want %d, %d", user, sys, err, tc.wantUser, tc.wantSys)
			}
		})
	}
}

const statusSample = `Name:	fanout
Umask:	0022
State:	S (sleeping)
VmPeak:	 1264632 kB
VmSize:	 1264632 kB
VmHWM:	   24680 kB
VmRSS:	   20480 kB
Threads:	9
`

func TestParseStatusKiB(t *testing.T) {
	for _, tc := range []struct {
		key     string
		want    uint64
		wantErr bool
	}{
		{"VmHWM", 24680, false},
		{"VmRSS", 20480, false},
		{"VmSwap", 0, true},  // absent
		{"Threads", 0, true}, // no kB unit
		{"VmPeak", 1264632, false},
	} {
		got, err := ParseStatusKiB(statusSample, tc.key)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("ParseStatusKiB(%s) = %d, %v; want %d, error %v", tc.key, got, err, tc.want, tc.wantErr)
		}
	}
}

// ReadProc on ourselves: the real files parse, and the peak is never below
// the current RSS.
func TestReadProcSelf(t *testing.T) {
	u, err := ReadProc(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if u.RSSKiB == 0 || u.HWMKiB < u.RSSKiB {
		t.Errorf("ReadProc(self) = %+v: want a non-zero RSS at or below the peak", u)
	}
	// Spin in user space until the process's CPU moved by 5 ticks: that
	// time is utime, so the user part must carry most of it.
	busy := 0
	v := u
	for v.CPUTicks < u.CPUTicks+5 {
		for i := range 1_000_000 {
			busy += i % 7
		}
		if v, err = ReadProc(os.Getpid()); err != nil {
			t.Fatal(err)
		}
	}
	if v.UserTicks > v.CPUTicks {
		t.Errorf("user ticks %d above all ticks %d", v.UserTicks, v.CPUTicks)
	}
	if du, dc := v.UserTicks-u.UserTicks, v.CPUTicks-u.CPUTicks; 2*du < dc {
		t.Errorf("spinning took %d ticks of CPU but only %d of user (busy %d)", dc, du, busy)
	}
}

func TestCPUInfoModel(t *testing.T) {
	x86 := "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\nflags\t: fpu\n\nprocessor\t: 1\nmodel name\t: AMD EPYC 7B13\n"
	if got := CPUInfoModel(x86); got != "AMD EPYC 7B13" {
		t.Errorf("CPUInfoModel(x86) = %q", got)
	}
	if got := CPUInfoModel("processor : 0\nBogoMIPS : 50\n"); got != "unknown" {
		t.Errorf("CPUInfoModel(no model) = %q, want unknown", got)
	}
}
