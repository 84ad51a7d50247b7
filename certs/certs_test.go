package certs

import (
	"crypto/x509"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/fanout-dev/fanout/components/transport"
	"github.com/fanout-dev/fanout/internal/testkit"
)

// The transport consumes credentials through its own interface; certs
// must satisfy it without importing it outside tests.
var _ transport.Credentials = (*Credentials)(nil)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fixture is a PKI written to a directory, for kubeconfigs to point at.
type fixture struct {
	dir                       string
	ca                        *testkit.CA
	serving, alice            testkit.KeyPair
	caFile, certFile, keyFile string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	dir := t.TempDir()
	ca := testkit.NewCA(t)
	f := &fixture{dir: dir, ca: ca, serving: ca.Serving("kubernetes", "10.0.0.1"), alice: ca.Client("alice", "team")}
	f.caFile = testkit.WriteFile(t, dir, "pki/ca.crt", ca.CertPEM)
	f.certFile = testkit.WriteFile(t, dir, "pki/alice.crt", f.alice.CertPEM)
	f.keyFile = testkit.WriteFile(t, dir, "pki/alice.key", f.alice.KeyPEM)
	return f
}

// writeKubeconfig writes a one-context kubeconfig to dir/name.
func writeKubeconfig(t *testing.T, dir, name string, cluster *clientcmdapi.Cluster, user *clientcmdapi.AuthInfo) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = cluster
	cfg.AuthInfos["u"] = user
	cfg.Contexts["ctx"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	cfg.CurrentContext = "ctx"
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return testkit.WriteFile(t, dir, name, data)
}

func TestLoadKubeconfig(t *testing.T) {
	f := newFixture(t)
	tokenFile := testkit.WriteFile(t, f.dir, "token", []byte("file-token\n"))
	// A kubeconfig in a subdirectory naming files relative to itself.
	relDir := filepath.Join(f.dir, "rel")
	testkit.WriteFile(t, relDir, "ca.crt", f.ca.CertPEM)
	testkit.WriteFile(t, relDir, "creds/alice.crt", f.alice.CertPEM)
	testkit.WriteFile(t, relDir, "creds/alice.key", f.alice.KeyPEM)

	type want struct {
		server, serverName string
		ca, cert, key      Source
		token              Source
		// what NewCredentials then yields
		credToken string
		credCN    string
		systemCA  bool
	}
	for _, tc := range []struct {
		name    string
		dir     string
		cluster *clientcmdapi.Cluster
		user    *clientcmdapi.AuthInfo
		want    want
	}{
		{
			name:    "files",
			cluster: &clientcmdapi.Cluster{Server: "https://10.0.0.1:6443", CertificateAuthority: f.caFile},
			user:    &clientcmdapi.AuthInfo{ClientCertificate: f.certFile, ClientKey: f.keyFile},
			want: want{server: "https://10.0.0.1:6443", serverName: "10.0.0.1",
				ca: Source{Path: f.caFile}, cert: Source{Path: f.certFile}, key: Source{Path: f.keyFile}, credCN: "alice"},
		},
		{
			name:    "inline data",
			cluster: &clientcmdapi.Cluster{Server: "https://kubernetes:6443", CertificateAuthorityData: f.ca.CertPEM},
			user:    &clientcmdapi.AuthInfo{ClientCertificateData: f.alice.CertPEM, ClientKeyData: f.alice.KeyPEM},
			want: want{server: "https://kubernetes:6443", serverName: "kubernetes",
				ca: Source{Data: f.ca.CertPEM}, cert: Source{Data: f.alice.CertPEM}, key: Source{Data: f.alice.KeyPEM}, credCN: "alice"},
		},
		{
			name:    "token",
			cluster: &clientcmdapi.Cluster{Server: "https://10.0.0.1:6443", CertificateAuthority: f.caFile, TLSServerName: "kubernetes"},
			user:    &clientcmdapi.AuthInfo{Token: "inline-token"},
			want: want{server: "https://10.0.0.1:6443", serverName: "kubernetes",
				ca: Source{Path: f.caFile}, token: Source{Data: []byte("inline-token")}, credToken: "inline-token"},
		},
		{
			name:    "tokenFile wins over token, with certificate",
			cluster: &clientcmdapi.Cluster{Server: "https://10.0.0.1:6443", CertificateAuthority: f.caFile},
			user:    &clientcmdapi.AuthInfo{ClientCertificate: f.certFile, ClientKey: f.keyFile, Token: "ignored", TokenFile: tokenFile},
			want: want{server: "https://10.0.0.1:6443", serverName: "10.0.0.1",
				ca: Source{Path: f.caFile}, cert: Source{Path: f.certFile}, key: Source{Path: f.keyFile},
				token: Source{Path: tokenFile}, credToken: "file-token", credCN: "alice"},
		},
		{
			name:    "relative paths",
			dir:     relDir,
			cluster: &clientcmdapi.Cluster{Server: "https://kubernetes", CertificateAuthority: "ca.crt"},
			user:    &clientcmdapi.AuthInfo{ClientCertificate: "creds/alice.crt", ClientKey: "./creds/alice.key", TokenFile: "../token"},
			want: want{server: "https://kubernetes", serverName: "kubernetes",
				ca: Source{Path: filepath.Join(relDir, "ca.crt")}, cert: Source{Path: filepath.Join(relDir, "creds/alice.crt")},
				key: Source{Path: filepath.Join(relDir, "creds/alice.key")}, token: Source{Path: tokenFile},
				credToken: "file-token", credCN: "alice"},
		},
		{
			name:    "no CA: system roots",
			cluster: &clientcmdapi.Cluster{Server: "https://api.example.com"},
			user:    &clientcmdapi.AuthInfo{Token: "t"},
			want:    want{server: "https://api.example.com", serverName: "api.example.com", token: Source{Data: []byte("t")}, credToken: "t", systemCA: true},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := tc.dir
			if dir == "" {
				dir = t.TempDir()
			}
			path := writeKubeconfig(t, dir, "kubeconfig", tc.cluster, tc.user)
			up, err := LoadKubeconfig(path)
			if err != nil {
				t.Fatalf("LoadKubeconfig: %v", err)
			}
			w := tc.want
			if up.Server.String() != w.server || up.ServerName != w.serverName {
				t.Errorf("server %q name %q, want %q %q", up.Server, up.ServerName, w.server, w.serverName)
			}
			for _, s := range []struct {
				what      string
				got, want Source
			}{{"CA", up.CA, w.ca}, {"client cert", up.ClientCert, w.cert}, {"client key", up.ClientKey, w.key}, {"token", up.Token, w.token}} {
				if s.got.Path != s.want.Path || string(s.got.Data) != string(s.want.Data) {
					t.Errorf("%s = %s %q, want %s %q", s.what, s.got, s.got.Data, s.want, s.want.Data)
				}
			}

			creds, err := NewCredentials(up)
			if err != nil {
				t.Fatalf("NewCredentials: %v", err)
			}
			if tok, _ := creds.Token(); tok != w.credToken {
				t.Errorf("Token() = %q, want %q", tok, w.credToken)
			}
			cert, _ := creds.ClientCertificate()
			switch {
			case w.credCN == "" && cert != nil:
				t.Errorf("ClientCertificate() = %v, want none", cert)
			case w.credCN != "" && (cert == nil || cert.Leaf.Subject.CommonName != w.credCN):
				t.Errorf("ClientCertificate() = %v, want CN %q", cert, w.credCN)
			}
			if w.systemCA {
				if creds.RootCAs() != nil {
					t.Errorf("RootCAs() is not nil, want the system roots")
				}
			} else if _, err := f.serving.Leaf.Verify(x509.VerifyOptions{Roots: creds.RootCAs(), DNSName: "kubernetes"}); err != nil {
				t.Errorf("RootCAs() does not verify the apiserver certificate: %v", err)
			}
		})
	}
}

func TestLoadKubeconfigErrors(t *testing.T) {
	f := newFixture(t)
	okCluster := func() *clientcmdapi.Cluster {
		return &clientcmdapi.Cluster{Server: "https://10.0.0.1:6443", CertificateAuthority: f.caFile}
	}
	okUser := func() *clientcmdapi.AuthInfo {
		return &clientcmdapi.AuthInfo{ClientCertificate: f.certFile, ClientKey: f.keyFile}
	}
	withCluster := func(mod func(*clientcmdapi.Cluster)) func(*clientcmdapi.Config) {
		return func(c *clientcmdapi.Config) { mod(c.Clusters["c"]) }
	}
	withUser := func(mod func(*clientcmdapi.AuthInfo)) func(*clientcmdapi.Config) {
		return func(c *clientcmdapi.Config) { mod(c.AuthInfos["u"]) }
	}
	for _, tc := range []struct {
		name   string
		mod    func(*clientcmdapi.Config)
		raw    *string // file content instead of a generated config
		noFile bool
		wantIn string
	}{
		{name: "missing file", noFile: true, wantIn: "kubeconfig not found"},
		{name: "empty file", raw: new(string), wantIn: "no current-context"},
		{name: "not YAML", raw: ptr("{{{"), wantIn: "reading kubeconfig"},
		{name: "no current context", mod: func(c *clientcmdapi.Config) { c.CurrentContext = "" }, wantIn: "no current-context"},
		{name: "current context undefined", mod: func(c *clientcmdapi.Config) { c.CurrentContext = "gone" }, wantIn: `current-context "gone" is not among`},
		{name: "cluster undefined", mod: func(c *clientcmdapi.Config) { c.Contexts["ctx"].Cluster = "gone" }, wantIn: `cluster "gone"`},
		{name: "user undefined", mod: func(c *clientcmdapi.Config) { c.Contexts["ctx"].AuthInfo = "gone" }, wantIn: `user "gone"`},
		{name: "exec plugin", mod: withUser(func(u *clientcmdapi.AuthInfo) {
			u.Exec = &clientcmdapi.ExecConfig{Command: "aws", APIVersion: "client.authentication.k8s.io/v1", InteractiveMode: clientcmdapi.NeverExecInteractiveMode}
		}), wantIn: "exec credential plugins are not supported: give fanout a kubeconfig with client-certificate/client-key or token/tokenFile"},
		{name: "auth provider", mod: withUser(func(u *clientcmdapi.AuthInfo) { u.AuthProvider = &clientcmdapi.AuthProviderConfig{Name: "oidc"} }), wantIn: `auth-provider "oidc" is not supported`},
		{name: "basic auth", mod: withUser(func(u *clientcmdapi.AuthInfo) { u.Username, u.Password = "admin", "pw" }), wantIn: "basic authentication"},
		{name: "impersonation", mod: withUser(func(u *clientcmdapi.AuthInfo) { u.Impersonate = "bob" }), wantIn: "impersonation"},
		{name: "insecure skip verify", mod: withCluster(func(c *clientcmdapi.Cluster) { c.InsecureSkipTLSVerify, c.CertificateAuthority = true, "" }), wantIn: "fanout requires a CA to verify kube-apiserver"},
		{name: "http server", mod: withCluster(func(c *clientcmdapi.Cluster) { c.Server = "http://10.0.0.1:8080" }), wantIn: "not https"},
		{name: "no server", mod: withCluster(func(c *clientcmdapi.Cluster) { c.Server = "" }), wantIn: "has no server"},
		{name: "server with path", mod: withCluster(func(c *clientcmdapi.Cluster) { c.Server = "https://lb/k8s/clusters/x" }), wantIn: "only https://HOST:PORT"},
		{name: "proxy", mod: withCluster(func(c *clientcmdapi.Cluster) { c.ProxyURL = "http://proxy:3128" }), wantIn: "proxy-url"},
		{name: "CA file and data", mod: withCluster(func(c *clientcmdapi.Cluster) { c.CertificateAuthorityData = f.ca.CertPEM }), wantIn: "both certificate-authority and certificate-authority-data"},
		{name: "certificate without key", mod: withUser(func(u *clientcmdapi.AuthInfo) { u.ClientKey = "" }), wantIn: "no client key"},
		{name: "key without certificate", mod: withUser(func(u *clientcmdapi.AuthInfo) { u.ClientCertificate = "" }), wantIn: "no client certificate"},
		{name: "certificate file and data", mod: withUser(func(u *clientcmdapi.AuthInfo) { u.ClientCertificateData = f.alice.CertPEM }), wantIn: "both client-certificate and client-certificate-data"},
		{name: "no credentials", mod: withUser(func(u *clientcmdapi.AuthInfo) { *u = clientcmdapi.AuthInfo{} }), wantIn: "carries no credentials"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "kubeconfig")
			switch {
			case tc.noFile:
			case tc.raw != nil:
				testkit.WriteFile(t, dir, "kubeconfig", []byte(*tc.raw))
			default:
				cfg := clientcmdapi.NewConfig()
				cfg.Clusters["c"] = okCluster()
				cfg.AuthInfos["u"] = okUser()
				cfg.Contexts["ctx"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
				cfg.CurrentContext = "ctx"
				tc.mod(cfg)
				if err := clientcmd.WriteToFile(*cfg, path); err != nil {
					t.Fatal(err)
				}
			}
			up, err := LoadKubeconfig(path)
			if err == nil {
				t.Fatalf("LoadKubeconfig accepted it: %+v", up)
			}
			if !strings.Contains(err.Error(), tc.wantIn) {
				t.Errorf("error %q does not say %q", err, tc.wantIn)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestNewCredentialsErrors(t *testing.T) {
	f := newFixture(t)
	bob := f.ca.Client("bob")
	notPEM := testkit.WriteFile(t, f.dir, "garbage", []byte("not a certificate"))
	empty := testkit.WriteFile(t, f.dir, "empty-token", []byte(" \n"))
	missing := filepath.Join(f.dir, "missing")
	for _, tc := range []struct {
		name   string
		up     Upstream
		wantIn string
	}{
		{"CA not PEM", Upstream{CA: Source{Path: notPEM}, Token: Source{Data: []byte("t")}}, "holds no PEM certificate"},
		{"CA missing", Upstream{CA: Source{Path: missing}, Token: Source{Data: []byte("t")}}, "reading certificate-authority"},
		{"certificate and key mismatch", Upstream{ClientCert: Source{Data: f.alice.CertPEM}, ClientKey: Source{Data: bob.KeyPEM}}, "not a usable key pair"},
		{"key file missing", Upstream{ClientCert: Source{Path: f.certFile}, ClientKey: Source{Path: missing}}, "reading client-key"},
		{"tokenFile missing", Upstream{Token: Source{Path: missing}}, "tokenFile"},
		{"tokenFile empty", Upstream{Token: Source{Path: empty}}, "is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewCredentials(&tc.up)
			if err == nil || !strings.Contains(err.Error(), tc.wantIn) {
				t.Errorf("NewCredentials: %v, want an error saying %q", err, tc.wantIn)
			}
		})
	}
	if _, err := NewCredentials(nil); err == nil {
		t.Error("NewCredentials(nil) succeeded")
	}
}
