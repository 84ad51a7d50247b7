package balancer

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
)

func TestModule(t *testing.T) {
	var b *Balancer
	reg := prometheus.NewRegistry()
	fxtest.New(t,
		Module,
		fx.Supply(Config{}),
		fx.Provide(func() prometheus.Registerer { return reg }),
		fx.Populate(&b),
	).RequireStart().RequireStop()

	if b == nil {
		t.Fatal("module provided no balancer")
	}
	b.Update(endpoints("a:1"))
	if n, err := testutil.GatherAndCount(reg, "fanout_endpoints"); err != nil || n != 4 {
		t.Errorf("registered collector: %d fanout_endpoints series (err %v), want 4 (one per state)", n, err)
	}
}

func TestModuleRejectsInvalidConfig(t *testing.T) {
	app := fx.New(
		Module,
		fx.Supply(Config{Policy: "random"}),
		fx.Provide(func() prometheus.Registerer { return prometheus.NewRegistry() }),
		fx.NopLogger,
		fx.Invoke(func(*Balancer) {}),
	)
	if err := app.Err(); err == nil {
		t.Error("fx app built with an invalid policy")
	}
}
