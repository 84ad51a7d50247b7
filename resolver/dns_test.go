package resolver

import (
	"context"
	"errors"
	"net"
	"reflect"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

type lookupResult struct {
	ips []string
	err error
}

func TestDNS(t *testing.T) {
	fallback := []Endpoint{{Address: "kube.example:6443"}}
	ok := func(ips ...string) lookupResult { return lookupResult{ips: ips} }
	fail := lookupResult{err: errors.New("i/o timeout")}
	tests := []struct {
		name    string
		lookups []lookupResult
		// want holds, per lookup, the snapshot published after it, nil
		// for none.
		want       [][]string
		wantErrors float64
	}{
		{
			name:    "success, change, unchanged",
			lookups: []lookupResult{ok("10.0.0.2", "10.0.0.1"), ok("10.0.0.1", "10.0.0.3"), ok("10.0.0.3", "10.0.0.1")},
			want:    [][]string{{"10.0.0.1:6443", "10.0.0.2:6443"}, {"10.0.0.1:6443", "10.0.0.3:6443"}, nil},
		},
		{
			name:       "error keeps the last set",
			lookups:    []lookupResult{ok("10.0.0.1"), fail, ok("10.0.0.2")},
			want:       [][]string{{"10.0.0.1:6443"}, nil, {"10.0.0.2:6443"}},
			wantErrors: 1,
		},
		{
			name:       "empty keeps the last set",
			lookups:    []lookupResult{ok("10.0.0.1"), ok(), ok("10.0.0.1")},
			want:       [][]string{{"10.0.0.1:6443"}, nil, nil},
			wantErrors: 1,
		},
		{
			name:       "fallback until the first success",
			lookups:    []lookupResult{fail, ok(), ok("10.0.0.1")},
			want:       [][]string{{"kube.example:6443"}, nil, {"10.0.0.1:6443"}},
			wantErrors: 2,
		},
		{
			name:    "ipv6",
			lookups: []lookupResult{ok("fd00::1", "10.0.0.1")},
			want:    [][]string{{"10.0.0.1:6443", "[fd00::1]:6443"}},
		},
	}
	for _, tt := range tests {
		// In a bubble the resolver's real ticker runs on virtual time:
		// the next lookup comes a second later, as soon as the test waits
		// for it.
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				results := make(chan lookupResult)
				m := NewMetrics()
				d := &DNS{
					Host: "kube.example", Port: "6443", Interval: time.Second,
					Fallback: fallback, Metrics: m,
					Lookup: func(ctx context.Context, host string) ([]net.IPAddr, error) {
						if host != "kube.example" {
							t.Errorf("looked up %q, want kube.example", host)
						}
						select {
						case r := <-results:
							var out []net.IPAddr
							for _, ip := range r.ips {
								out = append(out, net.IPAddr{IP: net.ParseIP(ip)})
							}
							return out, r.err
						case <-ctx.Done():
							return nil, ctx.Err()
						}
					},
				}
				updates, stop := runResolver(t, d)
				defer stop()
				for i, r := range tt.lookups {
					results <- r
					got := nextUpdate(t, updates, tt.want[i] != nil)
					if !reflect.DeepEqual(addresses(got), orNil(tt.want[i])) {
						t.Fatalf("after lookup %d: published %v, want %v", i, addresses(got), tt.want[i])
					}
				}
				if got := testutil.ToFloat64(m.errors.WithLabelValues("dns")); got != tt.wantErrors {
					t.Errorf("fanout_resolver_errors_total = %v, want %v", got, tt.wantErrors)
				}
			})
		})
	}
}

func orNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// runResolver runs r until stop, which waits for Run to return. Updates
// are buffered.
func runResolver(t *testing.T, r Resolver) (<-chan []Endpoint, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	updates := make(chan []Endpoint, 16)
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx, func(eps []Endpoint) { updates <- eps }) }()
	return updates, func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run = %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return after its context was cancelled")
		}
	}
}

// nextUpdate returns the snapshot published by now if one is expected,
// else checks that there is none, once every goroutine of the bubble is
// blocked.
func nextUpdate(t *testing.T, updates <-chan []Endpoint, expect bool) []Endpoint {
	t.Helper()
	synctest.Wait()
	select {
	case u := <-updates:
		if !expect {
			t.Fatalf("unexpected update %v", addresses(u))
		}
		return u
	default:
		if expect {
			t.Fatal("no update")
		}
	}
	return nil
}

func TestDNSResolveNow(t *testing.T) {
	// In a bubble, "no lookup" is checked once every goroutine is idle
	// (synctest.Wait), not after a guessed real-time pause, and the
	// resolver's real clock moves only as far as the test sleeps.
	synctest.Test(t, func(t *testing.T) {
		lookups := make(chan time.Time, 16)
		d := &DNS{
			Host: "kube.example", Port: "6443", Interval: 5 * time.Second,
			Lookup: func(context.Context, string) ([]net.IPAddr, error) {
				lookups <- time.Now()
				return []net.IPAddr{{IP: net.ParseIP("10.0.0.1")}}, nil
			},
		}
		// A request made before Run is answered by the first lookup.
		d.ResolveNow()
		_, stop := runResolver(t, d)
		defer stop()
		expect := func(at time.Time) {
			t.Helper()
			select {
			case got := <-lookups:
				if !got.Equal(at) {
					t.Fatalf("lookup at %v, want at %v", got, at)
				}
			case <-time.After(10 * time.Second):
				// Virtual time: it passes only once the resolver is idle.
				t.Fatalf("no lookup within 10s, want one at %v", at)
			}
		}
		expectNone := func() {
			t.Helper()
			synctest.Wait()
			select {
			case got := <-lookups:
				t.Fatalf("unexpected lookup at %v", got)
			default:
			}
		}
		start := time.Now()
		expect(start)
		expectNone()

		// Long enough after the last lookup: at once.
		time.Sleep(2 * time.Second)
		d.ResolveNow()
		expect(start.Add(2 * time.Second))

		// Within MinResolveNowGap of it: the requests coalesce into one lookup
		// when the gap has passed.
		d.ResolveNow()
		d.ResolveNow()
		expectNone()
		d.ResolveNow()
		time.Sleep(MinResolveNowGap - time.Millisecond)
		expectNone()
		time.Sleep(time.Millisecond)
		expect(start.Add(2*time.Second + MinResolveNowGap))
		expectNone()

		// The ticker runs on regardless.
		time.Sleep(2 * time.Second)
		expect(start.Add(5 * time.Second))

		// A tick while a request waits answers it.
		time.Sleep(4*time.Second + 500*time.Millisecond)
		d.ResolveNow()
		expect(start.Add(9*time.Second + 500*time.Millisecond))
		d.ResolveNow()
		expectNone()
		time.Sleep(500 * time.Millisecond)
		expect(start.Add(10 * time.Second))
		time.Sleep(MinResolveNowGap)
		expectNone()
	})
}
