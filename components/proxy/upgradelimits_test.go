package proxy

import (
	"bufio"
	"io"
	"net/http"
	"testing"

	"github.com/fanout-dev/fanout/components/listener"
	"github.com/fanout-dev/fanout/internal/testkit"
)

// TestUpgradesCountAgainstLimits: an upgraded (hijacked) exec session
// holds a connection slot and a long-running slot until it ends.
func TestUpgradesCountAgainstLimits(t *testing.T) {
	ca := testkit.NewCA(t)
	b := newUpgradeBackend(t, ca, 0)
	lm, _ := listener.NewMetrics(nil)
	rig := newUpgradeRigOn(t, ca, listener.Config{MaxConnections: 1, MaxLongRunning: 1}, lm, Config{}, b.addr)
	longInflight := listenerValue(t, lm, "fanout_downstream_inflight_requests", map[string]string{"kind": "long"})
	connections := listenerValue(t, lm, "fanout_downstream_connections", nil)
	spdy := upgradeRequest{upgrade: "SPDY/3.1", headers: map[string]string{"X-Stream-Protocol-Version": "v4.channel.k8s.io"}}
	c, br, resp := dialUpgrade(t, rig.proxy, spdy)
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("status = %d, want 101", resp.StatusCode)
	}
	echoLine(t, c, br, "hello")
	if got := longInflight(); got != 1 {
		t.Errorf("long-running in flight during an exec session = %v, want 1", got)
	}
	// The session's connection is the only one allowed.
	c2 := testkit.Dial(t, rig.proxy)
	io.WriteString(c2, "GET /api/v1/pods HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	if _, err := http.ReadResponse(bufio.NewReader(c2), nil); err == nil {
		t.Error("a second connection was served while an exec session held the only slot")
	}
	c2.Close()
	if got := listenerValue(t, lm, "fanout_rejected_total", map[string]string{"reason": "connections"})(); got != 1 {
		t.Errorf("fanout_rejected_total{reason=connections} = %v, want 1", got)
	}
	echoLine(t, c, br, "still there")
	// Ending the session frees both slots.
	c.Close()
	testkit.WaitFor(t, "the exec session's slots to be freed", func() bool {
		return connections() == 0 && longInflight() == 0
	})
	c3, br3, resp := dialUpgrade(t, rig.proxy, spdy)
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("after the first session ended: status = %d, want 101", resp.StatusCode)
	}
	echoLine(t, c3, br3, "again")
}
