package main

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/fanout-dev/fanout/e2e/harness"
)

// view is everything one frame of the table shows.
type view struct {
	elapsed time.Duration
	// keys is true when the demo reads single keys from the terminal.
	keys bool
	// status is what the rolling restart does now ("" when none runs).
	status  string
	servers []serverView
	clients []clientView
	// extra are lines a panel below the table adds (the -node hook).
	extra  []string
	events []event
}

type serverView struct {
	addr string
	// phase is the process's (up, stopping, down, starting); fanout is
	// the state fanout's /debug/endpoints reports for it.
	phase, fanout string
}

type clientView struct {
	label, note string
	// per holds the client's numbers at each apiserver, in order.
	per []userStats
	// counts are the client's own counters; nil for a client the demo
	// only sees in the audit logs.
	counts *counts
}

const (
	labelWidth = 22
	cellWidth  = 18
)

// render lays the frame out in lines of at most about 80 columns.
func render(v view) []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	keys := "Ctrl-C: stop and clean up"
	if v.keys {
		keys = "r: rolling restart · q or Ctrl-C: stop and clean up"
	}
	add("fanout demo · %s · %s", v.elapsed.Truncate(time.Second), keys)
	if v.status != "" {
		add("%s", v.status)
	} else {
		add("")
	}
	add("")
	row := func(label string, cell func(i int) string) {
		var b strings.Builder
		fmt.Fprintf(&b, "%-*s", labelWidth, label)
		for i := range v.servers {
			fmt.Fprintf(&b, "%-*s", cellWidth, cell(i))
		}
		out = append(out, strings.TrimRight(b.String(), " "))
	}
	row("", func(i int) string { return fmt.Sprintf("apiserver %d", i+1) })
	row("address (port 6443)", func(i int) string { return v.servers[i].addr })
	row("process", func(i int) string { return v.servers[i].phase })
	row("fanout's view of it", func(i int) string { return v.servers[i].fanout })
	for _, c := range v.clients {
		add("")
		add("%s", strings.TrimRight(fmt.Sprintf("%-*s%s", labelWidth, c.label, c.note), " "))
		recent := make([]int, len(c.per))
		for i, s := range c.per {
			recent[i] = s.recent
		}
		shares := harness.Shares(recent)
		row(fmt.Sprintf(" requests, last %s", window), func(i int) string {
			return fmt.Sprintf("%5d %3.0f%% %s", recent[i], 100*shares[i], bar(shares[i], 5))
		})
		row(" watches open", func(i int) string { return fmt.Sprintf("%5d", c.per[i].watches) })
		if c.counts != nil {
			add(" %d requests sent · %d failed · %d re-lists · %d watch errors",
				c.counts.sent, c.counts.failed, c.counts.relists, c.counts.watchErrors)
		}
	}
	if len(v.extra) > 0 {
		add("")
		out = append(out, v.extra...)
	}
	add("")
	add("Requests and watches per apiserver are counted in each kube-apiserver's own audit log.")
	if len(v.events) > 0 {
		add("")
		add("events")
		for _, e := range v.events {
			add(" %s", e.String())
		}
	}
	return out
}

// bar draws share (0 to 1) in width characters.
func bar(share float64, width int) string {
	n := min(max(int(share*float64(width)+0.5), 0), width)
	return strings.Repeat("#", n) + strings.Repeat(".", width-n)
}

// event is one line of the events panel.
type event struct {
	at   time.Time
	key  string
	text string
	// repeats counts further occurrences folded into this line.
	repeats int
}

func (e event) String() string {
	s := e.at.Format("15:04:05") + " " + e.text
	if e.repeats > 0 {
		s += fmt.Sprintf(" (and %d more like it)", e.repeats)
	}
	return s
}

// events is the demo's log, shown under the table. Without a terminal
// (plain is set) each event is also printed as it happens.
type events struct {
	mu    sync.Mutex
	list  []event
	plain io.Writer
}

// shown is how many events the panel lists, newest last.
const shown = 8

func (l *events) add(format string, args ...any) { l.addKeyed("", format, args...) }

// addKeyed adds an event that repeat can fold later events into.
func (l *events) addKeyed(key, format string, args ...any) {
	e := event{at: time.Now(), key: key, text: fmt.Sprintf(format, args...)}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.list = append(l.list, e)
	if len(l.list) > 100 {
		l.list = append([]event(nil), l.list[len(l.list)-shown:]...)
	}
	if l.plain != nil {
		fmt.Fprintf(l.plain, "demo: %s\n", e.String())
	}
}

// repeat counts one more occurrence of the newest event with key.
func (l *events) repeat(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := len(l.list) - 1; i >= 0; i-- {
		if l.list[i].key == key {
			l.list[i].repeats++
			return
		}
	}
}

func (l *events) last() []event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]event(nil), l.list[max(len(l.list)-shown, 0):]...)
}
