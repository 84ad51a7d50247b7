package runtimetune

import (
	"bytes"
	"log/slog"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestApply puts options into effect in this process (--sysmon go, so
// that it does not execute itself again) and checks the log lines and
// the collectors; options that fail Validate change nothing.
func TestApply(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))

	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	bad := Options{MemoryLimit: "96Mi", Sysmon: "never"}
	before := debug.SetMemoryLimit(-1)
	if _, err := Apply(bad, log); err == nil || !strings.Contains(err.Error(), "--sysmon") {
		t.Fatalf("Apply(--sysmon never) = %v, want the flag's error", err)
	}
	if got := debug.SetMemoryLimit(-1); got != before || logged.Len() > 0 {
		t.Fatalf("Apply with a bad flag set the memory limit to %d (was %d) or logged %q", got, before, logged.String())
	}

	o := Options{MemoryLimit: "96Mi", Sysmon: "go"}
	collectors, err := Apply(o, log)
	if err != nil {
		t.Fatal(err)
	}
	if got := debug.SetMemoryLimit(-1); got != 96<<20 {
		t.Errorf("memory limit %d, want %d", got, 96<<20)
	}
	for _, want := range []string{
		`msg="Go memory limit set" bytes=100663296 source=flag`,
		`msg="Go monitor thread"`,
		`msg="GOMAXPROCS in effect"`,
	} {
		if !strings.Contains(logged.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logged.String())
		}
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(collectors...)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range families {
		names = append(names, f.GetName())
	}
	if got := strings.Join(names, " "); got != "fanout_sysmon_steady" {
		t.Errorf("collected %q, want fanout_sysmon_steady", got)
	}
}
