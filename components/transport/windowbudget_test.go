package transport

import (
	"math"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
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

	creds := newCreds(newPKI(t).ca.Pool, nil, "")
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
