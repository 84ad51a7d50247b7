package certs

import (
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
)

// Source is where one piece of credential material lives: a file (Path,
// absolute) or inline kubeconfig data (Data). At most one is set.
type Source struct {
	Path string
	Data []byte
}

// IsSet reports whether the kubeconfig gave this material at all.
func (s Source) IsSet() bool { return s.Path != "" || len(s.Data) > 0 }

// Read returns the material, reading the file now if it is one.
func (s Source) Read() ([]byte, error) {
	if s.Path != "" {
		return os.ReadFile(s.Path)
	}
	return s.Data, nil
}

// String says where the material is, never what it is.
func (s Source) String() string {
	switch {
	case s.Path != "":
		return "file " + s.Path
	case len(s.Data) > 0:
		return "inline data"
	default:
		return "none"
	}
}

// Upstream is what fanout takes from the client's kubeconfig: where
// kube-apiserver is and how to authenticate to it as the client.
type Upstream struct {
	// Kubeconfig is the file this was loaded from.
	Kubeconfig string
	// Server is the current context's cluster server, https://host[:port]:
	// the endpoint to use when no other is configured.
	Server *url.URL
	// ServerName is the name to verify in kube-apiserver's serving
	// certificate: the cluster's tls-server-name, else Server's host.
	ServerName string
	// CA verifies kube-apiserver. Unset means the system roots: some
	// managed clusters serve a certificate from a public CA and their
	// kubeconfigs carry no CA.
	CA Source
	// ClientCert and ClientKey are both set or both unset.
	ClientCert Source
	ClientKey  Source
	// Token is the bearer token: inline (token) or a file (tokenFile),
	// which wins when both are given, as in client-go.
	Token Source
}

// LoadKubeconfig reads the kubeconfig at path and returns the cluster and
// user of its current context. Relative file paths in it are resolved
// against the kubeconfig's directory, as client-go does. It rejects what
// fanout cannot reproduce for every request (exec plugins, auth
// providers, basic auth, impersonation, proxies) and what would be unsafe
// (no TLS, no verification), saying what to change.
func LoadKubeconfig(path string) (*Upstream, error) {
	cfg, err := loadKubeconfigFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("kubeconfig not found (%v): pass the path of the kubeconfig the client would use", err)
		}
		return nil, fmt.Errorf("reading kubeconfig: %w", err)
	}
	if cfg.currentContext == "" {
		return nil, fmt.Errorf("kubeconfig has no current-context: set one (kubectl config use-context NAME --kubeconfig %s)", path)
	}
	kctx, ok := cfg.contexts[cfg.currentContext]
	if !ok {
		return nil, fmt.Errorf("current-context %q is not among the kubeconfig's contexts: fix current-context", cfg.currentContext)
	}
	cluster, ok := cfg.clusters[kctx.Cluster]
	if !ok {
		return nil, fmt.Errorf("context %q names cluster %q, which the kubeconfig does not define", cfg.currentContext, kctx.Cluster)
	}
	user, ok := cfg.users[kctx.User]
	if !ok {
		return nil, fmt.Errorf("context %q names user %q, which the kubeconfig does not define: fanout needs the client's credentials", cfg.currentContext, kctx.User)
	}
	up := &Upstream{Kubeconfig: path}
	if err := up.setCluster(kctx.Cluster, cluster); err != nil {
		return nil, err
	}
	if err := up.setUser(kctx.User, user); err != nil {
		return nil, err
	}
	return up, nil
}

func (up *Upstream) setCluster(name string, c *kubeconfigCluster) error {
	if c.Server == "" {
		return fmt.Errorf("cluster %q has no server: set it to https://HOST:PORT of kube-apiserver", name)
	}
	u, err := url.Parse(c.Server)
	if err != nil {
		return fmt.Errorf("cluster %q server %q is not a URL: %v", name, c.Server, err)
	}
	if u.Scheme != "https" {
		return fmt.Errorf("cluster %q server %q is not https: fanout only talks TLS to kube-apiserver", name, c.Server)
	}
	if u.Hostname() == "" {
		return fmt.Errorf("cluster %q server %q has no host", name, c.Server)
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
		return fmt.Errorf("cluster %q server %q has a path, query or user info: fanout supports only https://HOST:PORT", name, c.Server)
	}
	if c.ProxyURL != "" {
		return fmt.Errorf("cluster %q has proxy-url: fanout dials kube-apiserver endpoints directly and does not support proxies; remove proxy-url", name)
	}
	if c.InsecureSkipTLSVerify {
		return fmt.Errorf("cluster %q sets insecure-skip-tls-verify: fanout requires a CA to verify kube-apiserver; set certificate-authority or certificate-authority-data instead", name)
	}
	if c.CertificateAuthority != "" && len(c.CertificateAuthorityData) > 0 {
		return fmt.Errorf("cluster %q sets both certificate-authority and certificate-authority-data: keep one", name)
	}
	up.Server = u
	up.ServerName = c.TLSServerName
	if up.ServerName == "" {
		up.ServerName = u.Hostname()
	}
	up.CA = Source{Path: c.CertificateAuthority, Data: c.CertificateAuthorityData}
	return nil
}

func (up *Upstream) setUser(name string, a *kubeconfigUser) error {
	switch {
	case a.Exec != nil:
		return fmt.Errorf("user %q: exec credential plugins are not supported: give fanout a kubeconfig with client-certificate/client-key or token/tokenFile", name)
	case a.AuthProvider != nil:
		return fmt.Errorf("user %q: auth-provider %q is not supported: give fanout a kubeconfig with client-certificate/client-key or token/tokenFile", name, a.AuthProvider.Name)
	case a.Username != "" || a.Password != "":
		return fmt.Errorf("user %q: basic authentication (username/password) is not supported (kube-apiserver dropped it): use client-certificate/client-key or token/tokenFile", name)
	case a.Impersonate != "" || a.ImpersonateUID != "" || len(a.ImpersonateGroups) > 0 || len(a.ImpersonateUserExtra) > 0:
		return fmt.Errorf("user %q: impersonation (act-as) is not supported: remove act-as* or give fanout the impersonated user's credentials", name)
	case a.ClientCertificate != "" && len(a.ClientCertificateData) > 0:
		return fmt.Errorf("user %q sets both client-certificate and client-certificate-data: keep one", name)
	case a.ClientKey != "" && len(a.ClientKeyData) > 0:
		return fmt.Errorf("user %q sets both client-key and client-key-data: keep one", name)
	}
	up.ClientCert = Source{Path: a.ClientCertificate, Data: a.ClientCertificateData}
	up.ClientKey = Source{Path: a.ClientKey, Data: a.ClientKeyData}
	switch {
	case up.ClientCert.IsSet() && !up.ClientKey.IsSet():
		return fmt.Errorf("user %q has a client certificate but no client key: set client-key or client-key-data", name)
	case !up.ClientCert.IsSet() && up.ClientKey.IsSet():
		return fmt.Errorf("user %q has a client key but no client certificate: set client-certificate or client-certificate-data", name)
	}
	if a.TokenFile != "" {
		up.Token = Source{Path: a.TokenFile}
	} else if a.Token != "" {
		up.Token = Source{Data: []byte(a.Token)}
	}
	if !up.ClientCert.IsSet() && !up.Token.IsSet() {
		return fmt.Errorf("user %q carries no credentials: fanout would reach kube-apiserver anonymously; give it client-certificate/client-key or token/tokenFile", name)
	}
	return nil
}
