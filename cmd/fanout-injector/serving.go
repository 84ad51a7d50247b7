package main

import (
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"

	"github.com/fanout-dev/fanout/certs"
	"github.com/fanout-dev/fanout/cmd/fanout-injector/webhook"
)

// servingCertificate loads the webhook's key pair and keeps it current:
// certs.ServingCertificate watches both files (secret-volume symlink
// swaps, atomic renames, polling as a fallback), serves a renewed pair
// from the next TLS handshake on, and keeps the last good pair while a
// new one is half-written. A pair that is unusable at start fails the
// start. Its expiry and reloads are exported as
// fanout_certificate_expiration_timestamp_seconds{kind="serving"} and
// fanout_credential_reloads_total{kind="serving"}.
func servingCertificate(lc fx.Lifecycle, o *options, log *slog.Logger, reg prometheus.Registerer) (webhook.CertificateSource, error) {
	m := certs.NewMetrics()
	if err := reg.Register(m); err != nil {
		return nil, err
	}
	sc, err := certs.NewServingCertificate(o.certFile, o.keyFile, certs.Options{Log: log, Metrics: m})
	if err != nil {
		return nil, fmt.Errorf("--tls-cert-file %s and --tls-private-key-file %s: %w", o.certFile, o.keyFile, err)
	}
	lc.Append(fx.StartStopHook(sc.Start, sc.Stop))
	return sc, nil
}
