package certs

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
)

func TestModule(t *testing.T) {
	var creds *Credentials
	reg := prometheus.NewPedanticRegistry()
	app := fxtest.New(t,
		Module,
		fx.Supply(&Upstream{Token: Source{Data: []byte("tok")}}),
		fx.Provide(func() prometheus.Registerer { return reg }),
		fx.Populate(&creds),
	)
	app.RequireStart()
	if tok, err := creds.Token(); err != nil || tok != "tok" {
		t.Errorf("Token() = %q, %v; want tok", tok, err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		found = found || mf.GetName() == "fanout_credential_reloads_total"
	}
	if !found {
		t.Error("fanout_credential_reloads_total is not registered")
	}
	app.RequireStop()
}
