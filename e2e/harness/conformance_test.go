package harness

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// A JUnit report as e2e.test writes it (--report-dir): suite nodes, specs
// the filters left out, specs that passed, failed and skipped themselves.
const junitSample = `<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="5" disabled="0" errors="0" failures="1" time="10">
  <testsuite name="Kubernetes e2e suite" package="/x" tests="5" skipped="2" failures="1">
    <testcase name="[SynchronizedBeforeSuite]" classname="Kubernetes e2e suite" status="passed" time="0"></testcase>
    <testcase name="[It] [sig-a] A passes [Conformance]" classname="Kubernetes e2e suite" status="passed" time="1.5"></testcase>
    <testcase name="[It] [sig-a] B fails [Conformance]" classname="Kubernetes e2e suite" status="failed" time="2">
      <failure type="failed">boom</failure>
    </testcase>
    <testcase name="[It] [sig-a] C filtered out" classname="Kubernetes e2e suite" status="skipped" time="0">
      <skipped message="skipped"></skipped>
    </testcase>
    <testcase name="[It] [sig-a] D skips itself [Conformance]" classname="Kubernetes e2e suite" status="skipped" time="0.1">
      <skipped message="skipped - needs a feature"></skipped>
    </testcase>
    <testcase name="[ReportAfterSuite] Kubernetes e2e suite report" classname="Kubernetes e2e suite" status="failed" time="0"></testcase>
  </testsuite>
</testsuites>`

func TestReadJUnit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "junit_01.xml")
	if err := os.WriteFile(path, []byte(junitSample), 0o644); err != nil {
		t.Fatal(err)
	}
	specs, err := ReadJUnit(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		keep func(SpecResult) bool
		want []string
	}{
		{"passed", SpecResult.Passed, []string{"[sig-a] A passes [Conformance]"}},
		{"failed", SpecResult.Failed, []string{"[sig-a] B fails [Conformance]"}},
		{"skipped", SpecResult.Skipped, []string{"[sig-a] C filtered out", "[sig-a] D skips itself [Conformance]"}},
	} {
		if got := SpecNames(specs, tc.keep); !slices.Equal(got, tc.want) {
			t.Errorf("%s: got %q, want %q (suite nodes are no specs)", tc.name, got, tc.want)
		}
	}
	if specs[1].Message != "boom" || specs[3].Message != "skipped - needs a feature" {
		t.Errorf("messages: got %q and %q", specs[1].Message, specs[3].Message)
	}
	if _, err := ReadJUnit(filepath.Join(t.TempDir(), "missing.xml")); err == nil {
		t.Error("a missing report gave no error")
	}
}

func TestDifference(t *testing.T) {
	for _, tc := range []struct {
		a, b, want []string
	}{
		{[]string{"x", "y"}, []string{"y"}, []string{"x"}},
		{[]string{"x"}, []string{"x"}, nil},
		{nil, []string{"x"}, nil},
	} {
		if got := Difference(tc.a, tc.b); !slices.Equal(got, tc.want) {
			t.Errorf("Difference(%q, %q) = %q, want %q", tc.a, tc.b, got, tc.want)
		}
	}
}
