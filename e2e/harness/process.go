package harness

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// process is one child process whose output goes to a log file.
type process struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{} // closed when the process has exited
	err     error         // Wait's result, valid after done is closed
}

// startProcess starts argv with stdout and stderr appended to logPath.
func startProcess(name, logPath string, argv []string, env []string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening the log of %s: %w", name, err)
	}
	fmt.Fprintf(logFile, "\n=== %s: %s\n", time.Now().Format(time.RFC3339Nano), strings.Join(argv, " "))

	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// A SIGKILLed test binary cannot clean up; the kernel then kills
		// its children for it, and the next run sweeps the network.
		Pdeathsig: syscall.SIGKILL,
		// Keep children out of the terminal's process group: Ctrl-C goes
		// to the test binary alone, which stops them in order.
		Setpgid: true,
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting %s (%s): %w", name, argv[0], err)
	}
	p := &process{name: name, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has ended.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// exitError describes how the process ended, with the tail of its log, for
// error messages about a process that died when it should not have.
func (p *process) exitError() error {
	return fmt.Errorf("%s exited (%v); last lines of %s:\n%s", p.name, p.err, p.logPath, tail(p.logPath, 25))
}

// stop sends SIGTERM and waits up to grace for the process to exit, then
// SIGKILLs it. It returns nil once the process is gone.
func (p *process) stop(grace time.Duration) error {
	if p.exited() {
		return nil
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("sending SIGTERM to %s: %w", p.name, err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	return p.kill()
}

// kill SIGKILLs the process and waits for it to be reaped.
func (p *process) kill() error {
	if p.exited() {
		return nil
	}
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("killing %s: %w", p.name, err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(30 * time.Second):
		return fmt.Errorf("%s (pid %d) still running 30s after SIGKILL", p.name, p.cmd.Process.Pid)
	}
}

// tail returns the last n lines of the file at path, for error messages.
func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// Tail returns the last n lines of a log file, for test failure messages.
func Tail(path string, n int) string { return tail(path, n) }
