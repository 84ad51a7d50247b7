package sidecar

import (
	"strings"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*Options)
		wantErr string // substring; "" means valid
	}{
		{"defaults with kubeconfig", func(o *Options) {}, ""},
		{"missing kubeconfig", func(o *Options) { o.Kubeconfig = "" }, "--kubeconfig is required"},
		{"ipv6 loopback", func(o *Options) { o.ListenAddress = "[::1]:7080" }, ""},
		{"other 127/8 address", func(o *Options) { o.ListenAddress = "127.0.0.5:7080" }, ""},
		{"all interfaces refused", func(o *Options) { o.ListenAddress = ":7080" }, "refusing --listen-address"},
		{"0.0.0.0 refused", func(o *Options) { o.ListenAddress = "0.0.0.0:7080" }, "refusing --listen-address"},
		{"pod IP refused", func(o *Options) { o.ListenAddress = "10.1.2.3:7080" }, "--allow-remote"},
		{"name refused", func(o *Options) { o.ListenAddress = "localhost:7080" }, "refusing --listen-address"},
		{"ipv4-mapped loopback", func(o *Options) { o.ListenAddress = "[::ffff:127.0.0.1]:7080" }, ""},
		{"remote allowed explicitly", func(o *Options) { o.ListenAddress = "0.0.0.0:7080"; o.AllowRemote = true }, ""},
		{"no port", func(o *Options) { o.ListenAddress = "127.0.0.1" }, "expected host:port"},
		{"bad admin address", func(o *Options) { o.AdminAddress = "7081" }, "--admin-address"},
		{"unknown balancer", func(o *Options) { o.Balancer = "random" }, "--balancer"},
		{"negative grace", func(o *Options) { o.ShutdownGrace = -time.Second }, "--shutdown-grace"},
		{"bad log format", func(o *Options) { o.LogFormat = "xml" }, "--log-format"},
		{"probing off", func(o *Options) { o.ProbeInterval = 0 }, ""},
		{"discovery kubeconfig with endpointslice", func(o *Options) {
			o.Endpoints, o.DiscoveryKubeconfig = "endpointslice:///default/kubernetes", DiscoveryInCluster
		}, ""},
		{"discovery kubeconfig without endpointslice", func(o *Options) { o.DiscoveryKubeconfig = DiscoveryInCluster }, "only used by --endpoints endpointslice"},
		{"retry budget above 1", func(o *Options) { o.Resilience.RetryBudget = 2 }, "--retry-budget must be within"},
		{"ejected fraction above 1", func(o *Options) { o.Resilience.MaxEjectedFraction = 1.5 }, "--max-ejected-fraction"},
		{"probe rise 0", func(o *Options) { o.Resilience.ProbeRise = 0 }, "--probe-rise"},
		{"outlier failures 0", func(o *Options) { o.Resilience.ConsecutiveFailures = 0 }, "--outlier-consecutive-failures"},
		{"listen-tls without write-kubeconfig", func(o *Options) { o.ListenTLS = true }, "--listen-tls needs --write-kubeconfig"},
		{"listen-tls", func(o *Options) { o.ListenTLS, o.WriteKubeconfig = true, "/shared/kubeconfig" }, ""},
		{"zero max-connections", func(o *Options) { o.Limits.MaxConnections = 0 }, "--max-connections must be positive"},
		{"negative max-inflight", func(o *Options) { o.Limits.MaxInflight = -1 }, "--max-inflight must be positive"},
		{"zero max-long-running", func(o *Options) { o.Limits.MaxLongRunning = 0 }, "--max-long-running must be positive"},
		{"zero body timeout", func(o *Options) { o.Limits.RequestBodyTimeout = 0 }, "--request-body-timeout must be positive"},
		{"zero idle timeout", func(o *Options) { o.Limits.IdleTimeout = 0 }, "--idle-timeout must be positive"},
		{"negative probe interval", func(o *Options) { o.ProbeInterval = -time.Second }, "--probe-interval must not be negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := NewOptions()
			o.Kubeconfig = "/etc/kubernetes/controller-manager.conf"
			tt.mutate(o)
			err := o.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tt.wantErr != "" && err == nil:
				t.Fatalf("Validate() = nil, want error containing %q", tt.wantErr)
			case tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr):
				t.Fatalf("Validate() = %v, want error containing %q", err, tt.wantErr)
			}
		})
	}
}
