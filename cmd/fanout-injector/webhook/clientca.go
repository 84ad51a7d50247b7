package webhook

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// ClientCASource supplies the CAs that verify webhook callers' client
// certificates, for each TLS handshake: it is called concurrently and must
// not block for long.
type ClientCASource interface {
	ClientCAs() *x509.CertPool
}

// ClientCAFile is a PEM CA bundle read from a file (--client-ca-file) and
// re-read when it changes, checked at most once a second from the TLS
// handshakes themselves: a stat, and a read only when the file is another
// one (a secret volume's ..data swap, an atomic rename) or its size or
// modification time changed. A bundle that does not parse keeps the last
// good one in use and is logged. Methods are safe for concurrent use.
type ClientCAFile struct {
	path    string
	log     *slog.Logger
	pool    atomic.Pointer[x509.CertPool]
	mu      sync.Mutex // held by the one handshake that checks the file
	checked time.Time
	info    os.FileInfo // of the bundle in use
	bad     os.FileInfo // of the last file that did not parse, logged once
}

// clientCARecheck is how often the file is looked at, at most.
const clientCARecheck = time.Second

// NewClientCAFile reads path now and fails if it holds no certificate,
// so that a misconfigured injector fails at start. A nil log discards.
func NewClientCAFile(path string, log *slog.Logger) (*ClientCAFile, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	f := &ClientCAFile{path: path, log: log}
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("--client-ca-file: %w", err)
	}
	pool, err := readCABundle(path)
	if err != nil {
		return nil, err
	}
	f.pool.Store(pool)
	f.info, f.checked = info, time.Now()
	return f, nil
}

// ClientCAs returns the current pool, after looking at the file if a
// second has passed since the last look and no other handshake is
// looking.
func (f *ClientCAFile) ClientCAs() *x509.CertPool {
	if f.mu.TryLock() {
		if now := time.Now(); now.Sub(f.checked) >= clientCARecheck {
			f.checked = now
			f.recheckLocked()
		}
		f.mu.Unlock()
	}
	return f.pool.Load()
}

func (f *ClientCAFile) recheckLocked() {
	info, err := os.Stat(f.path)
	if err != nil {
		f.log.Error("the client CA file is gone; keeping the CAs in use", "client_ca_file", f.path, "error", err)
		return
	}
	if sameFile(info, f.info) || sameFile(info, f.bad) {
		return
	}
	pool, err := readCABundle(f.path)
	if err != nil {
		// A half-written file is read again once its size or time
		// changes.
		f.bad = info
		f.log.Error("reloading the client CA file failed; keeping the CAs in use", "client_ca_file", f.path, "error", err)
		return
	}
	f.info, f.bad = info, nil
	f.pool.Store(pool)
	f.log.Info("reloaded the client CA file", "client_ca_file", f.path)
}

func sameFile(a, b os.FileInfo) bool {
	return b != nil && os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}

func readCABundle(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--client-ca-file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--client-ca-file %s holds no PEM certificate; expected the CA bundle that signs kube-apiserver's webhook client certificate", path)
	}
	return pool, nil
}

// errNoClientCert and errBadClientCert end a handshake without a usable
// client certificate.
var (
	errNoClientCert  = errors.New("fanout-injector requires a client certificate (--client-ca-file): give kube-apiserver one for this webhook in its --admission-control-config-file kubeconfig")
	errBadClientCert = errors.New("fanout-injector: the client certificate is not signed by a CA of --client-ca-file")
)

// verifyClient is a tls.Config.VerifyConnection for ClientAuth
// tls.RequestClientCert: it does what tls.RequireAndVerifyClientCert does
// (the chain verified for client authentication up to a CA of src, as of
// now), against the CAs current at this handshake, and counts refusals.
// It runs on resumed sessions too, so a CA taken out of the bundle stops
// them as well.
func verifyClient(src ClientCASource, m *Metrics) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			m.reject(RejectClientCertificate)
			return errNoClientCert
		}
		opts := x509.VerifyOptions{
			Roots:         src.ClientCAs(),
			Intermediates: x509.NewCertPool(),
			KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}
		for _, c := range cs.PeerCertificates[1:] {
			opts.Intermediates.AddCert(c)
		}
		if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
			m.reject(RejectClientCertificate)
			return fmt.Errorf("%w: %v", errBadClientCert, err)
		}
		return nil
	}
}
