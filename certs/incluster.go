package certs

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
)

// In-cluster defaults: where the kubelet mounts a pod's ServiceAccount
// token and cluster CA, and the environment variables it sets to the
// kubernetes Service's address. They are what rest.InClusterConfig uses.
const (
	InClusterTokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"
	InClusterCAFile    = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
)

// InCluster says where the pod's ServiceAccount credentials are. The zero
// value uses the defaults above and the KUBERNETES_SERVICE_HOST and
// KUBERNETES_SERVICE_PORT environment variables; tests set the fields.
type InCluster struct {
	TokenFile string
	CAFile    string
	// Host and Port default to $KUBERNETES_SERVICE_HOST and
	// $KUBERNETES_SERVICE_PORT.
	Host, Port string
}

// LoadInCluster returns the Upstream of a client that uses in-cluster
// configuration: the kubernetes Service as server, the cluster CA, and the
// projected ServiceAccount token as a token file, which Credentials re-reads
// when the kubelet rotates it. Both files must exist now, so that a pod
// without a mounted token fails at start with a reason.
func LoadInCluster(ic InCluster) (*Upstream, error) {
	if ic.TokenFile == "" {
		ic.TokenFile = InClusterTokenFile
	}
	if ic.CAFile == "" {
		ic.CAFile = InClusterCAFile
	}
	if ic.Host == "" {
		ic.Host = os.Getenv("KUBERNETES_SERVICE_HOST")
	}
	if ic.Port == "" {
		ic.Port = os.Getenv("KUBERNETES_SERVICE_PORT")
	}
	if ic.Host == "" || ic.Port == "" {
		return nil, errors.New("in-cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set: fanout is not running in a pod; pass --kubeconfig instead")
	}
	for _, f := range []struct{ what, path string }{{"token", ic.TokenFile}, {"CA", ic.CAFile}} {
		if _, err := os.Stat(f.path); err != nil {
			return nil, fmt.Errorf("in-cluster: service account %s: %w; mount the pod's service account token (automountServiceAccountToken) or pass --kubeconfig", f.what, err)
		}
	}
	u, err := url.Parse("https://" + net.JoinHostPort(ic.Host, ic.Port))
	if err != nil {
		return nil, fmt.Errorf("in-cluster: KUBERNETES_SERVICE_HOST %q and KUBERNETES_SERVICE_PORT %q do not make a URL: %w", ic.Host, ic.Port, err)
	}
	return &Upstream{
		Server: u,
		// As rest.InClusterConfig: the Service address is verified in the
		// serving certificate, which every apiserver must carry for
		// in-cluster clients to work at all.
		ServerName: ic.Host,
		CA:         Source{Path: ic.CAFile},
		Token:      Source{Path: ic.TokenFile},
	}, nil
}
