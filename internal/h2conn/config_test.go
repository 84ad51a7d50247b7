package h2conn

import (
	"net"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestConfig: zero fields take their defaults, and New refuses windows
// HTTP/2 cannot announce, naming the field, before it writes anything.
func TestConfig(t *testing.T) {
	got, err := Config{}.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		MaxReceiveBufferPerStream:     1 << 20,
		MaxReceiveBufferPerConnection: 1000 << 20,
		MinReceiveBufferPerStream:     2 << 10,
		ShortAnswerWindow:             64 << 10,
		ReadIdleTimeout:               5 * time.Second,
		PingTimeout:                   3 * time.Second,
		IdleConnTimeout:               90 * time.Second,
		PrefaceTimeout:                5 * time.Second,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("defaults = %+v, want %+v", got, want)
	}
	if got, _ := (Config{MaxReceiveBufferPerStream: 4 << 20}).WithDefaults(); got.MaxReceiveBufferPerConnection != MaxConnectionWindow {
		t.Errorf("connection window for 4 MiB streams = %d, want it capped at %d", got.MaxReceiveBufferPerConnection, MaxConnectionWindow)
	}

	for _, tc := range []struct {
		name   string
		cfg    Config
		wantIn string
	}{
		{"connection window below the HTTP/2 minimum", Config{MaxReceiveBufferPerConnection: 1000}, "Config.MaxReceiveBufferPerConnection must be at least 65535"},
		// Granted on top of the initial 65,535 bytes: this would wrap.
		{"connection window plus the initial window too large", Config{MaxReceiveBufferPerConnection: 1<<31 - 1}, "Config.MaxReceiveBufferPerConnection exceeds 2^31-1"},
		{"stream window above connection window", Config{MaxReceiveBufferPerStream: 4 << 20, MaxReceiveBufferPerConnection: 1 << 20}, "Config.MaxReceiveBufferPerStream exceeds"},
		{"floor above the stream window", Config{MaxReceiveBufferPerStream: 64 << 10, MinReceiveBufferPerStream: 128 << 10}, "Config.MinReceiveBufferPerStream exceeds"},
		{"short answers' window above the stream window", Config{MaxReceiveBufferPerStream: 32 << 10, ShortAnswerWindow: 64 << 10}, "Config.ShortAnswerWindow exceeds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A pipe nobody reads: a write would block the test.
			nc, peer := net.Pipe()
			defer peer.Close()
			defer nc.Close()
			cc, err := New(nc, tc.cfg)
			if err == nil {
				cc.Close()
				t.Fatal("New accepted the config")
			}
			if !strings.Contains(err.Error(), tc.wantIn) {
				t.Errorf("New: %v, want an error mentioning %q", err, tc.wantIn)
			}
		})
	}
}
