package sidecar

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestReportInsecure(t *testing.T) {
	tests := []struct {
		name        string
		listen      string
		allowRemote bool
		allowShared bool
		listenTLS   bool
		want        string
	}{
		{"loopback", "127.0.0.1:7080", false, false, false, ""},
		{"loopback with the flag set anyway", "127.0.0.1:7080", true, false, false, ""},
		{"remote", "0.0.0.0:7080", true, false, false, "allow-remote"},
		{"pod IP", "10.1.2.3:7080", true, false, false, "allow-remote"},
		{"shared loopback", "127.0.0.1:7080", false, true, false, "allow-shared-loopback"},
		{"shared loopback over TLS", "127.0.0.1:7080", false, true, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := NewConfig()
			o.Listener.ListenAddress, o.Listener.AllowAnyHost, o.AllowSharedLoopback, o.ListenTLS = tt.listen, tt.allowRemote, tt.allowShared, tt.listenTLS
			var logs bytes.Buffer
			reg := prometheus.NewRegistry()
			if err := reportInsecure(o, slog.New(slog.NewTextHandler(&logs, nil)), reg); err != nil {
				t.Fatal(err)
			}
			if tt.want != "" {
				want := "# HELP fanout_insecure_option " + insecureHelp + "\n# TYPE fanout_insecure_option gauge\nfanout_insecure_option{option=\"" + tt.want + "\"} 1\n"
				if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "fanout_insecure_option"); err != nil {
					t.Errorf("metrics: %v", err)
				}
			} else if n, err := testutil.GatherAndCount(reg, "fanout_insecure_option"); err != nil || n != 0 {
				t.Errorf("fanout_insecure_option has %d series (%v), want none", n, err)
			}
			warned := strings.Contains(logs.String(), "level=WARN") && strings.Contains(logs.String(), "INSECURE")
			if warned != (tt.want != "") {
				t.Errorf("warning logged = %v, want %v: %s", warned, tt.want != "", logs.String())
			}
		})
	}
}
