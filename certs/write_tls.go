package certs

import (
	"fmt"
	"net"
)

// WriteKubeconfigTLS writes to path a kubeconfig that sends the client to
// fanout's TLS listener (--listen-tls) at https://listenAddress, trusting
// ca and authenticating with ca's client certificate. It carries the
// loopback client key and nothing of the client's upstream credentials:
// that key opens fanout's listener and nothing else, and it dies with the
// sidecar (a new CA is made at every start).
//
// The file is replaced atomically, like WriteKubeconfig's, with mode 0600.
func WriteKubeconfigTLS(path, listenAddress string, ca *LocalCA) error {
	host, port, err := net.SplitHostPort(listenAddress)
	if err != nil || host == "" || port == "" {
		return fmt.Errorf("listen address %q is not HOST:PORT with a host clients can dial, such as 127.0.0.1:7080", listenAddress)
	}
	data, err := encodeKubeconfig(
		kubeconfigCluster{Server: "https://" + listenAddress, CertificateAuthorityData: ca.CertPEM},
		kubeconfigUser{ClientCertificateData: ca.ClientCertPEM, ClientKeyData: ca.ClientKeyPEM})
	if err != nil {
		return fmt.Errorf("encoding kubeconfig: %w", err)
	}
	return writeAtomic(path, data, 0o600)
}
