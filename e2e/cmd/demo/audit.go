package main

import (
	"time"

	"github.com/fanout-dev/fanout/e2e/harness"
)

// window is how far back "recent requests" look: long enough for a steady
// share, short enough that a change (an apiserver gone, a connection
// moved) shows within seconds.
const window = 30 * time.Second

// serverLog is what one apiserver's audit log says, per user, read
// incrementally (harness.AuditTail) because the table is redrawn every few
// seconds for as long as the demo runs.
type serverLog struct {
	tail harness.AuditTail
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
		tail:   harness.AuditTail{Path: path},
		total:  map[string]int{},
		recent: map[string][]time.Time{},
		open:   map[string]openWatch{},
	}
}

// update reads the new events and forgets requests older than window
// before now.
func (s *serverLog) update(now time.Time) error {
	reset, err := s.tail.Next(s.add)
	if reset {
		// Counted twice otherwise; the demo never truncates a log, so this
		// is someone else's doing.
		clear(s.total)
		clear(s.recent)
		clear(s.open)
		_, err = s.tail.Next(s.add)
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
