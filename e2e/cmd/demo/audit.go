package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"time"

	"github.com/fanout-dev/fanout/e2e/harness"
)

// auditTail reads an apiserver's audit log incrementally. The table is
// redrawn every few seconds for as long as the demo runs, and rereading
// every log in full each time (as harness.ServedPerAPIServerNow does, which
// suits a test's one count) would cost more CPU with every minute.
type auditTail struct {
	path    string
	off     int64
	partial []byte
}

// next calls fn for each complete event written since the last call. When
// the file shrank (a new file at the same path) it reads nothing and
// reports reset: the next call reads from the beginning.
func (t *auditTail) next(fn func(*harness.AuditEvent)) (reset bool, err error) {
	f, err := os.Open(t.path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil // not written yet
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return false, err
	}
	if fi.Size() < t.off {
		t.off, t.partial = 0, nil
		return true, nil
	}
	if _, err := f.Seek(t.off, io.SeekStart); err != nil {
		return false, err
	}
	data, err := io.ReadAll(io.LimitReader(f, fi.Size()-t.off))
	if err != nil {
		return false, err
	}
	t.off += int64(len(data))
	data = append(t.partial, data...)
	for {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			break
		}
		var e harness.AuditEvent
		if json.Unmarshal(data[:i], &e) == nil {
			fn(&e)
		}
		data = data[i+1:]
	}
	// A line the apiserver is still writing waits for the next call.
	t.partial = append([]byte(nil), data...)
	return false, nil
}

// window is how far back "recent requests" look: long enough for a steady
// share, short enough that a change (an apiserver gone, a connection
// moved) shows within seconds.
const window = 30 * time.Second

// serverLog is what one apiserver's audit log says, per user.
type serverLog struct {
	tail auditTail
	// total counts served requests (health probes excluded).
	total map[string]int
	// recent holds the times of the requests served within window, oldest
	// first.
	recent map[string][]time.Time
	// open holds the watches that started and have not finished, by audit
	// ID.
	open map[string]openWatch
}

type openWatch struct {
	user    string
	started time.Time
}

func newServerLog(path string) *serverLog {
	return &serverLog{
		tail:   auditTail{path: path},
		total:  map[string]int{},
		recent: map[string][]time.Time{},
		open:   map[string]openWatch{},
	}
}

// update reads the new events and forgets requests older than window
// before now.
func (s *serverLog) update(now time.Time) error {
	reset, err := s.tail.next(s.add)
	if reset {
		// Counted twice otherwise; the demo never truncates a log, so this
		// is someone else's doing.
		clear(s.total)
		clear(s.recent)
		clear(s.open)
		_, err = s.tail.next(s.add)
	}
	cutoff := now.Add(-window)
	for u, ts := range s.recent {
		i := 0
		for i < len(ts) && ts[i].Before(cutoff) {
			i++
		}
		s.recent[u] = ts[i:]
	}
	return err
}

func (s *serverLog) add(e *harness.AuditEvent) {
	if e.IsHealthProbe() {
		return
	}
	u := e.User.Username
	if e.Served() {
		s.total[u]++
		s.recent[u] = append(s.recent[u], e.StageTimestamp)
	}
	if e.Verb != "watch" {
		return
	}
	switch e.Stage {
	case "ResponseStarted":
		s.open[e.AuditID] = openWatch{user: u, started: e.StageTimestamp}
	case "ResponseComplete", "Panic":
		delete(s.open, e.AuditID)
	}
}

// userStats are one user's numbers at one apiserver.
type userStats struct {
	total, recent, watches int
}

// stats sums the users that match. Watches that started before since (the
// current process's start) were ended by the restart, whether or not the
// old process wrote their last event.
func (s *serverLog) stats(match func(string) bool, since time.Time) userStats {
	var out userStats
	for u, n := range s.total {
		if match(u) {
			out.total += n
			out.recent += len(s.recent[u])
		}
	}
	for _, w := range s.open {
		if match(w.user) && !w.started.Before(since) {
			out.watches++
		}
	}
	return out
}
