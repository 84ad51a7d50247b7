package sidecar

import "testing"

// TestHostCheckFollowsAllowRemote: the proxy's Host check (DNS rebinding)
// is on for the loopback listener, with and without --listen-tls, and off
// only with --allow-remote, whose clients use names fanout cannot know.
func TestHostCheckFollowsAllowRemote(t *testing.T) {
	for _, tc := range []struct {
		name          string
		set           func(*Config)
		wantAllowsAny bool
	}{
		{"loopback listener", func(*Config) {}, false},
		{"--listen-tls", func(o *Config) { o.ListenTLS, o.WriteKubeconfig = true, "/x" }, false},
		{"--allow-remote", func(o *Config) { o.Listener.ListenAddress, o.Listener.AllowAnyHost = "0.0.0.0:7080", true }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := NewConfig()
			tc.set(o)
			cfg, _, err := listenerConfig(o)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.AllowAnyHost != tc.wantAllowsAny {
				t.Errorf("proxy AllowAnyHost = %v, want %v", cfg.AllowAnyHost, tc.wantAllowsAny)
			}
		})
	}
}
