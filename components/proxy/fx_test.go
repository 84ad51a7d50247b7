package proxy

import (
	"io"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/fanout-dev/fanout/components/balancer"
	"github.com/fanout-dev/fanout/resolver"
)

// TestModule wires the module with the real balancer as Picker and a fake
// Upstream, serves one request, and stops.
func TestModule(t *testing.T) {
	addr, rt := newBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}), false)
	u := newFakeUpstream()
	u.set(addr, rt)
	b, err := balancer.New(balancer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	b.Update([]resolver.Endpoint{{Address: addr}})
	reg := prometheus.NewRegistry()

	var srv *Server
	app := fxtest.New(t,
		Module,
		fx.Supply(Config{ListenAddress: "127.0.0.1:0"}),
		fx.Provide(
			func() Picker { return b },
			func() Upstream { return u },
			func() prometheus.Registerer { return reg },
		),
		fx.Populate(&srv),
	)
	app.RequireStart()
	if srv.Addr() == nil {
		t.Fatal("the server is not listening after OnStart")
	}
	resp, err := newClient(t, false).Get("http://" + srv.Addr().String() + "/api/v1/pods")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "ok" {
		t.Errorf("through the module: %d %q, want 200 ok", resp.StatusCode, body)
	}
	app.RequireStop()
	if n, err := testutil.GatherAndCount(reg, "fanout_requests_total"); err != nil || n != 1 {
		t.Errorf("fanout_requests_total series = %d (%v), want 1 registered through the module", n, err)
	}
	// Done reached the real balancer: nothing is left in flight.
	if st := b.Endpoints(); len(st) != 1 || st[0].InflightShort != 0 || st[0].RequestsTotal != 1 {
		t.Errorf("balancer endpoints = %+v, want one request, finished", st)
	}
}
