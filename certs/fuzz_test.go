package certs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzLoadKubeconfig feeds arbitrary bytes to LoadKubeconfig as the
// client's kubeconfig. It must never panic; a kubeconfig it accepts must
// name an https server with a host and a server name to verify, must not
// mix a client certificate without its key, and must point every file it
// references at a path, never at nothing.
func FuzzLoadKubeconfig(f *testing.F) {
	seeds := []string{
		`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://10.0.0.1:6443", certificate-authority-data: "AA==", tls-server-name: kubernetes}}]
users: [{name: u, user: {client-certificate: cert.pem, client-key: key.pem}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`,
		`{"apiVersion":"v1","kind":"Config","clusters":[{"name":"c","cluster":{"server":"https://k:6443"}}],"users":[{"name":"u","user":{"token":"abc","tokenFile":"/t"}}],"contexts":[{"name":"x","context":{"cluster":"c","user":"u"}}],"current-context":"x"}`,
		"apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"http://k\"}}]\nusers: [{name: u, user: {exec: {command: x, apiVersion: client.authentication.k8s.io/v1}}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n",
		"apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"https://k\", insecure-skip-tls-verify: true}}]\nusers: [{name: u, user: {username: a, password: b}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n",
		"", "{", "current-context: x", "\x00\xff",
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		path := filepath.Join(dir, "kubeconfig")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		up, err := LoadKubeconfig(path)
		if err != nil {
			if up != nil {
				t.Fatalf("both an Upstream and an error: %v", err)
			}
			if strings.TrimSpace(err.Error()) == "" {
				t.Fatal("failed with an empty message")
			}
			return
		}
		if up.Server == nil || up.Server.Scheme != "https" || up.Server.Hostname() == "" {
			t.Fatalf("accepted server %v; want https://host", up.Server)
		}
		if up.ServerName == "" {
			t.Fatal("accepted a kubeconfig without a server name to verify")
		}
		if up.ClientCert.IsSet() != up.ClientKey.IsSet() {
			t.Fatalf("client certificate set %v but key set %v", up.ClientCert.IsSet(), up.ClientKey.IsSet())
		}
		for _, s := range []Source{up.CA, up.ClientCert, up.ClientKey, up.Token} {
			if s.Path != "" && !filepath.IsAbs(s.Path) {
				t.Fatalf("file %q is not resolved against the kubeconfig's directory", s.Path)
			}
		}
	})
}
