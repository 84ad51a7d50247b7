package admin

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fanout-dev/fanout/components/balancer"
)

func snap(reqs ...uint64) Snapshot {
	s := Snapshot{Ready: true}
	for i, r := range reqs {
		s.Endpoints = append(s.Endpoints, balancer.EndpointStatus{
			Address: []string{"10.0.0.1:6443", "10.0.0.2:6443", "10.0.0.3:6443"}[i], State: balancer.StateReady,
			RequestsTotal: r, LatencyScore: 1, ProbeReady: true,
		})
	}
	return s
}

// row returns the table line of addr, split into columns.
func row(t *testing.T, table, addr string) []string {
	t.Helper()
	for _, l := range strings.Split(table, "\n") {
		if strings.HasPrefix(l, addr) {
			return strings.Fields(l)
		}
	}
	t.Fatalf("no row for %s in\n%s", addr, table)
	return nil
}

func TestStatusTable(t *testing.T) {
	stopped := snap(600, 300, 300)
	stopped.Endpoints[1].State = balancer.StateNotReady
	stopped.Endpoints[1].ProbeReady = false
	stopped.Endpoints[1].ErrorsTotal = 4
	before := snap(300, 300, 300)
	before.Endpoints[1].ErrorsTotal = 1
	tests := []struct {
		name      string
		cur       Snapshot
		prev      *Snapshot
		elapsed   time.Duration
		addr      string
		wantCols  []string // STATE SHARE REQUESTS|REQ/S ERRORS
		wantTitle string
	}{
		{name: "since start", cur: snap(100, 100, 200), addr: "10.0.0.3:6443",
			wantCols: []string{"ready", "50.0%", "200", "0"}, wantTitle: "since start"},
		{name: "window shows the move", cur: stopped, prev: &before, elapsed: 2 * time.Second, addr: "10.0.0.1:6443",
			wantCols: []string{"ready", "100.0%", "150.0", "0"}, wantTitle: "last 2s"},
		{name: "window, stopped endpoint", cur: stopped, prev: &before, elapsed: 2 * time.Second, addr: "10.0.0.2:6443",
			wantCols: []string{"not_ready", "0.0%", "0.0", "3"}, wantTitle: "last 2s"},
		{name: "counters went back", cur: snap(10, 10, 20), prev: &before, elapsed: time.Second, addr: "10.0.0.3:6443",
			wantCols: []string{"ready", "50.0%", "20.0", "0"}},
		{name: "no traffic", cur: snap(0, 0, 0), addr: "10.0.0.1:6443",
			wantCols: []string{"ready", "-", "0", "0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			if err := StatusTable(&b, tt.cur, tt.prev, tt.elapsed); err != nil {
				t.Fatal(err)
			}
			cols := row(t, b.String(), tt.addr)
			if got := cols[1:5]; strings.Join(got, " ") != strings.Join(tt.wantCols, " ") {
				t.Errorf("row %v, want state/share/count/errors %v\n%s", cols, tt.wantCols, b.String())
			}
			if !strings.Contains(b.String(), tt.wantTitle) {
				t.Errorf("title lacks %q:\n%s", tt.wantTitle, b.String())
			}
		})
	}
	var b strings.Builder
	_ = StatusTable(&b, stopped, &before, time.Second)
	if !strings.Contains(b.String(), "/readyz failing") {
		t.Errorf("a failing probe is not noted:\n%s", b.String())
	}
}

func TestFetchSnapshot(t *testing.T) {
	want := snap(1, 2, 3)
	st := &fakeState{eps: want.Endpoints}
	st.ready.Store(true)
	srv := httptest.NewServer(NewHandler(st, prometheus.NewRegistry(), nil))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	got, err := FetchSnapshot(context.Background(), srv.Client(), addr)
	if err != nil {
		t.Fatal(err)
	}
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	if string(g) != string(w) {
		t.Errorf("got %s, want %s", g, w)
	}
	// ":port" means the loopback address.
	port := addr[strings.LastIndex(addr, ":"):]
	if _, err := FetchSnapshot(context.Background(), srv.Client(), port); err != nil {
		t.Errorf("%s: %v", port, err)
	}
	for _, bad := range []string{"nonsense", srv.URL} {
		if _, err := FetchSnapshot(context.Background(), srv.Client(), bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	notJSON := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("<html>")) }))
	defer notJSON.Close()
	if _, err := FetchSnapshot(context.Background(), notJSON.Client(), strings.TrimPrefix(notJSON.URL, "http://")); err == nil || !strings.Contains(err.Error(), "not a fanout endpoint snapshot") {
		t.Errorf("HTML answer: err = %v", err)
	}
}
