package main

import (
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
	admissionv1client "k8s.io/client-go/kubernetes/typed/admissionregistration/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/fanout-dev/fanout/certs"
	"github.com/fanout-dev/fanout/cmd/fanout-injector/pki"
	"github.com/fanout-dev/fanout/cmd/fanout-injector/webhook"
)

// Values of --pki.
const (
	pkiFiles = "files"
	pkiSelf  = "self"
)

// servingCertificate is the webhook's serving certificate, from files or
// made by the injector (--pki). Its expiry is exported as
// fanout_certificate_expiration_timestamp_seconds{kind="serving"}.
func servingCertificate(lc fx.Lifecycle, o *options, log *slog.Logger, reg prometheus.Registerer) (webhook.CertificateSource, error) {
	m := certs.NewMetrics()
	if err := reg.Register(m); err != nil {
		return nil, err
	}
	if o.pki == pkiSelf {
		return selfSignedCertificate(lc, o, log, reg, m)
	}
	return fileCertificate(lc, o, log, m)
}

// fileCertificate loads the webhook's key pair and keeps it current:
// certs.ServingCertificate watches both files (secret-volume symlink
// swaps, atomic renames, polling as a fallback), serves a renewed pair
// from the next TLS handshake on, and keeps the last good pair while a
// new one is half-written. A pair that is unusable at start fails the
// start. Reloads are counted as
// fanout_credential_reloads_total{kind="serving"}.
func fileCertificate(lc fx.Lifecycle, o *options, log *slog.Logger, m *certs.Metrics) (webhook.CertificateSource, error) {
	sc, err := certs.NewServingCertificate(o.certFile, o.keyFile, certs.Options{Log: log, Metrics: m})
	if err != nil {
		return nil, fmt.Errorf("--tls-cert-file %s and --tls-private-key-file %s: %w", o.certFile, o.keyFile, err)
	}
	lc.Append(fx.StartStopHook(sc.Start, sc.Stop))
	return sc, nil
}

// serviceAccountNamespace is where the kubelet puts the pod's namespace
// with its token.
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// selfSignedCertificate runs a pki.Manager with the pod's ServiceAccount.
// Its first synchronisation is in OnStart, before the webhook listens, so
// that the webhook serves from its first handshake on; the CA's expiry is
// kind="ca" of the same gauge.
func selfSignedCertificate(lc fx.Lifecycle, o *options, log *slog.Logger, reg prometheus.Registerer, expiry *certs.Metrics) (webhook.CertificateSource, error) {
	cfg, err := inClusterConfig("--pki=self")
	if err != nil {
		return nil, err
	}
	ns := o.pkiNamespace
	if ns == "" {
		b, err := os.ReadFile(serviceAccountNamespace)
		if err != nil {
			return nil, fmt.Errorf("--pki=self: reading the pod's namespace: %w; pass --pki-namespace", err)
		}
		ns = strings.TrimSpace(string(b))
	}
	core, err := corev1client.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	admission, err := admissionv1client.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	met, err := pki.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	m, err := pki.New(pki.Config{
		Namespace:            ns,
		SecretName:           o.pkiSecret,
		WebhookConfiguration: o.webhookConfig,
		DNSNames:             []string{o.pkiService + "." + ns + ".svc"},
		Log:                  log,
		Metrics:              met,
		Expiry:               expiry,
	}, core, admission)
	if err != nil {
		return nil, err
	}
	lc.Append(fx.Hook{OnStart: m.Start, OnStop: m.Stop})
	return m, nil
}
