package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// ServingCertificate is a TLS serving key pair read from two files (a
// certificate, with its chain, and its key) and reloaded when they
// change, for a server such as the injector's webhook:
//
//	sc, err := certs.NewServingCertificate(certFile, keyFile, certs.Options{Log: log, Metrics: m})
//	if err != nil { ... }                  // the files are not a usable pair now
//	if err := sc.Start(); err != nil { ... } // watch; fx.StartStopHook(sc.Start, sc.Stop)
//	defer sc.Stop()
//	srv.TLSConfig = &tls.Config{GetCertificate: sc.GetCertificate}
//
// Each TLS handshake gets the current pair, so a rotated certificate is
// served from the next connection on. A pair that does not load (a file
// missing or half-written, a key that does not match the certificate
// yet) keeps the last good one in use; the failure is logged once,
// counted as fanout_credential_reloads_total{kind="serving",
// result="failure"} and retried every second. Cert-manager, kubelet
// secret volumes (the ..data symlink swap) and atomic renames are all
// seen through the watch of the files' directories, with polling as a
// fallback. Methods are safe for concurrent use.
type ServingCertificate struct {
	certFile, keyFile string
	opts              Options
	cert              atomic.Pointer[tls.Certificate]
	watcher           *watcher

	mu          sync.Mutex // serialises reloads
	kp          seen
	renewWarned *x509.Certificate
}

// NewServingCertificate reads the pair now and fails if it is not usable,
// so that a misconfigured server fails at start. certFile and keyFile
// are both required.
func NewServingCertificate(certFile, keyFile string, opts Options) (*ServingCertificate, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("certs: a serving certificate needs both a certificate file and a key file")
	}
	s := &ServingCertificate{certFile: certFile, keyFile: keyFile, opts: opts.withDefaults()}
	if _, err := s.load(); err != nil {
		return nil, err
	}
	s.opts.Metrics.track(KindServing)
	s.watcher = newWatcher(s.opts, s.check)
	return s, nil
}

// GetCertificate returns the current pair; it is a
// tls.Config.GetCertificate. It never fails once constructed.
func (s *ServingCertificate) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return s.cert.Load(), nil
}

// Start watches the files until Stop. It does not block and never fails
// over the files themselves; it fails only if called twice or after Stop.
func (s *ServingCertificate) Start() error { return s.watcher.Start() }

// Stop ends the watching and waits for it; the pair in use keeps being
// served. It is idempotent.
func (s *ServingCertificate) Stop() { s.watcher.Stop() }

func (s *ServingCertificate) check() checkResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := checkResult{files: []string{s.certFile, s.keyFile}}
	changed, err := s.load()
	switch {
	case err != nil:
		r.failing = true
		if changed {
			s.opts.Metrics.reloaded(KindServing, false)
			s.opts.Log.Error("reloading the serving certificate failed; keeping the last good one and retrying",
				"kind", KindServing, "cert_file", s.certFile, "key_file", s.keyFile, "error", err)
		}
	case changed:
		c := s.cert.Load()
		s.opts.Metrics.reloaded(KindServing, true)
		s.opts.Log.Info("reloaded the serving certificate", "kind", KindServing, "cert_file", s.certFile,
			"subject", c.Leaf.Subject.String(), "not_after", c.Leaf.NotAfter)
	}
	if c := s.cert.Load(); c.Leaf != s.renewWarned && renewalDue(c.Leaf, time.Now()) {
		s.renewWarned = c.Leaf
		s.opts.Log.Warn("the serving certificate is past 80% of its lifetime and its files hold no newer one; renew it",
			"kind", KindServing, "cert_file", s.certFile, "not_after", c.Leaf.NotAfter)
	}
	return r
}

// load reads both files and takes the pair in use if it changed and is
// valid.
func (s *ServingCertificate) load() (changed bool, err error) {
	certPEM, certErr := os.ReadFile(s.certFile)
	keyPEM, keyErr := os.ReadFile(s.keyFile)
	content := append(contentOrError(certPEM, certErr), contentOrError(keyPEM, keyErr)...)
	if !s.kp.update(content...) {
		return false, s.kp.err
	}
	defer func() { s.kp.err = err }()
	switch {
	case certErr != nil:
		return true, fmt.Errorf("reading the serving certificate: %w", certErr)
	case keyErr != nil:
		return true, fmt.Errorf("reading the serving key: %w", keyErr)
	}
	pair, err := parseKeyPair(certPEM, keyPEM)
	if err != nil {
		return true, fmt.Errorf("serving certificate %s and key %s are not a usable key pair: %w", s.certFile, s.keyFile, err)
	}
	s.cert.Store(pair)
	s.opts.Metrics.expires(KindServing, pair.Leaf.NotAfter)
	return true, nil
}
