package certs

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/fanout-dev/fanout/internal/testkit"
)

// kubeconfigView is what fanout reads of a kubeconfig, in a form both
// loaders can fill.
type kubeconfigView struct {
	Current  string
	Clusters map[string]kubeconfigCluster
	Users    map[string]userView
	Contexts map[string]kubeconfigContext
}

type userView struct {
	kubeconfigUser
	AuthProvider string
	Exec         bool
}

func viewOfClientcmd(c *clientcmdapi.Config) kubeconfigView {
	v := kubeconfigView{Current: c.CurrentContext, Clusters: map[string]kubeconfigCluster{}, Users: map[string]userView{}, Contexts: map[string]kubeconfigContext{}}
	for n, c := range c.Clusters {
		v.Clusters[n] = kubeconfigCluster{Server: c.Server, TLSServerName: c.TLSServerName, InsecureSkipTLSVerify: c.InsecureSkipTLSVerify,
			CertificateAuthority: c.CertificateAuthority, CertificateAuthorityData: c.CertificateAuthorityData, ProxyURL: c.ProxyURL}
	}
	for n, u := range c.AuthInfos {
		uv := userView{kubeconfigUser: kubeconfigUser{
			ClientCertificate: u.ClientCertificate, ClientCertificateData: u.ClientCertificateData,
			ClientKey: u.ClientKey, ClientKeyData: u.ClientKeyData, Token: u.Token, TokenFile: u.TokenFile,
			Impersonate: u.Impersonate, ImpersonateUID: u.ImpersonateUID, ImpersonateGroups: u.ImpersonateGroups,
			ImpersonateUserExtra: u.ImpersonateUserExtra, Username: u.Username, Password: u.Password,
		}, Exec: u.Exec != nil}
		if u.AuthProvider != nil {
			uv.AuthProvider = u.AuthProvider.Name
		}
		v.Users[n] = uv
	}
	for n, c := range c.Contexts {
		v.Contexts[n] = kubeconfigContext{Cluster: c.Cluster, User: c.AuthInfo, Namespace: c.Namespace}
	}
	return v
}

func viewOfOwn(c *kubeconfig) kubeconfigView {
	v := kubeconfigView{Current: c.currentContext, Clusters: map[string]kubeconfigCluster{}, Users: map[string]userView{}, Contexts: map[string]kubeconfigContext{}}
	for n, c := range c.clusters {
		v.Clusters[n] = *c
	}
	for n, u := range c.users {
		uv := userView{kubeconfigUser: *u, Exec: u.Exec != nil}
		uv.kubeconfigUser.AuthProvider, uv.kubeconfigUser.Exec = nil, nil
		if u.AuthProvider != nil {
			uv.AuthProvider = u.AuthProvider.Name
		}
		v.Users[n] = uv
	}
	for n, c := range c.contexts {
		v.Contexts[n] = *c
	}
	return v
}

// normalizeEmpty makes nil and empty slices and maps compare equal: the
// loaders differ there and nothing in fanout tells them apart.
func normalizeEmpty(v kubeconfigView) kubeconfigView {
	for n, c := range v.Clusters {
		if len(c.CertificateAuthorityData) == 0 {
			c.CertificateAuthorityData = nil
		}
		v.Clusters[n] = c
	}
	for n, u := range v.Users {
		if len(u.ClientCertificateData) == 0 {
			u.ClientCertificateData = nil
		}
		if len(u.ClientKeyData) == 0 {
			u.ClientKeyData = nil
		}
		if len(u.ImpersonateGroups) == 0 {
			u.ImpersonateGroups = nil
		}
		if len(u.ImpersonateUserExtra) == 0 {
			u.ImpersonateUserExtra = nil
		}
		v.Users[n] = u
	}
	return v
}

// TestKubeconfigMatchesClientcmd loads the same kubeconfig files with
// client-go's clientcmd.LoadFromFile and ResolveLocalPaths and with
// loadKubeconfigFile: both must accept or both refuse each, and what they
// read (every cluster, user and context, with resolved paths) must be the
// same.
func TestKubeconfigMatchesClientcmd(t *testing.T) {
	pki := newFixture(t)
	caData := encodeB64(pki.ca.CertPEM)
	certData, keyData := encodeB64(pki.alice.CertPEM), encodeB64(pki.alice.KeyPEM)
	const tail = "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
	for _, tc := range []struct {
		name, body string
		wantErr    bool
	}{
		{"everything, with unknown fields", `apiVersion: v1
kind: Config
preferences: {colors: true}
extensions: [{name: e, extension: {a: b}}]
clusters:
- name: c
  cluster:
    server: https://10.0.0.1:6443
    tls-server-name: kubernetes
    certificate-authority: pki/ca.crt
    disable-compression: true
    extensions: [{name: e, extension: {x: 1}}]
- name: d
  cluster: {server: "https://d.example", certificate-authority-data: ` + caData + `, insecure-skip-tls-verify: true, proxy-url: "http://p:3128"}
users:
- name: u
  user:
    client-certificate: ./pki/alice.crt
    client-key: ../outside/alice.key
    tokenFile: token
    token: inline
    unknown: 1
- name: v
  user: {client-certificate-data: ` + certData + `, client-key-data: ` + keyData + `, as: bob, as-uid: "7", as-groups: [g1, g2], as-user-extra: {k: [v]}}
- name: w
  user: {username: a, password: b, auth-provider: {name: oidc, config: {k: v}}}
- name: e
  user: {exec: {command: ./aws, apiVersion: client.authentication.k8s.io/v1, interactiveMode: Never}}
- name: abs
  user: {client-certificate: /etc/x.crt, client-key: /etc/x.key, tokenFile: /var/t}
contexts:
- name: x
  context: {cluster: c, user: u, namespace: ns, extensions: []}
- name: second
  context: {cluster: d, user: v}
current-context: x
`, false},
		{"JSON", `{"apiVersion":"v1","kind":"Config","clusters":[{"name":"c","cluster":{"server":"https://k:6443","certificate-authority-data":` + caData + `}}],"users":[{"name":"u","user":{"token":"abc","tokenFile":"t"}}],"contexts":[{"name":"x","context":{"cluster":"c","user":"u"}}],"current-context":"x"}`, false},
		{"no apiVersion and kind", "clusters: [{name: c, cluster: {server: https://k}}]\nusers: [{name: u, user: {token: t}}]\n" + tail, false},
		{"names are case-sensitive", "clusters: [{name: c, cluster: {Server: https://k, server: https://s}}]\nusers: [{name: u, User: {token: t}}]\n" + tail, false},
		{"empty file", "", false},
		{"only comments", "# nothing\n", false},
		{"null lists", "apiVersion: v1\nkind: Config\nclusters: null\nusers: null\ncontexts: null\n", false},
		{"YAML bool forms", "clusters: [{name: c, cluster: {server: https://k, insecure-skip-tls-verify: yes}}]\n", false},
		{"apiVersion v2", "apiVersion: v2\nkind: Config\n", true},
		{"kind Pod", "apiVersion: v1\nkind: Pod\n", true},
		{"broken YAML", "clusters: [\n", true},
		{"not a mapping", "- a\n- b\n", true},
		{"a scalar", "hello\n", true},
		{"bad base64", "clusters: [{name: c, cluster: {server: https://k, certificate-authority-data: '!!notbase64'}}]\n", true},
		{"data is a number", "clusters: [{name: c, cluster: {server: https://k, certificate-authority-data: 12}}]\n", true},
		{"server is a list", "clusters: [{name: c, cluster: {server: [a]}}]\n", true},
		{"duplicate cluster", "clusters: [{name: c, cluster: {server: https://a}}, {name: c, cluster: {server: https://b}}]\n", true},
		{"duplicate user", "users: [{name: u, user: {token: a}}, {name: u, user: {token: b}}]\n", true},
		{"duplicate context", "contexts: [{name: x, context: {cluster: a}}, {name: x, context: {cluster: b}}]\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "conf")
			path := testkit.WriteFile(t, dir, "kubeconfig", []byte(tc.body))
			ref, refErr := clientcmd.LoadFromFile(path)
			if refErr == nil {
				refErr = clientcmd.ResolveLocalPaths(ref)
			}
			own, err := loadKubeconfigFile(path)
			if (refErr != nil) != tc.wantErr {
				t.Fatalf("clientcmd: %v, want error %v: the case is wrong", refErr, tc.wantErr)
			}
			switch {
			case refErr != nil && err != nil:
				t.Logf("both refuse it; ours says: %v", err)
				return
			case refErr != nil:
				t.Fatalf("clientcmd refuses it (%v), loadKubeconfigFile accepts it: %+v", refErr, viewOfOwn(own))
			case err != nil:
				t.Fatalf("loadKubeconfigFile: %v; clientcmd accepts it: %+v", err, viewOfClientcmd(ref))
			}
			want, got := normalizeEmpty(viewOfClientcmd(ref)), normalizeEmpty(viewOfOwn(own))
			if !reflect.DeepEqual(got, want) {
				t.Errorf("loadKubeconfigFile read\n%+v\nclientcmd read\n%+v", got, want)
			}
		})
	}
}

// TestWrittenKubeconfigsLoadWithClientcmd checks that both kubeconfigs
// fanout writes are read by client-go with every field in place.
func TestWrittenKubeconfigsLoadWithClientcmd(t *testing.T) {
	dir := t.TempDir()
	ca, err := NewLocalCA("127.0.0.1", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	plain, tls := filepath.Join(dir, "plain"), filepath.Join(dir, "tls")
	if err := WriteKubeconfig(plain, "127.0.0.1:7080"); err != nil {
		t.Fatal(err)
	}
	if err := WriteKubeconfigTLS(tls, "127.0.0.1:7443", ca); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		want *clientcmdapi.Config
	}{
		{plain, &clientcmdapi.Config{
			CurrentContext: "fanout",
			Clusters:       map[string]*clientcmdapi.Cluster{"fanout": {Server: "http://127.0.0.1:7080"}},
			AuthInfos:      map[string]*clientcmdapi.AuthInfo{"fanout": {}},
			Contexts:       map[string]*clientcmdapi.Context{"fanout": {Cluster: "fanout", AuthInfo: "fanout"}},
		}},
		{tls, &clientcmdapi.Config{
			CurrentContext: "fanout",
			Clusters:       map[string]*clientcmdapi.Cluster{"fanout": {Server: "https://127.0.0.1:7443", CertificateAuthorityData: ca.CertPEM}},
			AuthInfos:      map[string]*clientcmdapi.AuthInfo{"fanout": {ClientCertificateData: ca.ClientCertPEM, ClientKeyData: ca.ClientKeyPEM}},
			Contexts:       map[string]*clientcmdapi.Context{"fanout": {Cluster: "fanout", AuthInfo: "fanout"}},
		}},
	} {
		data, err := os.ReadFile(tc.path)
		if err != nil {
			t.Fatal(err)
		}
		got, err := clientcmd.Load(data)
		if err != nil {
			t.Fatalf("clientcmd.Load(%s): %v\n%s", tc.path, err, data)
		}
		if !reflect.DeepEqual(normalizeEmpty(viewOfClientcmd(got)), normalizeEmpty(viewOfClientcmd(tc.want))) {
			t.Errorf("client-go reads %s as %+v, want %+v\n%s", tc.path, viewOfClientcmd(got), viewOfClientcmd(tc.want), data)
		}
		if !strings.HasPrefix(string(data), "apiVersion: v1\n") {
			t.Errorf("%s does not start with apiVersion: v1:\n%s", tc.path, data)
		}
	}
}

func encodeB64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
