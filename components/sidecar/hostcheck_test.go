package sidecar

import "testing"

// TestHostCheckFollowsAllowRemote: the proxy's Host check (DNS rebinding)
// is on for the loopback listener, with and without --listen-tls, and off
// only with --allow-remote, whose clients use names fanout cannot know.
func TestHostCheckFollowsAllowRemote(t *testing.T) {
	for _, tc := range []struct {
		name          string
		set           func(*Options)
		wantAllowsAny bool
	}{
		{"loopback listener", func(*Options) {}, false},
		{"--listen-tls", func(o *Options) { o.ListenTLS, o.WriteKubeconfig = true, "/x" }, false},
		{"--allow-remote", func(o *Options) { o.ListenAddress, o.AllowRemote = "0.0.0.0:7080", true }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := NewOptions()
			tc.set(o)
			cfg, _, err := listenerConfig(*o)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.AllowAnyHost != tc.wantAllowsAny {
				t.Errorf("proxy AllowAnyHost = %v, want %v", cfg.AllowAnyHost, tc.wantAllowsAny)
			}
		})
	}
}
