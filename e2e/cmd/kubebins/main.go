// Command kubebins builds the Kubernetes binaries the e2e harness runs (at
// the version the e2e module requires) and, without -conformance, the
// chart tests' helm (harness.Helm); with -conformance upstream's
// conformance suite e2e.test that TestConformanceThroughFanout runs, and
// with -release another release's kube-apiserver, kube-controller-manager
// and kube-scheduler that TestUpgradeRoll rolls from, into
// the harness's cache, or finds them there, and prints where they are.
// `make e2e`, `make demo`, `make conformance` and `make upgrade` run it first: go test
// buffers each package's output while several packages run, so a build
// started from inside the tests would leave a fresh machine
// silent for many minutes, whereas here the harness's progress lines
// reach the terminal (or the CI log) as they are printed.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/fanout-dev/fanout/e2e/harness"
)

func main() {
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: go run ./cmd/kubebins [-conformance] [-release version] (from the e2e module)\n\n"+
			"Builds the Kubernetes binaries and helm the e2e harness needs (with\n"+
			"-conformance upstream's conformance suite e2e.test instead of helm, with\n"+
			"-release also another release's apiserver, controller manager and scheduler) into\n"+
			"${XDG_CACHE_HOME:-~/.cache}/fanout-e2e/<version>/ unless they are there,\n"+
			"printing progress, and prints the directory.\n\n")
		flag.PrintDefaults()
	}
	conformance := flag.Bool("conformance", false, "also build upstream's e2e.test for TestConformanceThroughFanout (make conformance; up to 10 more minutes)")
	release := flag.String("release", "", "also build kube-apiserver, kube-controller-manager and kube-scheduler of this `version` (e.g. v1.36.3) for TestUpgradeRoll (make upgrade; about as long as the first build)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	bins, err := harness.Binaries(ctx, os.Stdout)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kubebins: %v\n", err)
		os.Exit(1)
	}
	if *release != "" {
		old, err := harness.ReleaseBinaries(ctx, *release, os.Stdout)
		if err != nil {
			fmt.Fprintf(os.Stderr, "kubebins: %v\n", err)
			os.Exit(1)
		}
		fmt.Printf("kubebins: Kubernetes %s kube-apiserver, kube-controller-manager and kube-scheduler in %s\n", old.Version, old.Dir)
	}
	if !*conformance {
		// The chart tests' helm (make e2e), with its progress here for
		// the same reason.
		helm, err := harness.Helm(ctx, os.Stdout)
		if err != nil {
			fmt.Fprintf(os.Stderr, "kubebins: %v\n", err)
			os.Exit(1)
		}
		fmt.Printf("kubebins: helm %s at %s\n", harness.HelmVersion, helm)
		fmt.Printf("kubebins: Kubernetes %s binaries in %s\n", bins.Version, bins.Dir)
		return
	}
	if _, err := harness.ConformanceBinary(ctx, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "kubebins: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("kubebins: Kubernetes %s binaries and e2e.test in %s\n", bins.Version, bins.Dir)
}
