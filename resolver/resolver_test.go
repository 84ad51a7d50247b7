package resolver

import (
	"context"
	"net/url"
	"reflect"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParse(t *testing.T) {
	def, _ := url.Parse("https://kube.example:6443")
	tests := []struct {
		name    string
		spec    string
		def     *url.URL
		want    []string
		wantErr string
	}{
		{"default server", "", def, []string{"kube.example:6443"}, ""},
		{"no default", "", nil, nil, "no --endpoints"},
		{"static list sorted and deduplicated", "https://10.0.0.12:6443, https://10.0.0.11:6443,https://10.0.0.12:6443", def,
			[]string{"10.0.0.11:6443", "10.0.0.12:6443"}, ""},
		{"default port", "https://10.0.0.11", def, []string{"10.0.0.11:443"}, ""},
		{"ipv6", "https://[fd00::1]:6443", def, []string{"[fd00::1]:6443"}, ""},
		{"trailing slash allowed", "https://10.0.0.11:6443/", def, []string{"10.0.0.11:6443"}, ""},
		{"http refused", "http://10.0.0.11:6443", def, nil, "scheme must be https"},
		{"bare host refused", "10.0.0.11:6443", def, nil, "expected https://host:port"},
		{"path refused", "https://10.0.0.11:6443/api", def, nil, "without path"},
		{"only commas", ",,", def, nil, "lists no endpoint"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustParse(t, tt.spec, Config{Fallback: tt.def}, tt.wantErr)
			if tt.wantErr != "" {
				return
			}
			var got []string
			for _, ep := range r.(Static).Endpoints {
				got = append(got, ep.Address)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Parse(%q) = %v, want %v", tt.spec, got, tt.want)
			}
		})
	}
}

func TestStaticRunPublishesOnceAndStops(t *testing.T) {
	s := Static{Endpoints: []Endpoint{{Address: "a:1"}, {Address: "b:1"}}}
	ctx, cancel := context.WithCancel(context.Background())
	updates := make(chan []Endpoint, 2)
	done := make(chan error)
	go func() { done <- s.Run(ctx, func(eps []Endpoint) { updates <- eps }) }()
	got := <-updates
	got[0].Address = "mutated"
	if s.Endpoints[0].Address != "a:1" {
		t.Fatal("the update shares the resolver's slice; consumers could corrupt it")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context was cancelled")
	}
	if len(updates) != 0 {
		t.Fatal("Static published more than one snapshot")
	}
}
