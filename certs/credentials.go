package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
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

// reloadMinInterval bounds how often Reload re-reads the files: a burst
// of 401s (a revoked certificate) must not turn into a burst of reads.
const reloadMinInterval = time.Second

// Credentials is the client's identity, read from an Upstream and kept
// current: between Start and Stop the kubeconfig and the files it names
// (CA bundle, client certificate and key, tokenFile) are watched and
// re-read when they change. Its methods are safe for concurrent use.
// RootCAs, ClientCertificate and Token are on the request path and take
// no lock: they load immutable snapshots that reloads replace whole.
//
// A file that is missing, truncated or invalid never replaces good
// material: the last good one stays in use, the failure is logged once
// and counted, and the file is re-read every second until it is good.
type Credentials struct {
	// roots is nil for the system roots.
	roots atomic.Pointer[x509.CertPool]
	cert  atomic.Pointer[tls.Certificate]
	token atomic.Pointer[tokenState]
	// refresh is held by whoever re-reads the token file: one request at
	// a time (the others serve the current value) or the watcher.
	refresh sync.Mutex

	opts    Options
	watcher *watcher

	// mu serialises reloads; it is never taken on the request path.
	mu  sync.Mutex
	up  *Upstream
	kc  seen // the kubeconfig file
	ca  seen
	kp  seen // client certificate and key, read together
	tok seen
	// lastReload is when Reload last re-read the files.
	lastReload time.Time
	// renewWarned is the client certificate already logged as due for
	// renewal.
	renewWarned *x509.Certificate
}

// tokenState is an immutable snapshot of the token and of the file it
// came from.
type tokenState struct {
	value   string
	path    string // "" for an inline token or none
	modTime time.Time
	size    int64
	checked time.Time
}

// NewCredentials reads the CA, the client key pair and the token of u now,
// so that a broken kubeconfig fails at start rather than at the first
// request. It logs to slog.Default and counts nothing; see
// NewCredentialsWithOptions.
func NewCredentials(u *Upstream) (*Credentials, error) {
	return NewCredentialsWithOptions(u, Options{})
}

// NewCredentialsWithOptions is NewCredentials with a logger, metrics and
// timings for the watcher that Start runs.
func NewCredentialsWithOptions(u *Upstream, opts Options) (*Credentials, error) {
	if u == nil {
		return nil, errors.New("certs: NewCredentials needs an Upstream")
	}
	opts = opts.withDefaults()
	c := &Credentials{opts: opts, up: u}
	c.token.Store(&tokenState{})
	if u.Kubeconfig != "" {
		// Remember what was loaded, so that the first check does not
		// see a change. Unreadable now means it is re-read later.
		data, err := os.ReadFile(u.Kubeconfig)
		c.kc.update(contentOrError(data, err)...)
	}
	if _, err := c.loadCA(); err != nil {
		return nil, err
	}
	if _, err := c.loadKeyPair(); err != nil {
		return nil, err
	}
	if _, err := c.loadToken(); err != nil {
		return nil, err
	}
	for _, k := range []string{KindKubeconfig, KindCA, KindClient, KindToken} {
		opts.Metrics.track(k)
	}
	c.watcher = newWatcher(opts, c.check)
	return c, nil
}

// Start watches the files until Stop. It never fails over the files
// themselves: a directory that cannot be watched is polled.
func (c *Credentials) Start() error { return c.watcher.Start() }

// Stop ends the watching; the material in use stays.
func (c *Credentials) Stop() { c.watcher.Stop() }

// Reload re-reads every file now, unless they were re-read less than a
// second ago by an earlier Reload, and returns once new material (if
// any) is in use. The transport calls it when kube-apiserver rejects the
// client certificate, before dialing again.
func (c *Credentials) Reload() {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if !c.lastReload.IsZero() && now.Sub(c.lastReload) < reloadMinInterval {
		return
	}
	c.lastReload = now
	c.checkLocked()
}

// RootCAs returns the CA pool, or nil for the system roots.
func (c *Credentials) RootCAs() *x509.CertPool { return c.roots.Load() }

// ClientCertificate returns the client certificate, or nil for a
// token-only user. A rotation returns a new pointer: callers may compare
// pointers to tell that the certificate changed.
func (c *Credentials) ClientCertificate() (*tls.Certificate, error) { return c.cert.Load(), nil }

// Token returns the bearer token, or "" for none. Besides the watcher, a
// tokenFile that changed (modification time or size) is re-read here at
// most once a second, so that a rotated token is used from the next
// request on even where file events are missed; if it is unreadable or
// empty the last good token is kept, because a kubelet swapping a
// projected token leaves a moment without a file and the old token is
// still valid.
func (c *Credentials) Token() (string, error) {
	st := c.token.Load()
	if st.path == "" || time.Since(st.checked) < tokenRecheck {
		return st.value, nil
	}
	// Whoever loses the race serves the current value rather than wait
	// for the file system.
	if !c.refresh.TryLock() {
		return st.value, nil
	}
	defer c.refresh.Unlock()
	st = c.refreshTokenLocked(c.token.Load())
	return st.value, nil
}

// refreshTokenLocked re-reads the token file if it changed; c.refresh is
// held.
func (c *Credentials) refreshTokenLocked(old *tokenState) *tokenState {
	now := time.Now()
	if now.Sub(old.checked) < tokenRecheck {
		return old
	}
	next := *old
	next.checked = now
	// os.Stat follows symlinks, so a Kubernetes volume's ..data symlink
	// swap shows as a new modification time of the target.
	if fi, err := os.Stat(old.path); err == nil && (!fi.ModTime().Equal(old.modTime) || fi.Size() != old.size) {
		if v, err := readToken(old.path); err == nil {
			if v != old.value {
				c.opts.Metrics.reloaded(KindToken, true)
				c.opts.Log.Info("reloaded the bearer token", "kind", KindToken, "source", "file "+old.path)
			}
			next.value, next.modTime, next.size = v, fi.ModTime(), fi.Size()
		}
	}
	c.token.Store(&next)
	return &next
}

// check is the watcher's callback.
func (c *Credentials) check() checkResult {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.checkLocked()
}

// checkLocked re-reads the kubeconfig first (it may name other files),
// then each source; c.mu is held.
func (c *Credentials) checkLocked() checkResult {
	var r checkResult
	fail := func(kind, source string, err error) {
		c.opts.Metrics.reloaded(kind, false)
		c.opts.Log.Error("reloading credentials failed; keeping the last good material and retrying", "kind", kind, "source", source, "error", err)
	}
	if path := c.up.Kubeconfig; path != "" {
		r.files = append(r.files, path)
		changed, err := c.reloadKubeconfig()
		switch {
		case err != nil:
			r.failing = true
			if changed {
				fail(KindKubeconfig, "file "+path, err)
			}
		case changed:
			c.opts.Metrics.reloaded(KindKubeconfig, true)
			c.opts.Log.Info("reloaded the kubeconfig", "kind", KindKubeconfig, "source", "file "+path)
		}
	}
	up := c.up
	for _, s := range []struct {
		kind   string
		source Source
		load   func() (bool, error)
	}{
		{KindCA, up.CA, c.loadCA},
		{KindClient, up.ClientCert, c.loadKeyPair},
		{KindToken, up.Token, c.loadToken},
	} {
		if s.source.Path != "" {
			r.files = append(r.files, s.source.Path)
		}
		if s.kind == KindClient && up.ClientKey.Path != "" {
			r.files = append(r.files, up.ClientKey.Path)
		}
		changed, err := s.load()
		switch {
		case err != nil:
			r.failing = true
			if changed {
				fail(s.kind, s.source.String(), err)
			}
		case changed:
			c.opts.Metrics.reloaded(s.kind, true)
			c.logReloaded(s.kind, s.source)
		}
	}
	if cert := c.cert.Load(); cert != nil && cert.Leaf != nil && cert.Leaf != c.renewWarned && renewalDue(cert.Leaf, time.Now()) {
		c.renewWarned = cert.Leaf
		c.opts.Log.Warn("the client certificate is past 80% of its lifetime and its files hold no newer one; renew it",
			"kind", KindClient, "source", up.ClientCert.String(), "not_after", cert.Leaf.NotAfter)
	}
	return r
}

func (c *Credentials) logReloaded(kind string, s Source) {
	attrs := []any{"kind", kind, "source", s.String()}
	switch kind {
	case KindClient:
		if cert := c.cert.Load(); cert != nil {
			attrs = append(attrs, "subject", cert.Leaf.Subject.String(), "not_after", cert.Leaf.NotAfter)
		}
	}
	c.opts.Log.Info("reloaded credentials", attrs...)
}

// reloadKubeconfig loads the kubeconfig again if its file changed and
// takes its sources in use. The server and server name stay those fanout
// started with: endpoints and the verified name are fixed at start.
func (c *Credentials) reloadKubeconfig() (changed bool, err error) {
	path := c.up.Kubeconfig
	data, err := os.ReadFile(path)
	if !c.kc.update(contentOrError(data, err)...) {
		return false, c.kc.err
	}
	defer func() { c.kc.err = err }()
	if err != nil {
		return true, err
	}
	up, err := LoadKubeconfig(path)
	if err != nil {
		return true, err
	}
	if urlString(up.Server) != urlString(c.up.Server) || up.ServerName != c.up.ServerName {
		c.opts.Log.Warn("the reloaded kubeconfig names another server or server name; fanout keeps the ones it started with until it restarts",
			"kind", KindKubeconfig, "source", "file "+path,
			"server", urlString(c.up.Server), "server_name", c.up.ServerName,
			"new_server", urlString(up.Server), "new_server_name", up.ServerName)
		up.Server, up.ServerName = c.up.Server, c.up.ServerName
	}
	c.up = up
	return true, nil
}

// loadCA reads the CA bundle and uses it if it changed and is valid.
func (c *Credentials) loadCA() (changed bool, err error) {
	src := c.up.CA
	if !src.IsSet() {
		if c.roots.Load() != nil {
			c.roots.Store(nil)
			c.ca = seen{}
			c.opts.Metrics.expires(KindCA, time.Time{})
			return true, nil
		}
		return false, nil
	}
	data, err := src.Read()
	if !c.ca.update(contentOrError(data, err)...) {
		return false, c.ca.err
	}
	defer func() { c.ca.err = err }()
	if err != nil {
		return true, fmt.Errorf("reading certificate-authority: %w", err)
	}
	pool, earliest, err := parseCABundle(data)
	if err != nil {
		return true, fmt.Errorf("certificate-authority (%s) %w", src, err)
	}
	c.roots.Store(pool)
	c.opts.Metrics.expires(KindCA, earliest)
	return true, nil
}

// loadKeyPair reads the client certificate and key together and uses
// them if they changed and match: a certificate is never paired with
// the previous key.
func (c *Credentials) loadKeyPair() (changed bool, err error) {
	certSrc, keySrc := c.up.ClientCert, c.up.ClientKey
	if !certSrc.IsSet() {
		if c.cert.Load() != nil {
			c.cert.Store(nil)
			c.kp = seen{}
			c.opts.Metrics.expires(KindClient, time.Time{})
			return true, nil
		}
		return false, nil
	}
	certPEM, certErr := certSrc.Read()
	keyPEM, keyErr := keySrc.Read()
	content := append(contentOrError(certPEM, certErr), contentOrError(keyPEM, keyErr)...)
	if !c.kp.update(content...) {
		return false, c.kp.err
	}
	defer func() { c.kp.err = err }()
	switch {
	case certErr != nil:
		return true, fmt.Errorf("reading client-certificate: %w", certErr)
	case keyErr != nil:
		return true, fmt.Errorf("reading client-key: %w", keyErr)
	}
	pair, err := parseKeyPair(certPEM, keyPEM)
	if err != nil {
		return true, fmt.Errorf("client-certificate (%s) and client-key (%s) are not a usable key pair: %w", certSrc, keySrc, err)
	}
	c.cert.Store(pair)
	c.opts.Metrics.expires(KindClient, pair.Leaf.NotAfter)
	return true, nil
}

// loadToken reads the token if it changed. changed is true only when the
// value in use changed (or the file went bad).
func (c *Credentials) loadToken() (changed bool, err error) {
	src := c.up.Token
	c.refresh.Lock()
	defer c.refresh.Unlock()
	old := c.token.Load()
	switch {
	case src.Path == "" && len(src.Data) == 0:
		if old.value != "" {
			c.token.Store(&tokenState{})
			return true, nil
		}
		return false, nil
	case src.Path == "":
		v := strings.TrimSpace(string(src.Data))
		if v == old.value && old.path == "" {
			return false, nil
		}
		c.token.Store(&tokenState{value: v})
		return true, nil
	}
	fi, statErr := os.Stat(src.Path)
	v, readErr := readToken(src.Path)
	if readErr == nil && statErr != nil {
		readErr = statErr
	}
	if !c.tok.update(contentOrError([]byte(v), readErr)...) && old.path == src.Path {
		return false, c.tok.err
	}
	c.tok.err = readErr
	if readErr != nil {
		return true, readErr
	}
	c.token.Store(&tokenState{value: v, path: src.Path, modTime: fi.ModTime(), size: fi.Size(), checked: time.Now()})
	// The request path may have read this value already.
	return v != old.value || old.path != src.Path, nil
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

// contentOrError is what seen compares: the content, or the error that
// stood in its way (so that a new error is news and the same one is not).
func contentOrError(data []byte, err error) [][]byte {
	if err != nil {
		return [][]byte{[]byte("error"), []byte(err.Error())}
	}
	return [][]byte{[]byte("ok"), data}
}

func urlString(u *url.URL) string {
	if u == nil {
		return ""
	}
	return u.String()
}
