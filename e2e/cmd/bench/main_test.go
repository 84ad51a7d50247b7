package main

import (
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestKeptSection: what follows the marker in the old report is carried
// over to the new one; a report without it, or no report, gives nothing.
func TestKeptSection(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "benchmarks.md")
	if got := keptSection(path); got != "" {
		t.Errorf("no file: kept %q, want nothing", got)
	}
	os.WriteFile(path, []byte("# Benchmarks\n\ngenerated\n"), 0o644)
	if got := keptSection(path); got != "" {
		t.Errorf("no marker: kept %q, want nothing", got)
	}
	kept := keptMarker + "\n\n## A decision\n\n| a | b |\n"
	os.WriteFile(path, []byte("# Benchmarks\n\ngenerated\n\n"+kept), 0o644)
	if got := keptSection(path); got != "\n"+kept {
		t.Errorf("kept %q, want %q", got, "\n"+kept)
	}
}
