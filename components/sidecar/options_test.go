package sidecar

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/fanout-dev/fanout/components/cost"
	"github.com/fanout-dev/fanout/components/engine"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr string // substring; "" means valid
	}{
		{"defaults with kubeconfig", func(o *Config) {}, ""},
		{"missing kubeconfig", func(o *Config) { o.Kubeconfig = "" }, "--kubeconfig is required"},
		{"ipv6 loopback", func(o *Config) { o.Listener.ListenAddress = "[::1]:7080" }, ""},
		{"other 127/8 address", func(o *Config) { o.Listener.ListenAddress = "127.0.0.5:7080" }, ""},
		{"all interfaces refused", func(o *Config) { o.Listener.ListenAddress = ":7080" }, "refusing --listen-address"},
		{"0.0.0.0 refused", func(o *Config) { o.Listener.ListenAddress = "0.0.0.0:7080" }, "refusing --listen-address"},
		{"pod IP refused", func(o *Config) { o.Listener.ListenAddress = "10.1.2.3:7080" }, "--allow-remote"},
		{"name refused", func(o *Config) { o.Listener.ListenAddress = "localhost:7080" }, "refusing --listen-address"},
		{"ipv4-mapped loopback", func(o *Config) { o.Listener.ListenAddress = "[::ffff:127.0.0.1]:7080" }, ""},
		{"remote allowed explicitly", func(o *Config) { o.Listener.ListenAddress = "0.0.0.0:7080"; o.Listener.AllowAnyHost = true }, ""},
		{"no port", func(o *Config) { o.Listener.ListenAddress = "127.0.0.1" }, "expected host:port"},
		{"bad admin address", func(o *Config) { o.Admin.ListenAddress = "7081" }, "--admin-address"},
		{"unknown balancer", func(o *Config) { o.Engine.Balancer.Policy = "random" }, "--balancer"},
		{"negative grace", func(o *Config) { o.Listener.ShutdownGrace = -time.Second }, "--shutdown-grace"},
		{"bad log format", func(o *Config) { o.LogFormat = "xml" }, "--log-format"},
		{"probing off", func(o *Config) { o.Engine.Probe.Interval = 0 }, ""},
		{"discovery kubeconfig with endpointslice", func(o *Config) {
			o.Engine.Endpoints, o.DiscoveryKubeconfig = "endpointslice:///default/kubernetes", DiscoveryInCluster
		}, ""},
		{"discovery kubeconfig without endpointslice", func(o *Config) { o.DiscoveryKubeconfig = DiscoveryInCluster }, "only used by --endpoints endpointslice"},
		{"retry budget above 1", func(o *Config) { o.Engine.Proxy.RetryBudget.Ratio = 2 }, "--retry-budget must be within"},
		{"ejected fraction above 1", func(o *Config) { o.Engine.Balancer.MaxEjectedFraction = 1.5 }, "--max-ejected-fraction"},
		{"probe rise 0", func(o *Config) { o.Engine.Probe.Rise = 0 }, "--probe-rise"},
		{"outlier failures 0", func(o *Config) { o.Engine.Balancer.ConsecutiveFailures = 0 }, "--outlier-consecutive-failures"},
		{"listen-tls without write-kubeconfig", func(o *Config) { o.ListenTLS = true }, "--listen-tls needs --write-kubeconfig"},
		{"listen-tls", func(o *Config) { o.ListenTLS, o.WriteKubeconfig = true, "/shared/kubeconfig" }, ""},
		{"max-connections auto", func(o *Config) { o.Listener.MaxConnections = 0 }, ""},
		{"negative max-connections", func(o *Config) { o.Listener.MaxConnections = -1 }, "max connections -1"},
		{"unknown upstream HTTP/2 client", func(o *Config) { o.Engine.Transport.Client = "x/net" }, "--upstream-http2 must be"},
		{"negative max-inflight", func(o *Config) { o.Listener.MaxInflight = -1 }, "--max-inflight must be positive"},
		{"zero max-long-running", func(o *Config) { o.Listener.MaxLongRunning = 0 }, "--max-long-running must be positive"},
		{"zero body timeout", func(o *Config) { o.Listener.RequestBodyTimeout = 0 }, "--request-body-timeout must be positive"},
		{"zero idle timeout", func(o *Config) { o.Listener.IdleTimeout = 0 }, "--idle-timeout must be positive"},
		{"negative probe interval", func(o *Config) { o.Engine.Probe.Interval = -time.Second }, "--probe-interval must not be negative"},
		{"negative cost table size", func(o *Config) { o.Engine.Cost.Size = -1 }, "--cost-table-size must be within"},
		{"cost table off", func(o *Config) { o.Engine.Cost.Size = 0 }, ""},
		{"too many cost keys exported", func(o *Config) { o.Engine.Cost.MetricsTop = 100_000 }, "--cost-metrics-top must be within"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := NewConfig()
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

// TestCostFlags: the cost table's flags bind into the engine's Config,
// with the engine's defaults.
func TestCostFlags(t *testing.T) {
	o := NewConfig()
	if o.Engine.Cost != engine.Defaults().Cost || o.Engine.Cost.Size != cost.DefaultSize || o.Engine.Cost.MetricsTop != cost.DefaultMetricsTop {
		t.Errorf("defaults %+v, want the engine's %+v", o.Engine.Cost, engine.Defaults().Cost)
	}
	fs := pflag.NewFlagSet("fanout", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse([]string{"--cost-table-size=5", "--cost-metrics-top=2"}); err != nil {
		t.Fatal(err)
	}
	if want := (cost.Config{Size: 5, MetricsTop: 2}); o.Engine.Cost != want {
		t.Errorf("flags gave %+v, want %+v", o.Engine.Cost, want)
	}
}
