package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
)

func TestModule(t *testing.T) {
	p := newPKI(t)
	srv := newH2Server(t, p, tls.RequireAndVerifyClientCert, 0, echoHandler())
	reg := prometheus.NewPedanticRegistry()
	var tr *Transports
	app := fxtest.New(t,
		Module,
		fx.Supply(
			Config{ServerName: serverName},
			fx.Annotate(newCreds(p.ca.Pool, &p.alice.TLS, ""), fx.As(new(Credentials))),
			fx.Annotate(reg, fx.As(new(prometheus.Registerer))),
		),
		fx.Populate(&tr),
	)
	app.RequireStart()
	if _, err := roundTrip(tr.For(srv.addr, AuthSidecar), newRequest(t, context.Background(), srv.addr, "/")); err != nil {
		t.Fatalf("RoundTrip: %v", err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	for _, n := range []string{"fanout_upstream_dials_total", "fanout_upstream_connections", "fanout_upstream_tls_handshake_seconds"} {
		if !names[n] {
			t.Errorf("metric %s not registered", n)
		}
	}
	app.RequireStop()
	if _, err := roundTrip(tr.For(srv.addr, AuthSidecar), newRequest(t, context.Background(), srv.addr, "/")); !errors.Is(err, ErrClosed) {
		t.Errorf("request after stop: %v, want ErrClosed", err)
	}
}

func TestModuleRejectsBadConfig(t *testing.T) {
	app := fx.New(
		Module,
		fx.NopLogger,
		fx.Supply(
			Config{},
			fx.Annotate(newCreds(nil, nil, ""), fx.As(new(Credentials))),
			fx.Annotate(prometheus.NewRegistry(), fx.As(new(prometheus.Registerer))),
		),
	)
	if err := app.Err(); err == nil {
		t.Fatal("the module accepted a Config without ServerName")
	}
}
