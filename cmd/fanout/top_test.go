package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fanout-dev/fanout/cmd/internal/admincli"
)

// costSnapshot is /debug/cost as docs/cost.md describes it, the n-th time it
// is read: 2 s of server time apart, with the replicaset controller's
// LISTs at 50/s (p99 in the 0.1-0.25 s bucket), a kubelet's GETs at 10/s
// with a 5xx each second, and an "other" row.
func costSnapshot(n int) map[string]any {
	since := time.Date(2026, 12, 4, 3, 0, 0, 0, time.UTC)
	buckets := func(fast, slow int) []map[string]any {
		var b []map[string]any
		cum := 0
		for i, le := range []any{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, "+Inf"} {
			switch i {
			case 0:
				cum += fast
			case 5:
				cum += slow
			}
			b = append(b, map[string]any{"le": le, "count": cum})
		}
		return b
	}
	row := func(comp, verb, group, res, scope string, requests, fiveXX, fast, slow, received, watches int) map[string]any {
		return map[string]any{
			"component": comp, "verb": verb, "group": group, "resource": res, "subresource": "", "scope": scope,
			"requests": requests, "errors": map[string]int{"4xx": 0, "5xx": fiveXX, "failed": 0}, "retries": 0,
			"latency_seconds": map[string]any{"count": fast + slow, "sum": 0.2 * float64(slow), "buckets": buckets(fast, slow)},
			"bytes_sent":      0, "bytes_received": received, "watches_open": watches, "watch_events": 0,
		}
	}
	return map[string]any{
		"since": since, "now": since.Add(time.Duration(2*n) * time.Second), "capacity": 1000, "evictions": 3,
		"rows": []any{
			row("kube-controller-manager/replicaset-controller", "list", "apps", "replicasets", "namespaced", 100*n, 0, 0, 100*n, 1<<20*n, 0),
			row("kubelet", "get", "", "nodes", "cluster", 20*n, 2*n, 20*n, 0, 1000*n, 2),
			row("other", "", "", "", "", 7, 0, 7, 0, 0, 0),
		},
	}
}

// adminServer serves /debug/cost (costSnapshot, one more each read) and
// /debug/endpoints, or answers code to /debug/cost.
func adminServer(t *testing.T, code int, cost func(n int) map[string]any) string {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/debug/cost":
			if code != http.StatusOK {
				http.Error(w, "no", code)
				return
			}
			_ = json.NewEncoder(w).Encode(cost(int(calls.Add(1))))
		case "/debug/endpoints":
			n := uint64(calls.Load())
			_ = json.NewEncoder(w).Encode(map[string]any{"ready": true, "endpoints": []map[string]any{
				{"address": "10.0.0.1:6443", "state": "ready", "requests_total": 90 * n, "probe_ready": true, "latency_score": 1},
				{"address": "10.0.0.2:6443", "state": "ejected", "requests_total": 30 * n, "probe_ready": true, "latency_score": 3},
			}})
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func TestTopOnce(t *testing.T) {
	addr := adminServer(t, http.StatusOK, costSnapshot)
	var out, errs strings.Builder
	// No screen (stdout is a pipe): one table without --once.
	if code := runTop(context.Background(), []string{"--admin-address", addr, "--interval", "100ms", "--sort", "errors"}, &out, &errs, nil); code != 0 {
		t.Fatalf("exit %d, stderr %s", code, errs.String())
	}
	got := out.String()
	t.Logf("fanout top --sort errors:\n%s", got)
	for _, want := range []string{
		"sorted by errors/s, rates over the last 2s",
		"apiserver 10.0.0.1:6443  ready    share 75.0%  45.0 req/s",
		"apiserver 10.0.0.2:6443  ejected  share 25.0%  15.0 req/s",
		"2 keys of 1000, 3 evicted",
		// Errors first: the kubelet at 10/s with 1 error/s (10%), p99 in
		// the first bucket; then the controller at 50/s, 512 KiB/s, p99
		// 0.1 + 0.15 * 0.99.
		"kubelet                                       get  nodes            cluster    10.0   1.00  10.0%       0     500       0   5.0ms       2      0",
		"kube-controller-manager/replicaset-controller list apps/replicasets ns         50.0      0   0.0%       0 512.0Ki       0   248ms       0      0",
		// other did not change: 0/s
		"other                                                               -             0      0      -",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if i, j := strings.Index(got, "kubelet "), strings.Index(got, "kube-controller-manager/"); i > j {
		t.Errorf("not sorted by errors:\n%s", got)
	}
}

func TestTopJSON(t *testing.T) {
	addr := adminServer(t, http.StatusOK, costSnapshot)
	var out, errs strings.Builder
	// On a terminal, -o json is one result too.
	open := func() (*admincli.Screen, error) { t.Error("-o json opened the screen"); return nil, fmt.Errorf("no") }
	if code := runTop(context.Background(), []string{"--admin-address", addr, "--interval", "100ms", "-o", "json"}, &out, &errs, open); code != 0 {
		t.Fatalf("exit %d, stderr %s", code, errs.String())
	}
	var got struct {
		IntervalSeconds float64 `json:"interval_seconds"`
		Rows            []struct {
			Component  string
			Resource   string
			Rates      map[string]*float64
			Cumulative struct {
				Requests      int
				BytesReceived int `json:"bytes_received"`
			}
		}
		Endpoints []struct {
			Address string
			Share   float64
		}
	}
	if err := json.Unmarshal([]byte(out.String()), &got); err != nil {
		t.Fatalf("%v:\n%s", err, out.String())
	}
	if got.IntervalSeconds != 2 || len(got.Rows) != 3 || len(got.Endpoints) != 2 {
		t.Fatalf("unexpected JSON:\n%s", out.String())
	}
	r := got.Rows[0]
	if r.Component != "kube-controller-manager/replicaset-controller" || *r.Rates["requests_per_second"] != 50 ||
		*r.Rates["received_bytes_per_second"] != 1<<19 || r.Cumulative.Requests != 200 || r.Cumulative.BytesReceived != 2<<20 {
		t.Errorf("first row %+v, want the replicaset controller at 50/s, 512 KiB/s, 200 requests so far", r)
	}
	if p99 := r.Rates["p99_seconds"]; p99 == nil || *p99 < 0.2484 || *p99 > 0.2486 {
		t.Errorf("p99 %v, want 0.2485", p99)
	}
	if got.Endpoints[0].Address != "10.0.0.1:6443" || got.Endpoints[0].Share != 0.75 {
		t.Errorf("endpoints %+v, want 10.0.0.1:6443 at 75%%", got.Endpoints)
	}
}

func TestTopErrors(t *testing.T) {
	off := func(n int) map[string]any {
		return map[string]any{"since": time.Now(), "now": time.Now(), "capacity": 0, "rows": []any{}}
	}
	tests := []struct {
		name string
		addr string
		args []string
		code int
		msg  string
	}{
		{"unreachable", "127.0.0.1:1", nil, 1, "connection refused (is fanout running with --admin-address 127.0.0.1:1?)"},
		{"not loopback", adminServer(t, http.StatusForbidden, costSnapshot), nil, 1, "loopback clients only; run fanout top in the pod: kubectl exec"},
		{"older fanout", adminServer(t, http.StatusNotFound, costSnapshot), nil, 1, "no cost table (a version older than fanout top, or the table is off)"},
		{"table off", adminServer(t, http.StatusOK, off), nil, 1, "the cost table is off (fanout runs with --cost-table-size 0)"},
		{"bad address", "nonsense", nil, 1, "expected host:port"},
		{"short interval", "", []string{"--interval", "1ms"}, 2, "--interval 1ms is too short"},
		{"bad output", "", []string{"-o", "yaml"}, 2, `--output "yaml": expected table or json`},
		{"bad sort", "", []string{"--sort", "cpu"}, 2, `--sort "cpu": expected one of requests, bytes, p99, errors`},
		{"extra", "", []string{"extra"}, 2, "unexpected arguments"},
		{"unknown flag", "", []string{"--bogus"}, 2, "unknown flag"},
		{"help", "", []string{"--help"}, 0, "Keys: r sort by requests/s, b by bytes/s, p by p99, e by errors/s; q or Ctrl-C quits"},
	}
	for _, tt := range tests {
		args := tt.args
		if tt.addr != "" {
			args = append(args, "--admin-address", tt.addr)
		}
		var out, errs strings.Builder
		code := runTop(context.Background(), args, &out, &errs, nil)
		checkExit(t, tt.name, code, out.String(), errs.String(), tt.code, tt.msg)
	}
}

// screenWriter collects frames and hands each to frames.
type screenWriter struct {
	frames chan string
}

func (s *screenWriter) Write(p []byte) (int, error) {
	s.frames <- string(p)
	return len(p), nil
}

// TestTopLive drives the live table with key presses: each redraws the
// table at once in its sort, q ends it and the terminal is restored.
func TestTopLive(t *testing.T) {
	addr := adminServer(t, http.StatusOK, costSnapshot)
	keys, press := io.Pipe()
	restored := make(chan struct{})
	scr := &admincli.Screen{Keys: keys, Raw: true, Size: func() (int, int) { return 120, 9 }, Restore: func() { close(restored) }}
	w := &screenWriter{frames: make(chan string)}
	done := make(chan int, 1)
	go func() {
		done <- runTop(context.Background(), []string{"--admin-address", addr, "--interval", "1h"}, w, io.Discard, func() (*admincli.Screen, error) { return scr, nil })
	}()
	next := func(want string) {
		t.Helper()
		select {
		case f := <-w.frames:
			if !strings.HasPrefix(f, "\x1b[H\x1b[2J") || !strings.Contains(f, want) || strings.Contains(f, "\n") != strings.Contains(f, "\r\n") {
				t.Fatalf("frame lacks %q, home and clear, or CRLF in raw mode:\n%q", want, f)
			}
			// 6 header lines, the titles and 3 rows do not fit 9 lines:
			// the last row is summed up.
			if n := strings.Count(f, "\r\n"); n != 9 || !strings.Contains(f, "... 2 more rows") {
				t.Errorf("%d lines on a 9-line screen, or no summary line:\n%s", n, f)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no frame with %q", want)
		}
	}
	next("averaged since the table started") // the first look, before any tick
	next2 := func(key, want string) {
		t.Helper()
		go func() { _, _ = press.Write([]byte(key)) }()
		next(want)
	}
	next2("b", "sorted by bytes/s")
	next2("p", "sorted by p99")
	next2("e", "sorted by errors/s")
	next2("r", "sorted by requests/s")
	go func() { _, _ = press.Write([]byte("q")) }()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("q: exit %d", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("q did not end fanout top")
	}
	select {
	case <-restored:
	default:
		t.Error("the terminal was not restored")
	}
}

// TestTopLiveSignal: without keys (stdin not a terminal) the header says
// so, and a signal (the context ending) restores the terminal and exits 0.
func TestTopLiveSignal(t *testing.T) {
	addr := adminServer(t, http.StatusOK, costSnapshot)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	restored := make(chan struct{})
	scr := &admincli.Screen{Size: func() (int, int) { return 0, 0 }, Restore: func() { close(restored) }}
	w := &screenWriter{frames: make(chan string, 1)}
	done := make(chan int, 1)
	go func() {
		done <- runTop(ctx, []string{"--admin-address", addr, "--interval", "1h"}, w, io.Discard, func() (*admincli.Screen, error) { return scr, nil })
	}()
	select {
	case f := <-w.frames:
		if !strings.Contains(f, "no keys: stdin is not a terminal (use kubectl exec -it); Ctrl-C quits") || strings.Contains(f, "\r\n") {
			t.Errorf("frame lacks the no-keys hint, or has CRLF out of raw mode:\n%s", f)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no frame")
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("exit %d after the signal", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the signal did not end fanout top")
	}
	select {
	case <-restored:
	default:
		t.Error("the terminal was not restored")
	}
}

// TestTopStream: --once=false into a pipe appends one table per interval,
// each after a "--- time" line and over the interval before it.
func TestTopStream(t *testing.T) {
	addr := adminServer(t, http.StatusOK, costSnapshot)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errs strings.Builder
	w := &notifyWriter{w: &out, each: func(n int) {
		if n == 4 { // two separators, two tables
			cancel()
		}
	}}
	if code := runTop(ctx, []string{"--admin-address", addr, "--interval", "100ms", "--once=false"}, w, &errs, nil); code != 0 {
		t.Fatalf("exit %d, stderr %s", code, errs.String())
	}
	tables := strings.Split(out.String(), "--- ")[1:]
	if len(tables) != 2 {
		t.Fatalf("%d tables, want 2:\n%s", len(tables), out.String())
	}
	for _, tb := range tables {
		if !strings.Contains(tb, "rates over the last 2s") {
			t.Errorf("table not over the interval:\n%s", tb)
		}
	}
}
