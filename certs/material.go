package certs

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"time"
)

// parseCABundle returns the pool of every certificate in data and the
// earliest NotAfter among them.
func parseCABundle(data []byte) (*x509.CertPool, time.Time, error) {
	if err := pemComplete(data); err != nil {
		return nil, time.Time{}, err
	}
	pool := x509.NewCertPool()
	var earliest time.Time
	n := 0
	for rest := data; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, time.Time{}, fmt.Errorf("certificate %d of the bundle does not parse: %w", n+1, err)
		}
		pool.AddCert(c)
		if earliest.IsZero() || c.NotAfter.Before(earliest) {
			earliest = c.NotAfter
		}
		n++
	}
	if n == 0 {
		return nil, time.Time{}, errors.New("holds no PEM certificate")
	}
	return pool, earliest, nil
}

// parseKeyPair loads a certificate (chain) and its key, which must match.
func parseKeyPair(certPEM, keyPEM []byte) (*tls.Certificate, error) {
	if err := pemComplete(certPEM); err != nil {
		return nil, fmt.Errorf("certificate: %w", err)
	}
	if err := pemComplete(keyPEM); err != nil {
		return nil, fmt.Errorf("key: %w", err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	if pair.Leaf == nil {
		// Only with GODEBUG x509keypairleaf=0.
		if pair.Leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, err
		}
	}
	return &pair, nil
}

// pemComplete rejects data with a PEM block that has a BEGIN line but no
// END line: a file caught half-written, whose complete blocks would
// otherwise load silently without the rest (a CA bundle missing its new
// CA, a chain missing its intermediate).
func pemComplete(data []byte) error {
	rest := data
	for {
		b, r := pem.Decode(rest)
		if b == nil {
			break
		}
		rest = r
	}
	if bytes.Contains(rest, []byte("-----BEGIN")) {
		return errors.New("truncated PEM: a block has no END line (file still being written?)")
	}
	return nil
}

// renewalDue reports whether c is past renewAt of its lifetime at now.
func renewalDue(c *x509.Certificate, now time.Time) bool {
	life := c.NotAfter.Sub(c.NotBefore)
	return now.After(c.NotBefore.Add(time.Duration(float64(life) * renewAt)))
}

// seen remembers the content last read from one source, good or bad, so
// that unchanged content is neither parsed, counted nor logged again: a
// broken file costs one log line and one failure, not one per poll.
type seen struct {
	sum [sha256.Size]byte
	set bool
	// err is what the content last seen failed with, nil if it was good.
	err error
}

// update records content and reports whether it differs from the last.
func (s *seen) update(content ...[]byte) bool {
	h := sha256.New()
	for _, c := range content {
		// Length-prefixed, so that moving bytes from the certificate to
		// the key is a change.
		fmt.Fprintf(h, "%d:", len(c))
		h.Write(c)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	if s.set && sum == s.sum {
		return false
	}
	s.sum, s.set = sum, true
	return true
}
