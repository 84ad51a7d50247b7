package testkit

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// RunBinary runs bin with args to its end and returns its exit code,
// stdout and stderr. A run that should fail but starts instead is killed
// after a minute and fails the test.
func RunBinary(t *testing.T, bin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errs bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &errs
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%s %v still ran after %s; stderr:\n%s", filepath.Base(bin), args, time.Minute, errs.String())
	}
	if ee, ok := errors.AsType[*exec.ExitError](err); ok {
		return ee.ExitCode(), out.String(), errs.String()
	} else if err != nil {
		t.Fatal(err)
	}
	return 0, out.String(), errs.String()
}

// CheckOneCause fails t unless stderr holds exactly one cause line, a
// line of program's own ("program: ...") or an error-level log line,
// containing every string of want, and otherwise info and warning log
// lines only, none with a trace of fx or a source path.
func CheckOneCause(t *testing.T, program, stderr string, want []string) {
	t.Helper()
	var causes []string
	for l := range strings.Lines(stderr) {
		l = strings.TrimSuffix(l, "\n")
		for _, trace := range []string{"fx.", "[Fx]", ".go:", "goroutine ", "could not build arguments"} {
			if strings.Contains(l, trace) {
				t.Errorf("stderr line holds %q, a dependency-injection trace or source path: %s", trace, l)
			}
		}
		switch {
		case strings.HasPrefix(l, program+": "), strings.Contains(l, "level=ERROR"):
			causes = append(causes, l)
		case strings.HasPrefix(l, "time=") && (strings.Contains(l, " level=INFO ") || strings.Contains(l, " level=WARN ")):
		default:
			t.Errorf("stderr line is neither the cause nor an info or warning log line: %q", l)
		}
	}
	if len(causes) != 1 {
		t.Fatalf("%d cause lines on stderr, want 1:\n%s", len(causes), stderr)
	}
	for _, w := range want {
		if !strings.Contains(causes[0], w) {
			t.Errorf("cause line lacks %q:\n%s", w, causes[0])
		}
	}
}

// StartLogged starts cmd and returns the address its log (stderr, slog's
// text format) gives in the first line of message msg, such as
// msg="admin server listening" address=127.0.0.1:41234. cmd is killed when
// the test ends.
func StartLogged(t *testing.T, cmd *exec.Cmd, msg string) string {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line := regexp.MustCompile(`msg="` + regexp.QuoteMeta(msg) + `" address=(\S+)`)
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := line.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
				break
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	select {
	case a := <-addr:
		return a
	case <-time.After(WaitLimit):
		t.Fatalf("%s logged no %q with an address within %s", filepath.Base(cmd.Path), msg, WaitLimit)
		return ""
	}
}

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
