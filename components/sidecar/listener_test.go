package sidecar

import (
	"reflect"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/fanout-dev/fanout/components/listener"
)

// TestListenerConfig: the listener's flags land in the listener's
// configuration, with nothing copied by hand in between.
func TestListenerConfig(t *testing.T) {
	o := parseFlags(t, "--listen-address", "127.0.0.1:7081",
		"--max-connections", "1", "--max-inflight", "2", "--max-long-running", "3", "--max-concurrent-streams", "4",
		"--max-header-bytes", "5", "--read-header-timeout", "6s", "--request-body-timeout", "7s", "--idle-timeout", "8s",
		"--shutdown-grace", "9s", "--h1-server", "std")
	cfg, ca, err := listenerConfig(o)
	if err != nil {
		t.Fatal(err)
	}
	want := listener.Config{
		ListenAddress: "127.0.0.1:7081", ShutdownGrace: 9 * time.Second,
		MaxConnections: 1, MaxInflight: 2, MaxLongRunning: 3, MaxConcurrentStreams: 4, MaxHeaderBytes: 5,
		ReadHeaderTimeout: 6 * time.Second, RequestBodyTimeout: 7 * time.Second, IdleTimeout: 8 * time.Second,
		H1Server: listener.H1ServerStd,
	}
	if cfg.TLS != nil || ca != nil {
		t.Error("TLS without --listen-tls")
	}
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("listener config = %+v, want %+v", cfg, want)
	}
	o.ListenTLS, o.WriteKubeconfig = true, "/x"
	cfg, ca, err = listenerConfig(o)
	if err != nil || ca == nil || cfg.TLS == nil || len(cfg.TLS.Certificates) != 1 {
		t.Fatalf("--listen-tls: config %+v, CA %v, err %v", cfg.TLS, ca, err)
	}
}

// parseFlags is the sidecar's Config after the flags in args.
func parseFlags(t *testing.T, args ...string) *Config {
	t.Helper()
	c := NewConfig()
	fs := pflag.NewFlagSet("fanout", pflag.ContinueOnError)
	c.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return c
}
