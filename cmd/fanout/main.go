// Command fanout is a sidecar that spreads a Kubernetes client's requests
// over every kube-apiserver, one request at a time, with the client's own
// credentials.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"go.uber.org/fx"

	"github.com/fanout-dev/fanout/components/sidecar"
	"github.com/fanout-dev/fanout/internal/gctune"
	"github.com/fanout-dev/fanout/internal/memlimit"
	"github.com/fanout-dev/fanout/internal/proctune"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "status" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := runStatus(ctx, os.Args[2:], os.Stdout, os.Stderr, stdoutIsTerminal())
		stop()
		os.Exit(code)
	}
	o := sidecar.NewConfig()
	fs := pflag.NewFlagSet("fanout", pflag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: fanout --kubeconfig PATH [flags]\n       fanout status [--admin-address ADDR] [--watch]   (see fanout status --help)\n\n"+
			"fanout listens on a loopback address for a Kubernetes client (point its kubeconfig at\n"+
			"http://127.0.0.1:7080) and spreads each request over mTLS HTTP/2 connections to every\n"+
			"kube-apiserver endpoint, with the client's own certificate or token.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	o.AddFlags(fs)
	memLimit := fs.String("memory-limit", "auto",
		"the Go runtime's soft memory limit, which makes the garbage collector work harder as memory use nears it: "+
			"auto (90% of the container's cgroup memory limit, none without one; a GOMEMLIMIT environment variable wins), "+
			"off, or a size such as 96Mi. The limit in effect is logged at start and exported as go_gc_gomemlimit_bytes")
	gcHeadroom := fs.String("gc-headroom", "16Mi",
		"How much the heap may grow past the live heap between two garbage collections: GOGC is set after each "+
			"collection to leave this much, raised while the live heap is small (fewer collections under many short "+
			"requests) and lowered, to 25 at the least, while it is large (many open watches), so that memory stays near "+
			"live heap + headroom. The headroom shrinks by half of what the collector found in use (live heap, stacks, "+
			"globals), down to half this value: 16Mi leaves 15 MiB above 2 MiB in use and 8 MiB from 16 MiB on. "+
			"An explicit GOGC environment variable is the least GOGC it sets; "+
			"0 turns it off; a GOGC environment variable of off turns it off too")
	maxProcsFlag := fs.String("max-procs", "adaptive",
		"How many threads run fanout's Go code at once (GOMAXPROCS): adaptive runs it on one while that is enough "+
			"and on up to Go's choice while the process is busy (25 ms of load is enough to move up, 250 ms from idle; "+
			"a second of quiet to move back); auto keeps Go's choice (a GOMAXPROCS environment variable, else the "+
			"container's CPU limit rounded up and at least 2, else every CPU of the node); a whole number is fixed and "+
			"wins over GOMAXPROCS, which otherwise fixes it too. One thread takes about a third less CPU at 1k requests "+
			"per second (docs/footprint.md). The most in effect is logged at start; go_sched_gomaxprocs_threads is the "+
			"current value")
	sysmonFlag := fs.String("sysmon", "steady",
		"How Go's monitor thread (sysmon) sleeps. steady keeps it polling every 10 ms at the most, idle or not; go "+
			"leaves Go's behaviour, where it sleeps while every thread is idle and the next system call wakes it to poll "+
			"every 20 µs again, which under a client's requests is a thread switch for about every other request. steady "+
			"sets GODEBUG=schedtrace=2147483647 (the runtime's only switch for it: a scheduler trace every 24.8 days, so "+
			"one trace line at start on a node up longer than that), for which fanout executes itself again at start, "+
			"with the same process ID. A GODEBUG that sets schedtrace wins. Measured: about a quarter less CPU "+
			"at 1k requests per second, 0.13–0.16 s more CPU per idle minute (docs/footprint.md). fanout_sysmon_steady is 1 "+
			"while in effect")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if err == pflag.ErrHelp {
			os.Exit(0)
		}
		fmt.Fprintf(os.Stderr, "fanout: %v\nRun 'fanout --help' for the flags.\n", err)
		os.Exit(2)
	}
	if err := o.Validate(); err != nil {
		fmt.Fprintf(os.Stderr, "fanout: invalid flags:\n%v\n", err)
		os.Exit(2)
	}
	env, err := sysmonExecEnv(*sysmonFlag, os.Environ())
	if err != nil {
		fmt.Fprintf(os.Stderr, "fanout: invalid flags:\n%v\n", err)
		os.Exit(2)
	}
	var reexecErr error
	if env != nil {
		reexecErr = reexecForSysmon(env) // returns only on failure
	}
	// Before anything allocates much: the GC works to it from the start.
	lim, limErr := memlimit.Apply(*memLimit)
	if limErr != nil && lim.Source == "" {
		fmt.Fprintf(os.Stderr, "fanout: invalid flags:\n%v\n", limErr)
		os.Exit(2)
	}
	procs, err := applyMaxProcs(*maxProcsFlag, os.Getenv("GOMAXPROCS"), runtime.GOMAXPROCS)
	if err != nil {
		fmt.Fprintf(os.Stderr, "fanout: invalid flags:\n%v\n", err)
		os.Exit(2)
	}
	headroom, err := memlimit.ParseSize(*gcHeadroom)
	if err != nil || headroom < 0 {
		fmt.Fprintf(os.Stderr, "fanout: invalid flags:\n--gc-headroom %q: want 0 or a size such as 16Mi\n", *gcHeadroom)
		os.Exit(2)
	}
	if err := o.CheckNetworkNamespace(); err != nil {
		fmt.Fprintf(os.Stderr, "fanout: %v\n", err)
		os.Exit(2)
	}
	log := sidecar.NewLogger(o, os.Stderr)
	// Libraries that log through slog's default (the reverse proxy's error
	// log among them) get the same format and level.
	slog.SetDefault(log)
	switch {
	case limErr != nil:
		// Not fatal: the sidecar runs as it would without a cgroup.
		log.Warn("cannot read the cgroup memory limit; the Go memory limit stays unset; set --memory-limit to the pod's limit to give the garbage collector one", "error", limErr)
	default:
		logMemoryLimit(log, lim)
	}
	if reexecErr != nil {
		log.Warn("cannot execute fanout again with GODEBUG=schedtrace; Go's monitor thread keeps its deep sleep, as with --sysmon go", "error", reexecErr)
	}
	steady := sysmonSteady()
	log.Info("Go monitor thread", "steady", steady, "godebug", os.Getenv("GODEBUG"))
	log.Info("GOMAXPROCS in effect", "threads", procs.N, "source", procs.Source, "adaptive", procs.Adaptive, "cpus", runtime.NumCPU())
	var procTuner *proctune.Tuner
	if procs.Adaptive {
		// Runs for the life of the process, like the GC tuner.
		procTuner = proctune.Start(procs.N)
	}
	if t := gctune.Start(headroom); t != nil {
		log.Info("garbage collector headroom set", "bytes", headroom, "gogc", t.Percent())
	}
	app := fx.New(sidecar.App(*o, log), fx.Invoke(func(reg prometheus.Registerer) {
		reg.MustRegister(procTuner.Collector(), sysmonGauge(steady))
	}))
	if err := app.Err(); err != nil {
		log.Error("fanout cannot start", "error", err)
		os.Exit(1)
	}
	app.Run()
}

// logMemoryLimit says which Go memory limit is in effect and why.
func logMemoryLimit(log *slog.Logger, lim memlimit.Limit) {
	if lim.Source == memlimit.SourceNone {
		log.Info("Go memory limit: none", "source", lim.Source)
		return
	}
	args := []any{"bytes", lim.Bytes, "source", lim.Source}
	if lim.Cgroup > 0 {
		args = append(args, "cgroupBytes", lim.Cgroup, "ratio", memlimit.DefaultRatio)
	}
	log.Info("Go memory limit set", args...)
}
