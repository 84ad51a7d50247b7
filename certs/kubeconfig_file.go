package certs

import (
	"encoding/json/v2"
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/yaml"
)

// kubeconfigFile is the part of the kubeconfig v1 schema (client-go's
// clientcmd/api/v1.Config) that fanout reads or writes. Fields it does not
// name are ignored when reading, as client-go ignores unknown fields; the
// ones it names only to refuse them (exec, auth-provider, ...) are read
// just far enough to tell that they are set. Names are matched
// case-sensitively, as client-go does, hence encoding/json/v2.
type kubeconfigFile struct {
	APIVersion     string            `json:"apiVersion,omitempty"`
	Kind           string            `json:"kind,omitempty"`
	Clusters       []namedCluster    `json:"clusters"`
	Contexts       []namedContext    `json:"contexts"`
	CurrentContext string            `json:"current-context"`
	Preferences    struct{}          `json:"preferences"`
	Users          []namedKubeconfig `json:"users"`
}

type namedCluster struct {
	Name    string            `json:"name"`
	Cluster kubeconfigCluster `json:"cluster"`
}

type kubeconfigCluster struct {
	Server                   string `json:"server"`
	TLSServerName            string `json:"tls-server-name,omitempty"`
	InsecureSkipTLSVerify    bool   `json:"insecure-skip-tls-verify,omitempty"`
	CertificateAuthority     string `json:"certificate-authority,omitempty"`
	CertificateAuthorityData []byte `json:"certificate-authority-data,omitempty"`
	ProxyURL                 string `json:"proxy-url,omitempty"`
}

type namedKubeconfig struct {
	Name string         `json:"name"`
	User kubeconfigUser `json:"user"`
}

type kubeconfigUser struct {
	ClientCertificate     string              `json:"client-certificate,omitempty"`
	ClientCertificateData []byte              `json:"client-certificate-data,omitempty"`
	ClientKey             string              `json:"client-key,omitempty"`
	ClientKeyData         []byte              `json:"client-key-data,omitempty"`
	Token                 string              `json:"token,omitempty"`
	TokenFile             string              `json:"tokenFile,omitempty"`
	Impersonate           string              `json:"as,omitempty"`
	ImpersonateUID        string              `json:"as-uid,omitempty"`
	ImpersonateGroups     []string            `json:"as-groups,omitempty"`
	ImpersonateUserExtra  map[string][]string `json:"as-user-extra,omitempty"`
	Username              string              `json:"username,omitempty"`
	Password              string              `json:"password,omitempty"`
	AuthProvider          *struct {
		Name string `json:"name"`
	} `json:"auth-provider,omitempty"`
	Exec *struct{} `json:"exec,omitempty"`
}

type namedContext struct {
	Name    string            `json:"name"`
	Context kubeconfigContext `json:"context"`
}

type kubeconfigContext struct {
	Cluster   string `json:"cluster"`
	User      string `json:"user"`
	Namespace string `json:"namespace,omitempty"`
}

// kubeconfig is a loaded kubeconfig, by name, with relative file paths
// resolved.
type kubeconfig struct {
	clusters       map[string]*kubeconfigCluster
	users          map[string]*kubeconfigUser
	contexts       map[string]*kubeconfigContext
	currentContext string
}

// loadKubeconfigFile reads a kubeconfig as client-go's clientcmd.LoadFromFile
// and ResolveLocalPaths do: YAML or JSON, apiVersion v1 and kind Config
// (or neither), unknown fields ignored, names unique per list, and the
// relative file paths (certificate-authority, client-certificate,
// client-key, tokenFile) taken relative to the kubeconfig's directory.
func loadKubeconfigFile(path string) (*kubeconfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	j, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("not YAML or JSON: %w", err)
	}
	var f kubeconfigFile
	if err := json.Unmarshal(j, &f); err != nil {
		return nil, fmt.Errorf("not a kubeconfig (apiVersion v1, kind Config): %w", err)
	}
	if f.APIVersion != "" && f.APIVersion != "v1" || f.Kind != "" && f.Kind != "Config" {
		return nil, fmt.Errorf("apiVersion %q and kind %q: a kubeconfig has apiVersion v1 and kind Config", f.APIVersion, f.Kind)
	}
	base, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("resolving the directory of %s: %w", path, err)
	}
	resolve := func(p *string) {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(base, *p)
		}
	}
	kc := &kubeconfig{
		clusters:       map[string]*kubeconfigCluster{},
		users:          map[string]*kubeconfigUser{},
		contexts:       map[string]*kubeconfigContext{},
		currentContext: f.CurrentContext,
	}
	for i := range f.Clusters {
		c := &f.Clusters[i]
		if _, dup := kc.clusters[c.Name]; dup {
			return nil, fmt.Errorf("cluster %q is listed twice: keep one", c.Name)
		}
		resolve(&c.Cluster.CertificateAuthority)
		kc.clusters[c.Name] = &c.Cluster
	}
	for i := range f.Users {
		u := &f.Users[i]
		if _, dup := kc.users[u.Name]; dup {
			return nil, fmt.Errorf("user %q is listed twice: keep one", u.Name)
		}
		resolve(&u.User.ClientCertificate)
		resolve(&u.User.ClientKey)
		resolve(&u.User.TokenFile)
		kc.users[u.Name] = &u.User
	}
	for i := range f.Contexts {
		c := &f.Contexts[i]
		if _, dup := kc.contexts[c.Name]; dup {
			return nil, fmt.Errorf("context %q is listed twice: keep one", c.Name)
		}
		kc.contexts[c.Name] = &c.Context
	}
	return kc, nil
}

// encodeKubeconfig renders a one-context kubeconfig named clientName as
// clientcmd.Write does: YAML, keys sorted.
func encodeKubeconfig(cluster kubeconfigCluster, user kubeconfigUser) ([]byte, error) {
	return yaml.Marshal(kubeconfigFile{
		APIVersion:     "v1",
		Kind:           "Config",
		Clusters:       []namedCluster{{Name: clientName, Cluster: cluster}},
		Users:          []namedKubeconfig{{Name: clientName, User: user}},
		Contexts:       []namedContext{{Name: clientName, Context: kubeconfigContext{Cluster: clientName, User: clientName}}},
		CurrentContext: clientName,
	})
}
