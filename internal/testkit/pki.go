package testkit

// The test PKI: a CA, serving certificates for TLS test servers and
// client certificates whose subject becomes a Kubernetes user (CN) and
// groups (O).
//
// Keys are ECDSA P-256 because tests create many of them and RSA key
// generation is slow on a loaded machine. Nothing here is fit for
// production use.

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a self-signed certificate authority. Its methods fail the test
// through the testing.TB given to NewCA, so call them from the test's own
// goroutine.
type CA struct {
	tb testing.TB

	// Cert is the CA certificate.
	Cert *x509.Certificate
	// CertPEM is Cert, PEM-encoded: what a kubeconfig's
	// certificate-authority(-data) holds.
	CertPEM []byte
	// Pool holds Cert alone, to verify the certificates the CA signed.
	Pool *x509.CertPool

	key *ecdsa.PrivateKey
}

// KeyPair is a certificate signed by a CA, with its key.
type KeyPair struct {
	// CertPEM and KeyPEM are what client-certificate(-data) and
	// client-key(-data) of a kubeconfig hold.
	CertPEM []byte
	KeyPEM  []byte
	// TLS is the parsed pair, ready for tls.Config.Certificates.
	TLS tls.Certificate
	// Leaf is the parsed certificate.
	Leaf *x509.Certificate
}

// PKI is a CA with a serving certificate for one name and the client
// certificate of "alice" in system:masters: what a test of a client of
// kube-apiserver presents and verifies.
type PKI struct {
	CA      *CA
	Serving KeyPair
	Alice   KeyPair
}

// NewPKI makes a PKI whose serving certificate is for serverName.
func NewPKI(tb testing.TB, serverName string) *PKI {
	ca := NewCA(tb)
	return &PKI{CA: ca, Serving: ca.Serving(serverName), Alice: ca.Client("alice", "system:masters")}
}

// validity keeps test certificates valid across clock skew and long test
// runs, while being obviously not meant to last.
const validity = 24 * time.Hour

// NewCA creates a fresh self-signed CA with the subject CN "testkit CA".
func NewCA(tb testing.TB) *CA {
	tb.Helper()
	key := newKey(tb)
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(tb),
		Subject:               pkix.Name{CommonName: "testkit CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatalf("testkit: create CA certificate: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatalf("testkit: parse CA certificate: %v", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &CA{
		tb:      tb,
		Cert:    cert,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Pool:    pool,
		key:     key,
	}
}

// Serving issues a server certificate for names. A name that parses as an
// IP address becomes an IP SAN, anything else a DNS SAN. The first name is
// also the subject CN.
func (ca *CA) Serving(names ...string) KeyPair {
	ca.tb.Helper()
	if len(names) == 0 {
		ca.tb.Fatalf("testkit: Serving needs at least one name")
	}
	tmpl := ca.template(pkix.Name{CommonName: names[0]})
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	return ca.issue(tmpl)
}

// Client issues a client certificate for the Kubernetes user cn in groups
// orgs (kube-apiserver maps CN to the user name and O to groups).
func (ca *CA) Client(cn string, orgs ...string) KeyPair {
	ca.tb.Helper()
	tmpl := ca.template(pkix.Name{CommonName: cn, Organization: orgs})
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	return ca.issue(tmpl)
}

// ServerTLSConfig returns a TLS config that serves kp and verifies client
// certificates against the CA with the given policy.
func (ca *CA) ServerTLSConfig(kp KeyPair, auth tls.ClientAuthType) *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{kp.TLS},
		ClientCAs:    ca.Pool,
		ClientAuth:   auth,
		MinVersion:   tls.VersionTLS12,
	}
}

func (ca *CA) template(subject pkix.Name) *x509.Certificate {
	now := time.Now()
	return &x509.Certificate{
		SerialNumber: serial(ca.tb),
		Subject:      subject,
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
}

func (ca *CA) issue(tmpl *x509.Certificate) KeyPair {
	ca.tb.Helper()
	key := newKey(ca.tb)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		ca.tb.Fatalf("testkit: sign certificate %q: %v", tmpl.Subject.CommonName, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		ca.tb.Fatalf("testkit: marshal key: %v", err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		ca.tb.Fatalf("testkit: load key pair: %v", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		ca.tb.Fatalf("testkit: parse certificate: %v", err)
	}
	pair.Leaf = leaf
	return KeyPair{CertPEM: certPEM, KeyPEM: keyPEM, TLS: pair, Leaf: leaf}
}

// WriteFile writes data to dir/name with mode 0600 and returns the path.
func WriteFile(tb testing.TB, dir, name string, data []byte) string {
	tb.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		tb.Fatalf("testkit: %v", err)
	}
	if err := os.WriteFile(p, data, 0o600); err != nil {
		tb.Fatalf("testkit: %v", err)
	}
	return p
}

func newKey(tb testing.TB) *ecdsa.PrivateKey {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatalf("testkit: generate key: %v", err)
	}
	return key
}

func serial(tb testing.TB) *big.Int {
	tb.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		tb.Fatalf("testkit: serial number: %v", err)
	}
	return n
}
