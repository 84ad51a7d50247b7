package testkit

import (
	"path/filepath"
	"strings"
	"testing"
)

// CheckExit runs bin with args and fails t unless it exits with code and
// its output, stdout and stderr together, contains want: the check of a
// command's flag table.
func CheckExit(t *testing.T, bin string, args []string, code int, want string) {
	t.Helper()
	got, stdout, stderr := RunBinary(t, bin, args...)
	if out := stdout + stderr; got != code || !strings.Contains(out, want) {
		t.Fatalf("%s %v: exit %d, output:\n%s\nwant exit %d and output containing %q", filepath.Base(bin), args, got, out, code, want)
	}
}

// CheckStartFailure runs bin with args and fails t unless it exits with
// code, writes nothing to stdout, and leaves on stderr the one cause line
// CheckOneCause looks for, holding every string of want.
func CheckStartFailure(t *testing.T, bin string, args []string, code int, want []string) {
	t.Helper()
	got, stdout, stderr := RunBinary(t, bin, args...)
	if got != code {
		t.Errorf("exit %d, want %d", got, code)
	}
	if stdout != "" {
		t.Errorf("stdout, want it empty:\n%s", stdout)
	}
	CheckOneCause(t, filepath.Base(bin), stderr, want)
}
