package e2e_test

import (
	"bufio"
	"context"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fanout-dev/fanout/e2e/harness"
)

// statusTable is one table printed by `fanout status --watch`.
type statusTable struct {
	at    time.Time
	state map[string]string  // endpoint address → state column
	share map[string]float64 // endpoint address → share column, percent; absent for "-"
}

// statusWatch runs `fanout status --watch` against a sidecar's admin
// address, as an operator would, and keeps every table it prints.
type statusWatch struct {
	cmd    *exec.Cmd
	done   chan struct{}
	mu     sync.Mutex
	tables []statusTable
}

func startStatusWatch(ctx context.Context, t *testing.T, cp *harness.ControlPlane, f *harness.Fanout) *statusWatch {
	t.Helper()
	bin, err := harness.FanoutBinary(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := &statusWatch{done: make(chan struct{})}
	s.cmd = exec.CommandContext(ctx, bin, "status", "--watch", "--interval", "1s", "--admin-address", f.AdminAddress)
	out, err := s.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	s.cmd.Stderr = &stderr
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go s.read(out)
	t.Cleanup(func() {
		s.stop()
		if t.Failed() && stderr.Len() > 0 {
			t.Logf("fanout status stderr:\n%s", stderr.String())
		}
	})
	return s
}

// read parses the non-terminal output: "--- <time>", a title, a header,
// then one row per endpoint.
func (s *statusWatch) read(r io.Reader) {
	defer close(s.done)
	sc := bufio.NewScanner(r)
	var cur *statusTable
	flush := func() {
		if cur != nil && len(cur.state) > 0 {
			s.mu.Lock()
			s.tables = append(s.tables, *cur)
			s.mu.Unlock()
		}
	}
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "--- ") {
			flush()
			cur = &statusTable{at: time.Now(), state: map[string]string{}, share: map[string]float64{}}
			continue
		}
		f := strings.Fields(line)
		if cur == nil || len(f) < 3 || !strings.Contains(f[0], ":") || f[0] == "ENDPOINT" {
			continue
		}
		cur.state[f[0]] = f[1]
		if v, err := strconv.ParseFloat(strings.TrimSuffix(f[2], "%"), 64); err == nil {
			cur.share[f[0]] = v
		}
	}
	flush()
}

func (s *statusWatch) stop() {
	if s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
	}
	<-s.done
	_ = s.cmd.Wait()
}

// between returns the tables printed in [from, to].
func (s *statusWatch) between(from, to time.Time) []statusTable {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []statusTable
	for _, tb := range s.tables {
		if !tb.at.Before(from) && !tb.at.After(to) {
			out = append(out, tb)
		}
	}
	return out
}

// checkStatusFollowsRestart checks what an operator watching `fanout status
// --watch` saw while the victim apiserver restarted: its share while it was
// serving, none of the traffic (and a state other than ready) from the stop
// until it was ready again, and a share again once it was back.
func checkStatusFollowsRestart(t *testing.T, s *statusWatch, victim string, stopAt, readyAt, end time.Time) {
	t.Helper()
	s.stop()
	before := s.between(stopAt.Add(-4*time.Second), stopAt)
	// Allow fanout a probe interval and the status a refresh to notice.
	down := s.between(stopAt.Add(4*time.Second), readyAt)
	after := s.between(end.Add(-5*time.Second), end)
	t.Logf("fanout status --watch printed %d tables before the stop, %d while down, %d at the end", len(before), len(down), len(after))
	if len(before) == 0 || len(down) == 0 || len(after) == 0 {
		t.Fatalf("fanout status --watch printed too few tables (%d, %d, %d): it does not refresh every second", len(before), len(down), len(after))
	}
	if sh := before[len(before)-1].share[victim]; sh < 10 {
		t.Errorf("before the stop fanout status showed %s with a %.1f%% share; want a third or so", victim, sh)
	}
	moved := false
	for _, tb := range down {
		if tb.state[victim] != "ready" && tb.share[victim] == 0 {
			moved = true
			var others []string
			for a, sh := range tb.share {
				if a != victim {
					others = append(others, a+"="+strconv.FormatFloat(sh, 'f', 1, 64)+"%")
				}
			}
			t.Logf("while %s was down fanout status showed it %s with 0%% and the others %s", victim, tb.state[victim], strings.Join(others, " "))
			break
		}
	}
	if !moved {
		t.Errorf("while %s was down, no table of fanout status --watch showed it out of service with no share: %+v", victim, down)
	}
	if sh := after[len(after)-1].share[victim]; sh <= 0 {
		t.Errorf("after the restart fanout status showed %s with a %.1f%% share; want traffic back", victim, sh)
	}
}
