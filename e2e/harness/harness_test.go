package harness

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestPKI(t *testing.T) {
	dir := t.TempDir()
	hostIPs := []net.IP{net.ParseIP("172.30.7.11"), net.ParseIP("172.30.7.12")}
	p, err := NewPKI(dir, hostIPs, ServiceIP)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(p.CA.Cert)
	proxyRoots := x509.NewCertPool()
	proxyRoots.AddCert(p.FrontProxyCA.Cert)

	for _, name := range append([]string{"172.30.7.11", "172.30.7.12", "127.0.0.1", "10.96.0.1"}, ServingNames...) {
		if _, err := p.Serving.Cert.Verify(x509.VerifyOptions{DNSName: name, Roots: roots}); err != nil {
			t.Errorf("serving cert does not verify for %q: %v", name, err)
		}
	}

	clients := []struct {
		name    string
		ck      *CertKey
		roots   *x509.CertPool
		wantCN  string
		wantOrg []string
	}{
		{"admin", p.Admin, roots, "kubernetes-admin", []string{"system:masters"}},
		{"controller-manager", p.ControllerManager, roots, "system:kube-controller-manager", nil},
		{"scheduler", p.Scheduler, roots, "system:kube-scheduler", nil},
		{"front-proxy", p.FrontProxyClient, proxyRoots, "front-proxy-client", nil},
	}
	for _, tc := range clients {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.ck.Cert
			if _, err := c.Verify(x509.VerifyOptions{Roots: tc.roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
				t.Errorf("client cert does not verify: %v", err)
			}
			if c.Subject.CommonName != tc.wantCN || fmt.Sprint(c.Subject.Organization) != fmt.Sprint(tc.wantOrg) {
				t.Errorf("subject = CN %q O %v, want CN %q O %v", c.Subject.CommonName, c.Subject.Organization, tc.wantCN, tc.wantOrg)
			}
			if _, err := tls.LoadX509KeyPair(tc.ck.CertFile, tc.ck.KeyFile); err != nil {
				t.Errorf("written files do not load as a key pair: %v", err)
			}
		})
	}

	for _, f := range []string{p.ServiceAccountKey, p.ServiceAccountPub} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("service-account key file: %v", err)
		}
	}

	user, err := p.MintUser("e2e-someone", "team-a", "team-b")
	if err != nil {
		t.Fatal(err)
	}
	kc := filepath.Join(dir, "someone.conf")
	if err := p.WriteKubeconfig(kc, "https://172.30.7.11:6443", user); err != nil {
		t.Fatal(err)
	}
	cfg, err := RESTConfig(kc)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://172.30.7.11:6443" || len(cfg.CertData) == 0 || len(cfg.KeyData) == 0 || len(cfg.CAData) == 0 {
		t.Errorf("kubeconfig loads as host %q with cert %d, key %d, CA %d bytes; want the server and all three", cfg.Host, len(cfg.CertData), len(cfg.KeyData), len(cfg.CAData))
	}
}

func TestAuditServed(t *testing.T) {
	tests := []struct {
		line string
		want bool
	}{
		{`{"stage":"ResponseComplete","verb":"get","user":{"username":"u"}}`, true},
		{`{"stage":"ResponseStarted","verb":"watch","user":{"username":"u"}}`, true},
		{`{"stage":"ResponseComplete","verb":"watch","user":{"username":"u"}}`, false},
		{`{"stage":"RequestReceived","verb":"list","user":{"username":"u"}}`, false},
		{`{"stage":"Panic","verb":"list","user":{"username":"u"}}`, false},
		{`{"stage":"ResponseComplete","verb":"create","user":{"username":"other"}}`, false},
	}
	dir := t.TempDir()
	var all []string
	wantCount := 0
	for _, tc := range tests {
		all = append(all, tc.line)
		if tc.want {
			wantCount++
		}
	}
	// A torn final line, as when the apiserver is mid-write.
	path := filepath.Join(dir, "audit.log")
	if err := os.WriteFile(path, []byte(strings.Join(all, "\n")+"\n{\"stage\":\"Resp"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := CountServed(path, UserIs("u"))
	if err != nil {
		t.Fatal(err)
	}
	if got != wantCount {
		t.Errorf("CountServed = %d, want %d", got, wantCount)
	}
}

// TestAuditTail reads a log in pieces: a log not written yet, a line cut
// in the middle that completes on the next call, and a new, shorter file at
// the same path, which is read from its start after a reset.
func TestAuditTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	tail := AuditTail{Path: path}
	var ids []string
	next := func() bool {
		t.Helper()
		reset, err := tail.Next(func(e *AuditEvent) { ids = append(ids, e.AuditID) })
		if err != nil {
			t.Fatal(err)
		}
		return reset
	}
	write := func(s string, flag int) {
		t.Helper()
		f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|flag, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteString(s); err != nil {
			t.Fatal(err)
		}
	}
	if next() || len(ids) != 0 {
		t.Fatalf("a log not written yet gave %v", ids)
	}
	write(`{"auditID":"a"}`+"\n"+`{"auditID":"b"}`+"\n"+`{"audit`, os.O_APPEND)
	next()
	if fmt.Sprint(ids) != "[a b]" {
		t.Fatalf("first read: %v, want [a b] and the torn line held back", ids)
	}
	write(`ID":"c"}`+"\n", os.O_APPEND)
	next()
	if fmt.Sprint(ids) != "[a b c]" {
		t.Fatalf("after the torn line completed: %v, want [a b c]", ids)
	}
	write(`{"auditID":"d"}`+"\n", os.O_TRUNC)
	if !next() {
		t.Fatal("a shorter file at the same path was not reported as a reset")
	}
	ids = nil
	next()
	if fmt.Sprint(ids) != "[d]" {
		t.Fatalf("after the reset: %v, want [d]", ids)
	}
	if events, err := ReadAuditLog(path); err != nil || len(events) != 1 || events[0].AuditID != "d" {
		t.Errorf("ReadAuditLog = %v, %v; want the one event d", events, err)
	}
	if _, err := ReadAuditLog(path + ".missing"); !os.IsNotExist(err) {
		t.Errorf("ReadAuditLog of a missing file: %v, want not-exist", err)
	}
}

func TestControllerManagerUsers(t *testing.T) {
	tests := map[string]bool{
		"system:kube-controller-manager":                          true,
		"system:serviceaccount:kube-system:deployment-controller": true,
		"system:serviceaccount:default:default":                   false,
		"system:kube-scheduler":                                   false,
	}
	for user, want := range tests {
		if got := ControllerManagerUsers(user); got != want {
			t.Errorf("ControllerManagerUsers(%q) = %v, want %v", user, got, want)
		}
	}
}

func TestShares(t *testing.T) {
	tests := []struct {
		counts []int
		want   []float64
	}{
		{[]int{1, 1, 2}, []float64{0.25, 0.25, 0.5}},
		{[]int{0, 0, 0}, []float64{0, 0, 0}},
		{[]int{5}, []float64{1}},
	}
	for _, tc := range tests {
		if got := Shares(tc.counts); fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("Shares(%v) = %v, want %v", tc.counts, got, tc.want)
		}
	}
}

func TestStaleName(t *testing.T) {
	self := fmt.Sprint(os.Getpid())
	tests := []struct {
		name string
		want bool
	}{
		{"fo999999999abr", true}, // no such pid
		{"fo999999999a-api2", true},
		{"fo999999999ch3", true},
		{"fo" + self + "abr", false}, // ours, and alive
		{"fo1abr", false},            // init is alive
		{"fo999999999br", false},     // not a name we make
		{"foobar", false},
		{"eth0", false},
		{"fo999999999an1", false}, // inner ends live in namespaces, never swept by name
		{"fo999999999a-node1", true},
		{"fo999999999and1", true},
		{"fo999999999ann1", false}, // the node's inner end, inside its namespace
	}
	for _, tc := range tests {
		if got := stale(tc.name); got != tc.want {
			t.Errorf("stale(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestUnescapeMount(t *testing.T) {
	for in, want := range map[string]string{
		`/tmp/a`:             "/tmp/a",
		`/tmp/with\040space`: "/tmp/with space",
		`/tmp/tab\011x`:      "/tmp/tab\tx",
	} {
		if got := unescapeMount(in); got != want {
			t.Errorf("unescapeMount(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestL4Proxy checks the round robin per connection and that bytes flow both
// ways, with echo servers as backends.
func TestL4Proxy(t *testing.T) {
	var backends []string
	for i := 0; i < 3; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					fmt.Fprintf(c, "backend %d\n", i)
					io.Copy(c, c)
				}()
			}
		}()
		backends = append(backends, ln.Addr().String())
	}
	p, err := StartL4Proxy(backends)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	for i := 0; i < 6; i++ {
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("backend %d\nping\n", i%3)
		if _, err := io.WriteString(c, "ping\n"); err != nil {
			t.Fatal(err)
		}
		c.(*net.TCPConn).CloseWrite()
		got, err := io.ReadAll(c)
		c.Close()
		if err != nil || string(got) != want {
			t.Errorf("connection %d read %q, %v; want %q", i, got, err, want)
		}
	}
	if got := fmt.Sprint(p.Connections()); got != "[2 2 2]" {
		t.Errorf("Connections() = %s, want [2 2 2]", got)
	}

	// Close must also end connections that are still open.
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 32)
	if _, err := c.Read(buf); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil && !strings.Contains(err.Error(), "closed") {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(c); err != nil {
		t.Fatalf("reading after Close: %v", err)
	}
}

func TestIsHealthProbe(t *testing.T) {
	for uri, want := range map[string]bool{
		"/readyz":                             true,
		"/readyz?verbose":                     true,
		"/readyz/etcd":                        true,
		"/livez":                              true,
		"/healthz":                            true,
		"/readyzz":                            false,
		"/api/v1/namespaces/readyz":           false,
		"/api/v1/namespaces?watch=true":       false,
		"/apis/apps/v1/deployments?x=/readyz": false,
	} {
		e := &AuditEvent{RequestURI: uri}
		if got := e.IsHealthProbe(); got != want {
			t.Errorf("IsHealthProbe(%q) = %v, want %v", uri, got, want)
		}
	}
	for ua, want := range map[string]bool{"fanout-discovery": true, "kubectl/v1.37.2": false} {
		e := &AuditEvent{RequestURI: "/apis", UserAgent: ua}
		if got := e.IsHealthProbe(); got != want {
			t.Errorf("IsHealthProbe(/apis by %q) = %v, want %v", ua, got, want)
		}
	}
}

// TestCachedBuild: a missing file is built once and renamed into place; a
// cached one is returned without building; a failed build leaves nothing
// behind, so the next call builds again.
func TestCachedBuild(t *testing.T) {
	ctx := t.Context()
	dir := filepath.Join(t.TempDir(), "cache")
	builds := 0
	build := func(out string) error {
		builds++
		return os.WriteFile(out, []byte("#!/bin/sh\n"), 0o755)
	}
	for range 2 {
		p, err := cachedBuild(ctx, dir, "tool", io.Discard, "waiting", build)
		if err != nil {
			t.Fatal(err)
		}
		if p != filepath.Join(dir, "tool") {
			t.Errorf("path %s", p)
		}
	}
	if builds != 1 {
		t.Errorf("%d builds for two calls, want 1", builds)
	}
	failing := func(out string) error {
		if err := os.WriteFile(out, []byte("half"), 0o755); err != nil {
			return err
		}
		return fmt.Errorf("build failed")
	}
	if _, err := cachedBuild(ctx, dir, "other", io.Discard, "waiting", failing); err == nil {
		t.Fatal("a failed build returned no error")
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, ",") != ".build.lock,tool" {
		t.Errorf("cache holds %v after a failed build, want only the lock file and tool", names)
	}
}

// TestReleaseGoMod checks the build module ReleaseBinaries derives from
// k8s.io/kubernetes's go.mod: its go and godebug lines, a requirement of
// the release, and every staging replacement pointed at the published
// module of the matching v0 version; anything else is left out.
func TestReleaseGoMod(t *testing.T) {
	upstream := `// generated
module k8s.io/kubernetes

go 1.26.0

godebug default=go1.26

require (
	github.com/blang/semver/v4 v4.0.0
	k8s.io/api v0.0.0
)

replace (
	k8s.io/api => ./staging/src/k8s.io/api
	k8s.io/client-go => ./staging/src/k8s.io/client-go
	example.com/other => example.com/other v1.2.3
)
`
	staging, err := stagingVersion("v1.36.3")
	if err != nil {
		t.Fatal(err)
	}
	got, err := releaseGoMod([]byte(upstream), "v1.36.3", staging)
	if err != nil {
		t.Fatal(err)
	}
	want := `// Written by the fanout e2e harness (ReleaseBinaries).
module fanout-e2e/kubebuild

go 1.26.0
godebug default=go1.26

require k8s.io/kubernetes v1.36.3

replace (
	k8s.io/api => k8s.io/api v0.36.3
	k8s.io/client-go => k8s.io/client-go v0.36.3
)
`
	if string(got) != want {
		t.Errorf("releaseGoMod:\n%s\nwant:\n%s", got, want)
	}
	if _, err := releaseGoMod([]byte("module k8s.io/kubernetes\n\ngo 1.26.0\n"), "v1.36.3", staging); err == nil {
		t.Error("releaseGoMod of a go.mod without staging replacements: no error")
	}
	for _, bad := range []string{"1.36.3", "v2.0.0", "v1."} {
		if _, err := stagingVersion(bad); err == nil {
			t.Errorf("stagingVersion(%q): no error", bad)
		}
	}
}
