package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// ANSI sequences the screen uses: the alternate screen keeps the table off
// the terminal's scrollback, the way top and less do, and the shell's
// screen comes back as it was on exit.
const (
	enterAltScreen = "\033[?1049h\033[?25l" // and hide the cursor
	leaveAltScreen = "\033[?25h\033[?1049l"
	cursorHome     = "\033[H"
	clearToEOL     = "\033[K"
	clearToEnd     = "\033[J"
)

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// screen draws frames: in place on a terminal, as plain blocks of lines
// otherwise (CI logs, a pipe), where cursor movement would be noise.
type screen struct {
	w   io.Writer
	tty bool
	alt bool
	// size returns the terminal's rows and columns (0 when unknown).
	size func() (rows, cols int)
}

func terminalSize(f *os.File) func() (int, int) {
	return func() (int, int) {
		ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
		if err != nil {
			return 0, 0
		}
		return int(ws.Row), int(ws.Col)
	}
}

// fit renders v for the screen: on a terminal it drops the oldest events
// until the frame fits the rows, since a frame taller than the terminal
// would scroll and the next one would no longer land in place.
func (s *screen) fit(v view) []string {
	lines := render(v)
	if !s.alt || s.size == nil {
		return lines
	}
	rows, _ := s.size()
	for rows > 0 && len(lines) >= rows && len(v.events) > 0 {
		v.events = v.events[1:]
		lines = render(v)
	}
	return lines
}

// open switches a terminal to the alternate screen.
func (s *screen) open() {
	if s.tty && !s.alt {
		_, _ = io.WriteString(s.w, enterAltScreen)
		s.alt = true
	}
}

// close leaves the alternate screen, so what is printed next (the final
// frame, the teardown) stays in the terminal's scrollback.
func (s *screen) close() {
	if s.alt {
		_, _ = io.WriteString(s.w, leaveAltScreen)
		s.alt = false
	}
}

// draw writes one frame. On a terminal each line overwrites the previous
// frame's (clearing what is left of it) instead of clearing the screen
// first, so the table does not flicker.
func (s *screen) draw(lines []string) {
	var b strings.Builder
	if s.alt {
		cols := 0
		if s.size != nil {
			_, cols = s.size()
		}
		b.WriteString(cursorHome)
		for _, l := range lines {
			// A wrapped line would push the rest of the frame down.
			if r := []rune(l); cols > 0 && len(r) >= cols {
				l = string(r[:cols-1])
			}
			b.WriteString(l)
			b.WriteString(clearToEOL)
			b.WriteString("\n")
		}
		b.WriteString(clearToEnd)
	} else {
		for _, l := range lines {
			b.WriteString(l)
			b.WriteString("\n")
		}
		b.WriteString("\n")
	}
	_, _ = io.WriteString(s.w, b.String())
}

// readKeys puts the terminal on f into a mode that hands over each key as
// it is pressed, without echo, and sends the keys on the returned channel.
// Ctrl-C still raises SIGINT (the mode keeps signals), so the demo's
// signal handling stays the one way out. restore puts the terminal back
// as it was; the demo calls it on every way out.
func readKeys(ctx context.Context, f *os.File) (keys <-chan byte, restore func(), err error) {
	fd := int(f.Fd())
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the terminal's mode: %w", err)
	}
	raw := *old
	raw.Lflag &^= unix.ICANON | unix.ECHO
	raw.Cc[unix.VMIN], raw.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &raw); err != nil {
		return nil, nil, fmt.Errorf("setting the terminal to read single keys: %w", err)
	}
	restore = func() { _ = unix.IoctlSetTermios(fd, unix.TCSETS, old) }
	ch := make(chan byte)
	go func() {
		// Blocks in Read until a key comes; at exit it is simply abandoned.
		buf := make([]byte, 16)
		for {
			n, err := f.Read(buf)
			if err != nil {
				return
			}
			for _, k := range buf[:n] {
				select {
				case ch <- k:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return ch, restore, nil
}
