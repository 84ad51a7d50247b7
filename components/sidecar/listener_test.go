package sidecar

import (
	"reflect"
	"testing"
	"time"

	"github.com/fanout-dev/fanout/components/proxy"
)

func TestListenerConfig(t *testing.T) {
	o := NewOptions()
	o.ListenAddress = "127.0.0.1:7080"
	o.Limits = LimitOptions{
		MaxConnections: 1, MaxInflight: 2, MaxLongRunning: 3, MaxConcurrentStreams: 4, MaxHeaderBytes: 5,
		ReadHeaderTimeout: 6 * time.Second, RequestBodyTimeout: 7 * time.Second, IdleTimeout: 8 * time.Second,
	}
	cfg, ca, err := listenerConfig(*o)
	if err != nil {
		t.Fatal(err)
	}
	want := proxy.Config{
		ListenAddress: "127.0.0.1:7080", ShutdownGrace: o.ShutdownGrace,
		MaxConnections: 1, MaxInflight: 2, MaxLongRunning: 3, MaxConcurrentStreams: 4, MaxHeaderBytes: 5,
		ReadHeaderTimeout: 6 * time.Second, RequestBodyTimeout: 7 * time.Second, IdleTimeout: 8 * time.Second,
	}
	if cfg.TLS != nil || ca != nil {
		t.Error("TLS without --listen-tls")
	}
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("proxy config = %+v, want %+v", cfg, want)
	}
	o.ListenTLS, o.WriteKubeconfig = true, "/x"
	cfg, ca, err = listenerConfig(*o)
	if err != nil || ca == nil || cfg.TLS == nil || len(cfg.TLS.Certificates) != 1 {
		t.Fatalf("--listen-tls: config %+v, CA %v, err %v", cfg.TLS, ca, err)
	}
}
