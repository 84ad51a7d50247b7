package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"time"
)

// LocalCA is the key material of the loopback listener in --listen-tls
// mode: a CA made at start and kept in memory only, a serving certificate
// for the loopback names, and the one client certificate the listener
// accepts. Whoever holds the client key (the written kubeconfig) can use
// the listener; other processes sharing loopback cannot.
//
// A LocalCA is immutable once made and safe for concurrent use.
type LocalCA struct {
	// CertPEM is the CA certificate, for the client's
	// certificate-authority-data.
	CertPEM []byte
	// ClientCertPEM and ClientKeyPEM are the client's credentials, for
	// client-certificate-data and client-key-data.
	ClientCertPEM []byte
	ClientKeyPEM  []byte

	serving tls.Certificate
	pool    *x509.CertPool
}

// localCAValidity is how long the certificates are valid. A new CA is made
// at every start, so it only has to outlive one run of the sidecar.
const localCAValidity = 10 * 365 * 24 * time.Hour

// LocalClientName is the common name of the client certificate.
const LocalClientName = "fanout-loopback-client"

// NewLocalCA makes a CA and the serving and client certificates, all
// ECDSA P-256. host is the listener's host: an IP is added to the serving
// certificate's IP SANs, next to 127.0.0.1, ::1 and localhost.
func NewLocalCA(host string, now time.Time) (*LocalCA, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating the loopback CA key: %w", err)
	}
	notBefore, notAfter := now.Add(-time.Hour), now.Add(localCAValidity)
	caTmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "fanout loopback CA"},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, caCert, err := signLocal(caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("self-signing the loopback CA: %w", err)
	}

	servingTmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "fanout loopback listener"},
		NotBefore:   notBefore,
		NotAfter:    notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	if ip := net.ParseIP(host); ip != nil && !ip.Equal(net.IPv4(127, 0, 0, 1)) && !ip.Equal(net.IPv6loopback) {
		servingTmpl.IPAddresses = append(servingTmpl.IPAddresses, ip)
	}
	servingKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating the loopback serving key: %w", err)
	}
	servingDER, _, err := signLocal(servingTmpl, caCert, &servingKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("issuing the loopback serving certificate: %w", err)
	}

	clientTmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: LocalClientName},
		NotBefore:   notBefore,
		NotAfter:    notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	clientKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating the loopback client key: %w", err)
	}
	clientDER, _, err := signLocal(clientTmpl, caCert, &clientKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("issuing the loopback client certificate: %w", err)
	}
	clientKeyDER, err := x509.MarshalECPrivateKey(clientKey)
	if err != nil {
		return nil, fmt.Errorf("encoding the loopback client key: %w", err)
	}

	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	// caKey goes out of scope here: nothing more is ever signed.
	return &LocalCA{
		CertPEM:       pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		ClientCertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: clientDER}),
		ClientKeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: clientKeyDER}),
		serving: tls.Certificate{
			Certificate: [][]byte{servingDER, caDER},
			PrivateKey:  servingKey,
		},
		pool: pool,
	}, nil
}

// ServerTLSConfig is the listener's TLS configuration: the serving
// certificate, TLS 1.3 only (both ends are this pod's; nothing old needs
// serving), and a client certificate from this CA required during the
// handshake. Each call returns a new Config the caller may modify.
func (ca *LocalCA) ServerTLSConfig() *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{ca.serving},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    ca.pool,
		MinVersion:   tls.VersionTLS13,
	}
}

// Pool is a pool holding only the CA, for clients and tests.
func (ca *LocalCA) Pool() *x509.CertPool { return ca.pool.Clone() }

func signLocal(tmpl, parent *x509.Certificate, pub *ecdsa.PublicKey, signer *ecdsa.PrivateKey) ([]byte, *x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, err
	}
	tmpl.SerialNumber = serial
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	return der, cert, nil
}
