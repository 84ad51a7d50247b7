package harness

import (
	"context"
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// conformancePackage is upstream's e2e suite; `make WHAT=test/e2e/e2e.test`
// builds the same package as a test binary.
const conformancePackage = "k8s.io/kubernetes/test/e2e"

// ConformanceBinary returns the path of upstream's e2e.test at the e2e
// module's Kubernetes version, building it into the cache
// (${XDG_CACHE_HOME:-$HOME/.cache}/fanout-e2e/<version>/e2e.test) the first
// time, with progress lines every 30 s as Binaries does. It is built with
// cgo off like the other Kubernetes binaries, so a cold build reuses the
// packages they share from the Go build cache.
func ConformanceBinary(ctx context.Context, progress io.Writer) (string, error) {
	if progress == nil {
		progress = os.Stderr
	}
	version, err := KubeVersion(ctx)
	if err != nil {
		return "", err
	}
	dir, err := CacheDir(version)
	if err != nil {
		return "", err
	}
	modDir, err := ModuleDir()
	if err != nil {
		return "", err
	}
	return cachedBuild(ctx, dir, "e2e.test", progress, "another process is building Kubernetes binaries; waiting for it", func(out string) error {
		fmt.Fprintf(progress, "harness: building upstream's conformance suite %s (e2e.test) into %s\n", conformancePackage, dir)
		return runWithProgressEnv(ctx, modDir, []string{"test", "-c", "-vet=off", "-o", out, conformancePackage}, []string{"CGO_ENABLED=0"}, progress, "building e2e.test")
	})
}

// SpecResult is one spec of a JUnit report written by e2e.test
// (--report-dir): its full name (without Ginkgo's "[It] ") and Ginkgo's
// state ("passed", "failed", "skipped", "timedout", ...).
type SpecResult struct {
	Name   string
	Status string
	// Message is the skip or failure text, if any.
	Message string
	Seconds float64
}

// Passed reports whether the spec ran and passed.
func (s SpecResult) Passed() bool { return s.Status == "passed" }

// Skipped reports whether the spec was skipped, by the focus and skip
// filters or by itself at run time.
func (s SpecResult) Skipped() bool { return s.Status == "skipped" || s.Status == "pending" }

// Failed reports whether the spec ran and did not pass (failed, timed out,
// panicked, interrupted or aborted).
func (s SpecResult) Failed() bool { return !s.Passed() && !s.Skipped() }

// ReadJUnit parses the junit_01.xml that e2e.test writes into its
// --report-dir and returns its specs. Ginkgo lists every spec of the suite
// there, also the ones the focus and skip filters left out (as skipped),
// and the suite's setup and report nodes ("[SynchronizedBeforeSuite]",
// "[ReportAfterSuite] ..."), which are no specs and are left out here.
func ReadJUnit(path string) ([]SpecResult, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading e2e.test's JUnit report (did it run with --report-dir?): %w", err)
	}
	var doc struct {
		Suites []struct {
			Cases []struct {
				Name    string  `xml:"name,attr"`
				Status  string  `xml:"status,attr"`
				Time    float64 `xml:"time,attr"`
				Skipped *struct {
					Message string `xml:"message,attr"`
				} `xml:"skipped"`
				Failure *struct {
					Text string `xml:",chardata"`
				} `xml:"failure"`
				Error *struct {
					Text string `xml:",chardata"`
				} `xml:"error"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("parsing the JUnit report %s: %w", path, err)
	}
	var out []SpecResult
	for _, s := range doc.Suites {
		for _, c := range s.Cases {
			name, ok := strings.CutPrefix(c.Name, "[It] ")
			if !ok {
				continue
			}
			r := SpecResult{Name: name, Status: c.Status, Seconds: c.Time}
			switch {
			case c.Skipped != nil:
				r.Message = c.Skipped.Message
			case c.Failure != nil:
				r.Message = c.Failure.Text
			case c.Error != nil:
				r.Message = c.Error.Text
			}
			out = append(out, r)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("the JUnit report %s lists no specs", path)
	}
	return out, nil
}

// SpecNames returns the sorted names of the specs for which keep is true.
func SpecNames(specs []SpecResult, keep func(SpecResult) bool) []string {
	var out []string
	for _, s := range specs {
		if keep(s) {
			out = append(out, s.Name)
		}
	}
	sort.Strings(out)
	return out
}

// Difference returns the names in a that are not in b (both sorted).
func Difference(a, b []string) []string {
	in := make(map[string]bool, len(b))
	for _, s := range b {
		in[s] = true
	}
	var out []string
	for _, s := range a {
		if !in[s] {
			out = append(out, s)
		}
	}
	return out
}
