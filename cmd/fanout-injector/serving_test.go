package main

import (
	"bytes"
	"crypto/tls"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/fanout-dev/fanout/cmd/fanout-injector/webhook"
	"github.com/fanout-dev/fanout/internal/testkit"
)

// TestServingCertificateReloads runs the injector app and renews its
// serving certificate on disk the way cert-manager does (write, rename
// over): the next TLS handshake must get the new certificate, with no
// restart.
func TestServingCertificateReloads(t *testing.T) {
	ca := testkit.NewCA(t)
	dir := t.TempDir()
	first, second := ca.Serving("fanout-injector.fanout-system.svc"), ca.Serving("fanout-injector.fanout-system.svc")
	o := newOptions()
	o.listenAddress, o.metricsAddress = "127.0.0.1:0", ""
	o.certFile = testkit.WriteFile(t, dir, "tls.crt", first.CertPEM)
	o.keyFile = testkit.WriteFile(t, dir, "tls.key", first.KeyPEM)
	o.sidecar.Image = "fanout:test"
	if err := o.complete(); err != nil {
		t.Fatal(err)
	}
	var srv *webhook.Server
	app := fxtest.New(t, app(o, slog.New(slog.DiscardHandler)), fx.Populate(&srv))
	app.RequireStart()
	defer app.RequireStop()

	served := func() []byte {
		c, err := tls.Dial("tcp", srv.Addr().String(), &tls.Config{RootCAs: ca.Pool, ServerName: "fanout-injector.fanout-system.svc"})
		if err != nil {
			t.Fatalf("TLS to the injector: %v", err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].Raw
	}
	if !bytes.Equal(served(), first.TLS.Certificate[0]) {
		t.Fatal("the injector does not serve its certificate file")
	}
	for name, data := range map[string][]byte{"tls.key": second.KeyPEM, "tls.crt": second.CertPEM} {
		tmp := testkit.WriteFile(t, dir, "."+name+".tmp", data)
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(15 * time.Second)
	for !bytes.Equal(served(), second.TLS.Certificate[0]) {
		if time.Now().After(deadline) {
			t.Fatal("the injector still serves the old certificate 15 s after the files changed")
		}
		time.Sleep(100 * time.Millisecond)
	}
}
