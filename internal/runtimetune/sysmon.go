package runtimetune

import (
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
)

// SteadySchedtrace keeps Go's monitor thread (sysmon) from its deep sleep.
//
// sysmon polls the scheduler, sleeping 20 µs between polls and doubling the
// sleep, up to 10 ms, once 50 polls in a row found nothing to do. While
// every P is idle it sleeps instead until the next timer, and the next
// system call wakes it and starts it again at 20 µs. A sidecar goes idle
// and busy again many times a second under a client's requests (it waits
// on the kube-apiservers), so sysmon spent its time in 20 µs sleeps: about
// one thread switch for every two requests at saturation
// (docs/footprint.md, "The runtime's monitor thread").
//
// The runtime has no setting for that sleep, but skips it while a
// scheduler trace is on (GODEBUG schedtrace, milliseconds between
// traces), so that the trace is printed on time. This is the largest
// value GODEBUG takes: a trace every 24.8 days. sysmon counts from the
// system's boot, so on a node up longer than that one trace line is
// printed at start.
const SteadySchedtrace = "schedtrace=2147483647"

// sysmonExecEnv returns the environment to re-execute fanout with, given
// the process's, or nil when the process can go on as it is:
//   - steady (--sysmon steady, opt-in): GODEBUG with SteadySchedtrace
//     added, unless GODEBUG sets schedtrace already (the operator's choice
//     wins);
//   - not steady (--sysmon go, the default): nil, Go's own behaviour.
//
// The runtime reads schedtrace only at start, hence the re-execution.
func sysmonExecEnv(steady bool, environ []string) []string {
	if !steady {
		return nil
	}
	godebug, found := "", false
	env := make([]string, 0, len(environ)+1)
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, "GODEBUG="); ok {
			if !found { // the runtime reads the first
				godebug, found = v, true
			}
			continue
		}
		env = append(env, kv)
	}
	if _, set := schedtrace(godebug); set {
		return nil
	}
	if godebug != "" {
		godebug += ","
	}
	return append(env, "GODEBUG="+godebug+SteadySchedtrace)
}

// schedtrace returns the schedtrace that a GODEBUG value sets, and whether
// it sets one. The runtime takes the last of several.
func schedtrace(godebug string) (ms int, set bool) {
	for _, kv := range strings.Split(godebug, ",") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(kv), "schedtrace="); ok {
			ms, _ = strconv.Atoi(v)
			set = true
		}
	}
	return ms, set
}

// reexecForSysmon re-executes the running binary with env, with the same
// arguments and process ID. It returns only if that failed.
func reexecForSysmon(env []string) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	return syscall.Exec(exe, os.Args, env)
}

// sysmonSteady reports whether the runtime's monitor thread is kept from
// its deep sleep in this process: GODEBUG sets a positive schedtrace.
func sysmonSteady() bool {
	ms, _ := schedtrace(os.Getenv("GODEBUG"))
	return ms > 0
}

// sysmonGauge exports sysmonSteady as fanout_sysmon_steady.
func sysmonGauge(steady bool) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "fanout_sysmon_steady",
		Help: "1 when Go's monitor thread is kept from its deep sleep (--sysmon steady, or a GODEBUG schedtrace), 0 with Go's own behaviour.",
	})
	if steady {
		g.Set(1)
	}
	return g
}
