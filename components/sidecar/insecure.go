package sidecar

import (
	"log/slog"
	"net"

	"github.com/prometheus/client_golang/prometheus"
)

// insecureOptions lists the options in effect that weaken fanout's
// guarantees, for the startup warning and the fanout_insecure_option
// gauge. TLS verification toward kube-apiserver has no switch at all
// (certs.LoadKubeconfig refuses insecure-skip-tls-verify).
func insecureOptions(c *Config) []string {
	var opts []string
	if host, _, err := net.SplitHostPort(c.Listener.ListenAddress); err == nil {
		if ip := net.ParseIP(host); c.Listener.AllowAnyHost && (ip == nil || !ip.IsLoopback()) {
			opts = append(opts, "allow-remote")
		}
	}
	if c.AllowSharedLoopback && !c.ListenTLS {
		opts = append(opts, "allow-shared-loopback")
	}
	return opts
}

const insecureHelp = "1 for each option in effect that weakens fanout's guarantees (allow-remote: the listener, which acts with the client's credentials, is reachable beyond loopback; allow-shared-loopback: a plaintext listener in a network namespace shared with the node)."

// reportInsecure logs each insecure option at warning level and exports
// fanout_insecure_option{option} = 1 for it, so that an alert or an audit
// of /metrics finds a sidecar that serves credentials beyond loopback.
func reportInsecure(c *Config, log *slog.Logger, reg prometheus.Registerer) error {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "fanout_insecure_option",
		Help: insecureHelp,
	}, []string{"option"})
	for _, opt := range insecureOptions(c) {
		g.WithLabelValues(opt).Set(1)
		switch opt {
		case "allow-remote":
			log.Warn("INSECURE: --allow-remote: the listener is not on loopback, and anyone who reaches "+c.Listener.ListenAddress+
				" acts with the client's credentials; use it only on a network you trust", "option", opt, "address", c.Listener.ListenAddress)
		case "allow-shared-loopback":
			log.Warn("INSECURE: --allow-shared-loopback: a plaintext listener that acts with the client's credentials, reachable by every process "+
				"that shares this network namespace; use --listen-tls where the namespace is the node's", "option", opt, "address", c.Listener.ListenAddress)
		}
	}
	return reg.Register(g)
}
