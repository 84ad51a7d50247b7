package engine

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/fanout-dev/fanout/components/balancer"
)

func TestLogTransitions(t *testing.T) {
	ep := func(addr, until string) balancer.EndpointStatus {
		return balancer.EndpointStatus{Address: addr, State: balancer.StateReady, EjectedUntil: until}
	}
	tests := []struct {
		name      string
		prev, cur []balancer.EndpointStatus
		want      []string // one entry per expected line
	}{
		{"nothing changes", []balancer.EndpointStatus{ep("a:1", "")}, []balancer.EndpointStatus{ep("a:1", "")}, nil},
		{"ejected", []balancer.EndpointStatus{ep("a:1", "")}, []balancer.EndpointStatus{ep("a:1", "T1")},
			[]string{`msg="endpoint ejected: no new requests until the deadline" endpoint=a:1 until=T1`}},
		{"ejected again", []balancer.EndpointStatus{ep("a:1", "T1")}, []balancer.EndpointStatus{ep("a:1", "T2")},
			[]string{`endpoint=a:1 until=T2`}},
		{"still ejected", []balancer.EndpointStatus{ep("a:1", "T1")}, []balancer.EndpointStatus{ep("a:1", "T1")}, nil},
		{"back", []balancer.EndpointStatus{ep("a:1", "T1"), ep("b:1", "")}, []balancer.EndpointStatus{ep("a:1", ""), ep("b:1", "")},
			[]string{`msg="endpoint back from ejection" endpoint=a:1 state=ready`}},
		{"new endpoints are the resolver's to log", nil, []balancer.EndpointStatus{ep("a:1", "T1")}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			logTransitions(slog.New(slog.NewTextHandler(&buf, nil)), tt.prev, tt.cur)
			lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
			if buf.Len() == 0 {
				lines = nil
			}
			if len(lines) != len(tt.want) {
				t.Fatalf("logged %d lines, want %d:\n%s", len(lines), len(tt.want), buf.String())
			}
			for i, w := range tt.want {
				if !strings.Contains(lines[i], w) {
					t.Errorf("line %q lacks %q", lines[i], w)
				}
			}
		})
	}
}
