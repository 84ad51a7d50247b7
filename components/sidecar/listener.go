package sidecar

import (
	"fmt"
	"net"
	"time"

	"github.com/fanout-dev/fanout/certs"
	"github.com/fanout-dev/fanout/components/listener"
)

// listenerConfig is the loopback server's configuration from the flags
// (listener.Module; the handler's part is EngineConfig's). With
// --listen-tls it also makes the per-pod CA whose client certificate the
// listener requires; nil otherwise.
func listenerConfig(c *Config) (listener.Config, *certs.LocalCA, error) {
	cfg := c.Listener
	if !c.ListenTLS {
		return cfg, nil, nil
	}
	host, _, err := net.SplitHostPort(cfg.ListenAddress)
	if err != nil {
		return cfg, nil, fmt.Errorf("--listen-address %q: %w", cfg.ListenAddress, err)
	}
	ca, err := certs.NewLocalCA(host, time.Now())
	if err != nil {
		return cfg, nil, fmt.Errorf("--listen-tls: %w", err)
	}
	cfg.TLS = ca.ServerTLSConfig()
	return cfg, ca, nil
}

// writeClientKubeconfig writes the client's kubeconfig for the listener:
// plain, or with the loopback CA and client certificate.
func writeClientKubeconfig(path, addr string, ca *certs.LocalCA) error {
	if ca == nil {
		return certs.WriteKubeconfig(path, addr)
	}
	return certs.WriteKubeconfigTLS(path, addr, ca)
}

func clientURL(addr string, ca *certs.LocalCA) string {
	if ca == nil {
		return "http://" + addr
	}
	return "https://" + addr
}
