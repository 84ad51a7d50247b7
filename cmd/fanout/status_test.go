package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestStatusWatch runs `fanout status --watch` against an admin server
// whose second endpoint stops taking requests after the first snapshot:
// the second table must show the share moving to the others.
func TestStatusWatch(t *testing.T) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/debug/endpoints" {
			http.NotFound(w, r)
			return
		}
		n := uint64(calls.Add(1)) // 1, 2, 3...
		eps := []map[string]any{
			{"address": "10.0.0.1:6443", "state": "ready", "requests_total": 100 * n, "probe_ready": true, "latency_score": 1},
			{"address": "10.0.0.2:6443", "state": "not_ready", "requests_total": 100, "probe_ready": false, "latency_score": 1},
			{"address": "10.0.0.3:6443", "state": "ready", "requests_total": 100 * n, "probe_ready": true, "latency_score": 1},
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"ready": true, "endpoints": eps})
	}))
	defer srv.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errs strings.Builder
	done := make(chan int)
	w := &notifyWriter{w: &out, each: func(n int) {
		if n == 3 {
			cancel()
		}
	}}
	go func() {
		done <- runStatus(ctx, []string{"--admin-address", strings.TrimPrefix(srv.URL, "http://"), "--watch", "--interval", "100ms"}, w, &errs, false)
	}()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d, stderr %s", code, errs.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("status --watch did not stop when its context ended")
	}
	tables := strings.Split(out.String(), "--- ")[1:]
	if len(tables) < 3 {
		t.Fatalf("%d tables, want 3:\n%s", len(tables), out.String())
	}
	if !strings.Contains(tables[0], "since start") || !strings.Contains(tables[0], "33.3%") {
		t.Errorf("first table should count since start, evenly:\n%s", tables[0])
	}
	for _, want := range []string{"last ", "10.0.0.2:6443  not_ready  0.0%", "10.0.0.1:6443  ready      50.0%"} {
		if !strings.Contains(tables[1], want) {
			t.Errorf("second table lacks %q:\n%s", want, tables[1])
		}
	}
}

func TestStatusErrors(t *testing.T) {
	tests := []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"--admin-address", "127.0.0.1:1"}, 1, "connection refused"},
		{[]string{"--admin-address", "nonsense"}, 1, "expected host:port"},
		{[]string{"--watch", "--interval", "1ms"}, 2, "too short"},
		{[]string{"extra"}, 2, "unexpected arguments"},
		{[]string{"--bogus"}, 2, "unknown flag"},
		{[]string{"--help"}, 0, "Usage: fanout status"},
	}
	for _, tt := range tests {
		var out, errs strings.Builder
		code := runStatus(context.Background(), tt.args, &out, &errs, false)
		checkExit(t, fmt.Sprint(tt.args), code, out.String(), errs.String(), tt.code, tt.msg)
	}
}

// checkExit fails t unless a subcommand's run, named what, exited with
// want and wrote msg where that exit goes: --help (exit 0) to stdout,
// errors to stderr, and nothing to the other stream.
func checkExit(t *testing.T, what string, code int, stdout, stderr string, want int, msg string) {
	t.Helper()
	got, other := stderr, stdout
	if want == 0 {
		got, other = other, got
	}
	if code != want || !strings.Contains(got, msg) || other != "" {
		t.Errorf("%s: exit %d, stdout %q, stderr %q; want %d and %q", what, code, stdout, stderr, want, msg)
	}
}

// notifyWriter calls each with the number of writes so far.
type notifyWriter struct {
	w    *strings.Builder
	n    int
	each func(int)
}

func (n *notifyWriter) Write(p []byte) (int, error) {
	k, err := n.w.Write(p)
	n.n++
	n.each(n.n)
	return k, err
}
