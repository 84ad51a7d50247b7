package transport

import (
	"context"
	"crypto/tls"
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fanout-dev/fanout/internal/h2conn"
	"github.com/fanout-dev/fanout/internal/reqinfo"
	"github.com/fanout-dev/fanout/internal/testkit"
)

// TestAutoAnswerWindowBudget: auto is a 128th of the Go memory limit
// within [1 MiB, 64 MiB], 64 MiB without a limit; New makes a budget of
// the size asked and exports its limit, none with a negative size, and
// probes given one share it.
func TestAutoAnswerWindowBudget(t *testing.T) {
	for _, tc := range []struct {
		limit, want int64
	}{
		{241591910, 1887436}, // --memory-limit auto under 256Mi: 1.8 MiB
		{64 << 20, MinAutoAnswerWindowBudget},
		{16 << 30, DefaultAnswerWindowBudget},
		{math.MaxInt64, DefaultAnswerWindowBudget},
	} {
		if got := AutoAnswerWindowBudget(tc.limit); got != tc.want {
			t.Errorf("AutoAnswerWindowBudget(%d) = %d, want %d", tc.limit, got, tc.want)
		}
	}

	creds := newCreds(testkit.NewPKI(t, serverName).CA.Pool, nil, "")
	tr, err := New(Config{ServerName: serverName, AnswerWindowBudget: 3 << 20}, creds)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if b := tr.WindowBudget(); b == nil || b.Limit() != 3<<20 || testutil.ToFloat64(tr.metrics.windowsLimit) != 3<<20 {
		t.Errorf("budget %v, limit gauge %v; want 3 MiB both", b, testutil.ToFloat64(tr.metrics.windowsLimit))
	}
	probes, err := New(Config{ServerName: serverName, WindowBudget: tr.WindowBudget()}, creds)
	if err != nil {
		t.Fatal(err)
	}
	defer probes.Close()
	if probes.WindowBudget() != tr.WindowBudget() {
		t.Error("Transports given a budget made one of their own")
	}
	off, err := New(Config{ServerName: serverName, AnswerWindowBudget: -1}, creds)
	if err != nil {
		t.Fatal(err)
	}
	defer off.Close()
	if off.WindowBudget() != nil || off.cfg.conn().WindowBudget != nil {
		t.Error("a negative AnswerWindowBudget still made a budget")
	}
}

// TestShortRequestsStartWithALargerWindow: a short request's stream
// takes its larger starting window from the answer window budget as it
// opens (h2conn's RoundTripShort), a watch's does not; both give back all
// when their bodies close.
func TestShortRequestsStartWithALargerWindow(t *testing.T) {
	p := testkit.NewPKI(t, serverName)
	srv := newH2Server(t, p, tls.RequireAndVerifyClientCert, 0, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	tr := newTransports(t, Config{AnswerWindowBudget: 1 << 20}, newCreds(p.CA.Pool, &p.Alice.TLS, ""))
	for _, tc := range []struct {
		path string
		want int64
	}{
		{"/api/v1/namespaces/default/configmaps", h2conn.DefaultShortAnswerWindow - h2conn.DefaultMinReceiveBufferPerStream},
		{"/api/v1/namespaces/default/configmaps?watch=true", 0},
	} {
		req := testkit.NewRequest(t, context.Background(), srv.addr, tc.path)
		ctx, _ := reqinfo.WithRequest(req.Context(), reqinfo.New(req), time.Now())
		res, err := tr.For(srv.addr, AuthSidecar).RoundTrip(req.WithContext(ctx))
		if err != nil {
			t.Fatal(err)
		}
		// The window is granted with the request's HEADERS, before the
		// answer's.
		if got := tr.WindowBudget().Used(); got != tc.want {
			t.Errorf("GET %s: %d bytes of the budget taken as the stream opened, want %d", tc.path, got, tc.want)
		}
		res.Body.Close()
		if got := tr.WindowBudget().Used(); got != 0 {
			t.Errorf("GET %s: %d bytes of the budget held after the body closed, want 0", tc.path, got)
		}
	}
}
