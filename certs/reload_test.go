package certs

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/fanout-dev/fanout/internal/testkit"
)

// volume imitates a Kubernetes secret or projected volume as the
// kubelet's AtomicWriter lays it out: every file is a symlink
// name -> ..data/name, ..data is a symlink to a timestamped directory,
// and an update writes a new timestamped directory and renames a new
// symlink over ..data, then removes the old directory.
type volume struct {
	t   *testing.T
	dir string
	n   int
	cur string
}

func newVolume(t *testing.T, files map[string][]byte) *volume {
	v := &volume{t: t, dir: t.TempDir()}
	v.update(files)
	for name := range files {
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(v.dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return v
}

func (v *volume) path(name string) string { return filepath.Join(v.dir, name) }

func (v *volume) update(files map[string][]byte) {
	v.t.Helper()
	v.n++
	ts := fmt.Sprintf("..2026_11_30_06_00_%02d.%d", v.n, v.n)
	for name, data := range files {
		testkit.WriteFile(v.t, filepath.Join(v.dir, ts), name, data)
	}
	tmp := filepath.Join(v.dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		v.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
		v.t.Fatal(err)
	}
	if v.cur != "" {
		os.RemoveAll(filepath.Join(v.dir, v.cur))
	}
	v.cur = ts
}

// replaceAtomic writes data to path the way editors and cert-manager
// style tools do: a temporary file renamed over path.
func replaceAtomic(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// reloadCount returns fanout_credential_reloads_total{kind,result}.
func reloadCount(t *testing.T, m *Metrics, kind, result string) float64 {
	t.Helper()
	return gather(t, m, "fanout_credential_reloads_total", map[string]string{"kind": kind, "result": result})
}

func expiry(t *testing.T, m *Metrics, kind string) float64 {
	t.Helper()
	return gather(t, m, "fanout_certificate_expiration_timestamp_seconds", map[string]string{"kind": kind})
}

// gather returns the value of name{labels} in m, or -1 if m has no such
// series.
func gather(t *testing.T, m *Metrics, name string, labels map[string]string) float64 {
	t.Helper()
	v, ok := testkit.Series(t, testkit.Registry(t, m), name, labels)
	if !ok {
		return -1
	}
	return v
}

func certCN(c *Credentials) string {
	cert, _ := c.ClientCertificate()
	if cert == nil {
		return ""
	}
	return cert.Leaf.Subject.CommonName
}

func verifies(pool *x509.CertPool, kp testkit.KeyPair) bool {
	_, err := kp.Leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "kubernetes"})
	return err == nil
}

// startCredentials makes Credentials of up with opts and starts their
// watch until the test ends.
func startCredentials(t *testing.T, up *Upstream, opts Options) *Credentials {
	t.Helper()
	c, err := NewCredentialsWithOptions(up, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c
}

// TestSecretVolumeSwap rotates everything at once through a ..data swap,
// with polling out of the picture (an hour): the directory watch alone
// must see it.
func TestSecretVolumeSwap(t *testing.T) {
	ca1, ca2 := testkit.NewCA(t), testkit.NewCA(t)
	alice, bob := ca1.Client("alice"), ca2.Client("bob")
	srv1, srv2 := ca1.Serving("kubernetes"), ca2.Serving("kubernetes")
	vol := newVolume(t, map[string][]byte{
		"ca.crt": ca1.CertPEM, "tls.crt": alice.CertPEM, "tls.key": alice.KeyPEM, "token": []byte("token-1\n"),
	})
	kc := writeKubeconfig(t, t.TempDir(), "kubeconfig",
		&clientcmdapi.Cluster{Server: "https://10.0.0.1:6443", CertificateAuthority: vol.path("ca.crt")},
		&clientcmdapi.AuthInfo{ClientCertificate: vol.path("tls.crt"), ClientKey: vol.path("tls.key"), TokenFile: vol.path("token")})
	up, err := LoadKubeconfig(kc)
	if err != nil {
		t.Fatal(err)
	}
	m := NewMetrics()
	c := startCredentials(t, up, Options{Metrics: m, PollInterval: time.Hour})
	if certCN(c) != "alice" || !verifies(c.RootCAs(), srv1) {
		t.Fatal("initial material not loaded")
	}
	if got := expiry(t, m, KindClient); got != float64(alice.Leaf.NotAfter.Unix()) {
		t.Errorf("client expiry = %v, want %v", got, alice.Leaf.NotAfter.Unix())
	}

	// A CA bundle with the old and the new CA, as during a CA rotation.
	bundle := append(append([]byte{}, ca1.CertPEM...), ca2.CertPEM...)
	vol.update(map[string][]byte{"ca.crt": bundle, "tls.crt": bob.CertPEM, "tls.key": bob.KeyPEM, "token": []byte("token-2")})
	testkit.WaitFor(t, "the new client certificate", func() bool { return certCN(c) == "bob" })
	testkit.WaitFor(t, "the new CA bundle", func() bool { return verifies(c.RootCAs(), srv2) })
	if !verifies(c.RootCAs(), srv1) {
		t.Error("the bundle holding both CAs no longer verifies the old CA's server")
	}
	testkit.WaitFor(t, "the new token", func() bool {
		c.refresh.Lock()
		defer c.refresh.Unlock()
		return c.token.Load().value == "token-2"
	})
	if tok, _ := c.Token(); tok != "token-2" {
		t.Errorf("Token() = %q, want token-2", tok)
	}
	for _, kind := range []string{KindCA, KindClient, KindToken} {
		if got := reloadCount(t, m, kind, "success"); got != 1 {
			t.Errorf("reloads{kind=%s,result=success} = %v, want 1", kind, got)
		}
		if got := reloadCount(t, m, kind, "failure"); got != 0 {
			t.Errorf("reloads{kind=%s,result=failure} = %v, want 0", kind, got)
		}
	}
	if got := expiry(t, m, KindClient); got != float64(bob.Leaf.NotAfter.Unix()) {
		t.Errorf("client expiry = %v, want bob's %v", got, bob.Leaf.NotAfter.Unix())
	}
	earliest := ca1.Cert.NotAfter
	if ca2.Cert.NotAfter.Before(earliest) {
		earliest = ca2.Cert.NotAfter
	}
	if got := expiry(t, m, KindCA); got != float64(earliest.Unix()) {
		t.Errorf("CA expiry = %v, want the earliest of the bundle %v", got, earliest.Unix())
	}
}

// TestAtomicRename replaces plain files by renames, as editors and most
// tools do; the watched inode goes away, the directory watch stays.
func TestAtomicRename(t *testing.T) {
	f := newFixture(t)
	bob := f.ca.Client("bob")
	c := startCredentials(t, &Upstream{
		CA: Source{Path: f.caFile}, ClientCert: Source{Path: f.certFile}, ClientKey: Source{Path: f.keyFile},
	}, Options{PollInterval: time.Hour})
	// The key first, then the certificate, each renamed into place: in
	// between the pair does not match and must not be used.
	replaceAtomic(t, f.keyFile, bob.KeyPEM)
	replaceAtomic(t, f.certFile, bob.CertPEM)
	testkit.WaitFor(t, "bob's certificate", func() bool { return certCN(c) == "bob" })
	cert, _ := c.ClientCertificate()
	if _, err := tls.X509KeyPair(bob.CertPEM, bob.KeyPEM); err != nil || !bytes.Equal(cert.Certificate[0], bob.TLS.Certificate[0]) {
		t.Fatal("loaded certificate is not bob's")
	}
	// A second rotation works too: the watch survived the renames.
	carol := f.ca.Client("carol")
	replaceAtomic(t, f.certFile, carol.CertPEM)
	replaceAtomic(t, f.keyFile, carol.KeyPEM)
	testkit.WaitFor(t, "carol's certificate", func() bool { return certCN(c) == "carol" })
}

// TestBadFilesKeepLastGood writes broken material and checks that the
// last good one stays, that each broken version is counted and logged
// once however often it is re-read, and that a repaired file is taken.
func TestBadFilesKeepLastGood(t *testing.T) {
	f := newFixture(t)
	bob := f.ca.Client("bob")
	ca2 := testkit.NewCA(t)
	tokenFile := testkit.WriteFile(t, f.dir, "token", []byte("good-token"))
	half := func(b []byte) []byte { return b[:len(b)/2] }
	for _, tc := range []struct {
		name  string
		kind  string
		file  string
		bad   []byte // nil: remove the file
		check func(*Credentials) bool
	}{
		{"truncated certificate", KindClient, f.certFile, half(bob.CertPEM), func(c *Credentials) bool { return certCN(c) == "alice" }},
		{"garbage certificate", KindClient, f.certFile, []byte("garbage"), func(c *Credentials) bool { return certCN(c) == "alice" }},
		{"certificate without its key", KindClient, f.certFile, bob.CertPEM, func(c *Credentials) bool { return certCN(c) == "alice" }},
		{"truncated key", KindClient, f.keyFile, half(f.alice.KeyPEM), func(c *Credentials) bool { return certCN(c) == "alice" }},
		{"certificate removed", KindClient, f.certFile, nil, func(c *Credentials) bool { return certCN(c) == "alice" }},
		{"garbage CA", KindCA, f.caFile, []byte("garbage"), func(c *Credentials) bool { return verifies(c.RootCAs(), f.serving) }},
		{"CA bundle cut in its second certificate", KindCA, f.caFile, append(append([]byte{}, f.ca.CertPEM...), half(ca2.CertPEM)...),
			func(c *Credentials) bool { return verifies(c.RootCAs(), f.serving) }},
		{"empty token", KindToken, tokenFile, []byte(" \n"), func(c *Credentials) bool { return c.token.Load().value == "good-token" }},
		{"token removed", KindToken, tokenFile, nil, func(c *Credentials) bool { return c.token.Load().value == "good-token" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			good, err := os.ReadFile(tc.file)
			if err != nil {
				t.Fatal(err)
			}
			defer os.WriteFile(tc.file, good, 0o600)
			m := NewMetrics()
			var logs testkit.Buffer
			c, err := NewCredentialsWithOptions(&Upstream{
				CA: Source{Path: f.caFile}, ClientCert: Source{Path: f.certFile}, ClientKey: Source{Path: f.keyFile}, Token: Source{Path: tokenFile},
			}, Options{Metrics: m, Log: slog.New(slog.NewJSONHandler(&logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			if tc.bad == nil {
				os.Remove(tc.file)
			} else if err := os.WriteFile(tc.file, tc.bad, 0o600); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 3; i++ {
				if r := c.check(); !r.failing {
					t.Fatalf("check %d does not report the broken file for a retry", i)
				}
				if !tc.check(c) {
					t.Fatalf("check %d replaced the last good material", i)
				}
			}
			if got := reloadCount(t, m, tc.kind, "failure"); got != 1 {
				t.Errorf("reloads{kind=%s,result=failure} = %v after three checks of one broken version, want 1", tc.kind, got)
			}
			if n := strings.Count(logs.String(), `"level":"ERROR"`); n != 1 {
				t.Errorf("%d error lines logged, want 1:\n%s", n, logs.String())
			}
			if n := strings.Count(logs.String(), `"kind":"`+tc.kind+`"`); n != 1 {
				t.Errorf("%d log lines name kind %s, want 1", n, tc.kind)
			}
			// Repaired: taken, and no longer failing.
			if err := os.WriteFile(tc.file, good, 0o600); err != nil {
				t.Fatal(err)
			}
			if r := c.check(); r.failing {
				t.Error("still failing after the file was repaired")
			}
			if !tc.check(c) {
				t.Error("material wrong after the file was repaired")
			}
		})
	}
}

// TestPollingAloneReloads turns inotify off: a change must still be
// found by the poll, exactly at the poll interval. Without inotify the
// watcher blocks only on its timers and its stop channel, so it runs in
// a synctest bubble: synctest.Wait, not polling, tells when it is idle.
func TestPollingAloneReloads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		bob := f.ca.Client("bob")
		m := NewMetrics()
		c, err := NewCredentialsWithOptions(&Upstream{ClientCert: Source{Path: f.certFile}, ClientKey: Source{Path: f.keyFile}},
			Options{Metrics: m, PollInterval: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		c.watcher.noNotify = true
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		defer c.Stop()
		// Without inotify the watcher wakes only on its timers: 9s into a
		// 10s poll interval no check has run, so the old material stays.
		switchesAt(t, f, c, bob, 9*time.Second, 10*time.Second, synctest.Wait)
		if got := reloadCount(t, m, KindClient, "success"); got != 1 {
			t.Errorf("reloads{kind=client,result=success} = %v, want 1", got)
		}
	})
}

// TestKubeconfigReload: inline data changes only with the kubeconfig,
// which is watched; a broken kubeconfig keeps the last good one.
func TestKubeconfigReload(t *testing.T) {
	f := newFixture(t)
	bob := f.ca.Client("bob")
	dir := t.TempDir()
	cluster := &clientcmdapi.Cluster{Server: "https://10.0.0.1:6443", CertificateAuthorityData: f.ca.CertPEM}
	path := writeKubeconfig(t, dir, "kubeconfig", cluster, &clientcmdapi.AuthInfo{ClientCertificateData: f.alice.CertPEM, ClientKeyData: f.alice.KeyPEM})
	up, err := LoadKubeconfig(path)
	if err != nil {
		t.Fatal(err)
	}
	m := NewMetrics()
	c := startCredentials(t, up, Options{Metrics: m, PollInterval: time.Hour})

	// New inline data, written in place (not atomically).
	other := t.TempDir()
	writeKubeconfig(t, other, "kubeconfig", cluster, &clientcmdapi.AuthInfo{ClientCertificateData: bob.CertPEM, ClientKeyData: bob.KeyPEM})
	data, _ := os.ReadFile(filepath.Join(other, "kubeconfig"))
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "bob from the rewritten kubeconfig", func() bool { return certCN(c) == "bob" })

	// Garbage: kept.
	replaceAtomic(t, path, []byte("{{{ not yaml"))
	testkit.WaitFor(t, "the kubeconfig failure to be counted", func() bool { return reloadCount(t, m, KindKubeconfig, "failure") == 1 })
	if certCN(c) != "bob" {
		t.Fatal("a broken kubeconfig replaced the credentials")
	}

	// Now a tokenFile instead of a certificate; then the token rotates.
	tokenFile := testkit.WriteFile(t, dir, "token", []byte("t1"))
	writeKubeconfig(t, other, "kubeconfig", cluster, &clientcmdapi.AuthInfo{TokenFile: tokenFile})
	data, _ = os.ReadFile(filepath.Join(other, "kubeconfig"))
	replaceAtomic(t, path, data)
	testkit.WaitFor(t, "the token user", func() bool { return c.token.Load().value == "t1" && certCN(c) == "" })
	replaceAtomic(t, tokenFile, []byte("t2"))
	testkit.WaitFor(t, "the rotated token", func() bool { return c.token.Load().value == "t2" })
	if got := expiry(t, m, KindClient); got != -1 {
		t.Errorf("client expiry still exported (%v) for a user without a certificate", got)
	}
	if got := reloadCount(t, m, KindKubeconfig, "success"); got != 2 {
		t.Errorf("reloads{kind=kubeconfig,result=success} = %v, want 2", got)
	}
}

// switchesAt writes next's pair over the fixture's alice and checks, in a
// bubble, that c still holds alice's certificate early after the write
// and next's at at; look is what lets c see its files (synctest.Wait for
// its timers, or Reload).
func switchesAt(t *testing.T, f *fixture, c *Credentials, next testkit.KeyPair, early, at time.Duration, look func()) {
	t.Helper()
	os.WriteFile(f.keyFile, next.KeyPEM, 0o600)
	os.WriteFile(f.certFile, next.CertPEM, 0o600)
	time.Sleep(early)
	look()
	if certCN(c) != "alice" {
		t.Fatalf("the new pair was taken %s after it was written, want it at %s", early, at)
	}
	time.Sleep(at - early)
	look()
	if cn := next.Leaf.Subject.CommonName; certCN(c) != cn {
		t.Fatalf("%s's certificate was not taken %s after it was written", cn, at)
	}
}

func TestReloadIsRateLimited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		bob := f.ca.Client("bob")
		c, err := NewCredentials(&Upstream{ClientCert: Source{Path: f.certFile}, ClientKey: Source{Path: f.keyFile}})
		if err != nil {
			t.Fatal(err)
		}
		c.Reload()
		switchesAt(t, f, c, bob, reloadMinInterval-time.Nanosecond, reloadMinInterval, c.Reload)
	})
}

func TestServingCertificate(t *testing.T) {
	ca := testkit.NewCA(t)
	one, two := ca.Serving("injector.svc"), ca.Serving("injector.svc", "two.svc")
	vol := newVolume(t, map[string][]byte{"tls.crt": one.CertPEM, "tls.key": one.KeyPEM})
	if _, err := NewServingCertificate(vol.path("tls.crt"), filepath.Join(vol.dir, "missing"), Options{}); err == nil {
		t.Fatal("NewServingCertificate accepted a missing key")
	}
	m := NewMetrics()
	s, err := NewServingCertificate(vol.path("tls.crt"), vol.path("tls.key"), Options{Metrics: m, PollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	if err := s.Start(); err == nil {
		t.Error("a second Start succeeded")
	}
	served := func() []byte {
		c, err := s.GetCertificate(&tls.ClientHelloInfo{})
		if err != nil {
			t.Fatal(err)
		}
		return c.Certificate[0]
	}
	if !bytes.Equal(served(), one.TLS.Certificate[0]) {
		t.Fatal("not serving the initial certificate")
	}
	// Garbage in the key: kept.
	vol.update(map[string][]byte{"tls.crt": two.CertPEM, "tls.key": []byte("garbage")})
	testkit.WaitFor(t, "the failure to be counted", func() bool { return reloadCount(t, m, KindServing, "failure") == 1 })
	if !bytes.Equal(served(), one.TLS.Certificate[0]) {
		t.Fatal("a broken pair replaced the served certificate")
	}
	vol.update(map[string][]byte{"tls.crt": two.CertPEM, "tls.key": two.KeyPEM})
	testkit.WaitFor(t, "the new certificate", func() bool { return bytes.Equal(served(), two.TLS.Certificate[0]) })
	if got := expiry(t, m, KindServing); got != float64(two.Leaf.NotAfter.Unix()) {
		t.Errorf("serving expiry = %v, want %v", got, two.Leaf.NotAfter.Unix())
	}
	s.Stop()
	s.Stop() // idempotent
}

func TestWatchDirs(t *testing.T) {
	vol := newVolume(t, map[string][]byte{"a": []byte("x")})
	elsewhere := t.TempDir()
	target := testkit.WriteFile(t, elsewhere, "real", []byte("x"))
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	got := watchDirs([]string{vol.path("a"), link, ""})
	want := []string{vol.dir, filepath.Dir(link), elsewhere}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("watchDirs = %v, want %v (the volume's own ..data target is not watched)", got, want)
	}
}

// TestRenewalWarning: a certificate past 80% of its lifetime with no newer
// one on disk is logged once, not at every check. The fixture is made in
// the bubble, so that its certificates are valid around the bubble's
// clock.
func TestRenewalWarning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		life := f.alice.Leaf.NotAfter.Sub(f.alice.Leaf.NotBefore)
		var logs testkit.Buffer
		c, err := NewCredentialsWithOptions(&Upstream{ClientCert: Source{Path: f.certFile}, ClientKey: Source{Path: f.keyFile}},
			Options{Log: slog.New(slog.NewJSONHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Until(f.alice.Leaf.NotBefore.Add(life * 7 / 10)))
		c.check()
		if n := strings.Count(logs.String(), "renew it"); n != 0 {
			t.Fatalf("warned at 70%% of the lifetime")
		}
		time.Sleep(life * 15 / 100)
		c.check()
		c.check()
		if n := strings.Count(logs.String(), "renew it"); n != 1 {
			t.Errorf("%d renewal warnings at 85%% of the lifetime over two checks, want 1", n)
		}
	})
}
