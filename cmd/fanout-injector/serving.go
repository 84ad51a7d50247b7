package main

import (
	"crypto/tls"
	"fmt"

	"github.com/fanout-dev/fanout/components/injector"
)

// servingCertificate is THE place where the webhook's serving certificate
// source is chosen. For now the key pair is read once at start, so a
// renewed certificate takes a restart; a hot-reloading source from certs/
// plugs in here, as any injector.CertificateSource does.
func servingCertificate(certFile, keyFile string) (injector.CertificateSource, error) {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert-file %s and --tls-private-key-file %s: %w", certFile, keyFile, err)
	}
	return staticCertificate{&pair}, nil
}

// staticCertificate serves one key pair for ever.
type staticCertificate struct{ pair *tls.Certificate }

func (s staticCertificate) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return s.pair, nil
}
