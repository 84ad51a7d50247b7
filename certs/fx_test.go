package certs

import (
	"testing"

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
)

func TestModule(t *testing.T) {
	var creds *Credentials
	app := fxtest.New(t,
		Module,
		fx.Supply(&Upstream{Token: Source{Data: []byte("tok")}}),
		fx.Populate(&creds),
	)
	app.RequireStart()
	if tok, err := creds.Token(); err != nil || tok != "tok" {
		t.Errorf("Token() = %q, %v; want tok", tok, err)
	}
	app.RequireStop()
}
