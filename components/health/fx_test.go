package health

import (
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
)

func TestModule(t *testing.T) {
	k := newPKI(t)
	srv := newAPIServer(t, k)
	s := newSink()
	reg := prometheus.NewRegistry()
	var p *Prober
	app := fxtest.New(t, Module,
		fx.Supply(Config{}, slog.New(slog.DiscardHandler)),
		fx.Provide(
			func() Upstream { return newTransports(t, k) },
			func() Sink { return s },
			func() prometheus.Registerer { return reg },
		),
		fx.Populate(&p),
	).RequireStart()
	p.Update(eps(srv.addr()))
	if !s.next(t, srv.addr()) {
		t.Error("reported not ready")
	}
	if n, err := testutil.GatherAndCount(reg, "fanout_endpoint_probe_total"); err != nil || n != 1 {
		t.Errorf("probe_total series = %d (%v), want 1", n, err)
	}
	app.RequireStop()
}
