package pki

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"time"
)

// Keys of the Secret. ca is the CA that signs the serving certificate;
// ca-next, while present, is its successor, already trusted but not yet
// signing; ca-previous is the CA it replaced, trusted until it expires so
// that a replica still serving a certificate it signed stays valid.
const (
	keyCACert         = "ca.crt"
	keyCAKey          = "ca.key"
	keyNextCACert     = "ca-next.crt"
	keyNextCAKey      = "ca-next.key"
	keyPreviousCACert = "ca-previous.crt"
	keyServingCert    = "tls.crt"
	keyServingKey     = "tls.key"
)

// backdate is taken off every NotBefore, for clocks behind ours.
const backdate = time.Hour

// keyPair is a certificate with its key, as PEM and parsed.
type keyPair struct {
	certPEM, keyPEM []byte
	cert            *x509.Certificate
	key             crypto.Signer
}

// material is what the Secret holds, parsed. A zero keyPair (cert nil) is
// absent or unusable.
type material struct {
	ca, next keyPair
	previous *x509.Certificate
	prevPEM  []byte
	serving  keyPair
}

// change is one thing plan did, for logs and metrics.
type change string

const (
	changeCACreated    change = "created the CA"
	changeCAReplaced   change = "replaced an unusable or expired CA"
	changeNextCA       change = "created the next CA (trusted, not yet signing)"
	changeCAPromoted   change = "promoted the next CA to signing"
	changePreviousGone change = "dropped the expired previous CA"
	changeServing      change = "issued a serving certificate"
)

// timing is the lifetimes and the points of rotation.
type timing struct {
	caValidity, servingValidity time.Duration
}

// caRotateAt: a next CA is made at 80% of the signing CA's lifetime.
func caRotateAt(c *x509.Certificate) time.Time { return at(c, 4, 5) }

// promoteAt: the next CA signs from a tenth of its own lifetime after it
// was made (about 90% of its predecessor's), so that every kube-apiserver
// has long trusted it before a certificate it signed is served.
func promoteAt(next *x509.Certificate) time.Time { return at(next, 1, 10) }

// servingRenewAt: the serving certificate is renewed at 2/3 of its
// lifetime.
func servingRenewAt(c *x509.Certificate) time.Time { return at(c, 2, 3) }

func at(c *x509.Certificate, num, den int64) time.Time {
	return c.NotBefore.Add(c.NotAfter.Sub(c.NotBefore) / time.Duration(den) * time.Duration(num))
}

// parse reads what it can of data; unusable entries stay zero and are
// replaced by plan.
func parse(data map[string][]byte) (material, []error) {
	var m material
	var errs []error
	var err error
	if m.ca, err = parsePair(data, keyCACert, keyCAKey); err != nil {
		errs = append(errs, err)
	}
	if m.next, err = parsePair(data, keyNextCACert, keyNextCAKey); err != nil {
		errs = append(errs, err)
	}
	if p := data[keyPreviousCACert]; len(p) > 0 {
		if c, err := parseCert(p); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", keyPreviousCACert, err))
		} else {
			m.previous, m.prevPEM = c, p
		}
	}
	if m.serving, err = parsePair(data, keyServingCert, keyServingKey); err != nil {
		errs = append(errs, err)
	}
	return m, errs
}

func parsePair(data map[string][]byte, certKey, keyKey string) (keyPair, error) {
	c, k := data[certKey], data[keyKey]
	if len(c) == 0 && len(k) == 0 {
		return keyPair{}, nil
	}
	pair, err := tls.X509KeyPair(c, k)
	if err != nil {
		return keyPair{}, fmt.Errorf("%s and %s: %w", certKey, keyKey, err)
	}
	signer, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return keyPair{}, fmt.Errorf("%s: the key cannot sign", keyKey)
	}
	return keyPair{certPEM: c, keyPEM: k, cert: pair.Leaf, key: signer}, nil
}

func parseCert(p []byte) (*x509.Certificate, error) {
	b, _ := pem.Decode(p)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate")
	}
	return x509.ParseCertificate(b.Bytes)
}

// data is m as the Secret's data.
func (m material) data() map[string][]byte {
	d := map[string][]byte{
		keyCACert: m.ca.certPEM, keyCAKey: m.ca.keyPEM,
		keyServingCert: m.serving.certPEM, keyServingKey: m.serving.keyPEM,
	}
	if m.next.cert != nil {
		d[keyNextCACert], d[keyNextCAKey] = m.next.certPEM, m.next.keyPEM
	}
	if m.previous != nil {
		d[keyPreviousCACert] = m.prevPEM
	}
	return d
}

// bundle is the caBundle: the signing CA, its successor and its
// predecessor, in that order, so that every replica computes the same
// bytes from the same Secret.
func (m material) bundle() []byte {
	var b bytes.Buffer
	b.Write(m.ca.certPEM)
	b.Write(m.next.certPEM)
	b.Write(m.prevPEM)
	return b.Bytes()
}

// plan returns m brought up to date at now, and what it changed. It is
// deterministic but for the keys it generates: two replicas that plan on
// the same Secret at about the same time make the same changes, and the
// Secret's resourceVersion lets one of them write.
func plan(m material, now time.Time, t timing, dnsNames []string) (material, []change, error) {
	var changes []change
	var err error
	if m.ca.cert == nil || !now.Before(m.ca.cert.NotAfter) {
		c := changeCACreated
		if m.ca.cert != nil || m.serving.cert != nil {
			c = changeCAReplaced
		}
		if m.ca, err = newCA(now, t.caValidity); err != nil {
			return m, nil, err
		}
		m.next, m.serving = keyPair{}, keyPair{}
		changes = append(changes, c)
	}
	if m.previous != nil && !now.Before(m.previous.NotAfter) {
		m.previous, m.prevPEM = nil, nil
		changes = append(changes, changePreviousGone)
	}
	if m.next.cert != nil && !now.Before(m.next.cert.NotAfter) {
		m.next = keyPair{}
	}
	if m.next.cert == nil && !now.Before(caRotateAt(m.ca.cert)) {
		if m.next, err = newCA(now, t.caValidity); err != nil {
			return m, nil, err
		}
		changes = append(changes, changeNextCA)
	}
	if m.next.cert != nil && !now.Before(promoteAt(m.next.cert)) {
		m.previous, m.prevPEM = m.ca.cert, m.ca.certPEM
		m.ca, m.next = m.next, keyPair{}
		changes = append(changes, changeCAPromoted)
	}
	if servingDue(m.serving, m.ca.cert, now, dnsNames) {
		if m.serving, err = newServing(m.ca, now, t.servingValidity, dnsNames); err != nil {
			return m, nil, err
		}
		changes = append(changes, changeServing)
	}
	return m, changes, nil
}

func servingDue(s keyPair, ca *x509.Certificate, now time.Time, dnsNames []string) bool {
	return s.cert == nil ||
		s.cert.CheckSignatureFrom(ca) != nil ||
		!now.Before(servingRenewAt(s.cert)) ||
		!slices.Equal(s.cert.DNSNames, dnsNames)
}

func newCA(now time.Time, validity time.Duration) (keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return keyPair{}, fmt.Errorf("generating a CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "fanout-injector CA " + now.UTC().Format("2006-01-02T15:04:05Z")},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	return sign(tmpl, tmpl, key, key)
}

// newServing issues a certificate for dnsNames signed by ca; it expires
// with ca at the latest.
func newServing(ca keyPair, now time.Time, validity time.Duration, dnsNames []string) (keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return keyPair{}, fmt.Errorf("generating a serving key: %w", err)
	}
	notAfter := now.Add(validity)
	if ca.cert.NotAfter.Before(notAfter) {
		notAfter = ca.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: dnsNames[0]},
		NotBefore:   now.Add(-backdate),
		NotAfter:    notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    dnsNames,
	}
	return sign(tmpl, ca.cert, key, ca.key)
}

func sign(tmpl, parent *x509.Certificate, key *ecdsa.PrivateKey, parentKey crypto.Signer) (keyPair, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return keyPair{}, err
	}
	tmpl.SerialNumber = serial
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		return keyPair{}, fmt.Errorf("signing %q: %w", tmpl.Subject.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return keyPair{}, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return keyPair{}, err
	}
	return keyPair{
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
		cert:    cert,
		key:     key,
	}, nil
}
