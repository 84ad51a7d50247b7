package testkit

import (
	"strings"
	"sync"
)

// Buffer collects what a process or a logger writes, from any goroutine,
// for the test to read while it is being written (a child's stderr, a
// slog handler's output).
type Buffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
