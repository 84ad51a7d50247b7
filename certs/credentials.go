package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// tokenRecheck is how often a tokenFile is stat'ed at most. Projected
// service account tokens rotate hours before they expire, so a second of
// staleness costs nothing, while Token runs on every request.
const tokenRecheck = time.Second

// Credentials is the client's identity, read from an Upstream. Its
// methods are safe for concurrent use and never block on I/O for long:
// Token stats its file at most once per tokenRecheck, from one caller at a
// time, while the others get the current value.
type Credentials struct {
	roots *x509.CertPool
	cert  *tls.Certificate

	token     atomic.Pointer[tokenState]
	tokenPath string // "" for an inline token or none
	// refresh is held by the one caller re-checking the token file.
	refresh sync.Mutex
	now     func() time.Time
}

// tokenState is an immutable snapshot of the token and of the file it
// came from.
type tokenState struct {
	value   string
	modTime time.Time
	size    int64
	checked time.Time
}

// NewCredentials reads the CA, the client key pair and the token of u now,
// so that a broken kubeconfig fails at start rather than at the first
// request.
func NewCredentials(u *Upstream) (*Credentials, error) {
	if u == nil {
		return nil, errors.New("certs: NewCredentials needs an Upstream")
	}
	c := &Credentials{now: time.Now, tokenPath: u.Token.Path}
	if u.CA.IsSet() {
		pem, err := u.CA.Read()
		if err != nil {
			return nil, fmt.Errorf("reading certificate-authority: %w", err)
		}
		c.roots = x509.NewCertPool()
		if !c.roots.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("certificate-authority (%s) holds no PEM certificate", u.CA)
		}
	}
	if u.ClientCert.IsSet() {
		certPEM, err := u.ClientCert.Read()
		if err != nil {
			return nil, fmt.Errorf("reading client-certificate: %w", err)
		}
		keyPEM, err := u.ClientKey.Read()
		if err != nil {
			return nil, fmt.Errorf("reading client-key: %w", err)
		}
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("client-certificate (%s) and client-key (%s) are not a usable key pair: %w", u.ClientCert, u.ClientKey, err)
		}
		c.cert = &pair
	}
	st := &tokenState{}
	switch {
	case u.Token.Path != "":
		fi, err := os.Stat(u.Token.Path)
		if err != nil {
			return nil, fmt.Errorf("tokenFile: %w", err)
		}
		v, err := readToken(u.Token.Path)
		if err != nil {
			return nil, err
		}
		st = &tokenState{value: v, modTime: fi.ModTime(), size: fi.Size(), checked: c.now()}
	case len(u.Token.Data) > 0:
		st.value = strings.TrimSpace(string(u.Token.Data))
	}
	c.token.Store(st)
	return c, nil
}

// RootCAs returns the CA pool, or nil for the system roots.
func (c *Credentials) RootCAs() *x509.CertPool { return c.roots }

// ClientCertificate returns the client certificate, or nil for a
// token-only user.
func (c *Credentials) ClientCertificate() (*tls.Certificate, error) { return c.cert, nil }

// Token returns the bearer token, or "" for none. A tokenFile that changed
// (modification time or size) is re-read; if it is unreadable or empty
// the last good token is kept, because a kubelet swapping a projected
// token leaves a moment without a file and the old token is still valid.
func (c *Credentials) Token() (string, error) {
	st := c.token.Load()
	if c.tokenPath == "" || c.now().Sub(st.checked) < tokenRecheck {
		return st.value, nil
	}
	// Whoever loses the race serves the current value rather than wait
	// for the file system.
	if !c.refresh.TryLock() {
		return st.value, nil
	}
	defer c.refresh.Unlock()
	st = c.refreshToken(c.token.Load())
	return st.value, nil
}

func (c *Credentials) refreshToken(old *tokenState) *tokenState {
	now := c.now()
	if now.Sub(old.checked) < tokenRecheck {
		return old
	}
	next := *old
	next.checked = now
	// os.Stat follows symlinks, so a Kubernetes volume's ..data symlink
	// swap shows as a new modification time of the target.
	if fi, err := os.Stat(c.tokenPath); err == nil && (!fi.ModTime().Equal(old.modTime) || fi.Size() != old.size) {
		if v, err := readToken(c.tokenPath); err == nil {
			next.value, next.modTime, next.size = v, fi.ModTime(), fi.Size()
		}
	}
	c.token.Store(&next)
	return &next
}

func readToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading tokenFile: %w", err)
	}
	v := strings.TrimSpace(string(b))
	if v == "" {
		return "", fmt.Errorf("tokenFile %s is empty", path)
	}
	return v, nil
}
