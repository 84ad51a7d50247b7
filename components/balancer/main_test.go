package balancer

import (
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fanout-dev/fanout/resolver"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fakeClock is a manual clock, safe for concurrent use.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).UnixNano())
	return c
}

func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// seeded returns a deterministic Rand for single-goroutine tests.
func seeded(seed uint64) func(int) int {
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)).IntN
}

func endpoints(addrs ...string) []resolver.Endpoint {
	out := make([]resolver.Endpoint, len(addrs))
	for i, a := range addrs {
		out[i] = resolver.Endpoint{Address: a}
	}
	return out
}

// newTest returns a balancer over addrs with a fake clock and seeded rand.
func newTest(t testing.TB, cfg Config, seed uint64, addrs ...string) (*Balancer, *fakeClock) {
	t.Helper()
	clock := newFakeClock()
	cfg.Now = clock.Now
	if cfg.Rand == nil {
		cfg.Rand = seeded(seed)
	}
	b, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	b.Update(endpoints(addrs...))
	return b, clock
}

// backend says how an endpoint answers one short request.
type backend func(addr string) (time.Duration, int)

// runSequential plays n requests of a single sequential client: each one is
// picked, takes its latency on the fake clock, and is done before the next.
// It returns the number of picks per address.
func runSequential(t testing.TB, b *Balancer, clock *fakeClock, n int, answer backend) map[string]int {
	t.Helper()
	got := map[string]int{}
	for range n {
		p, err := b.Pick(PickInfo{Kind: Short})
		if err != nil {
			t.Fatalf("Pick: %v", err)
		}
		addr := p.Endpoint.Address()
		lat, code := answer(addr)
		clock.Advance(lat)
		p.Done(DoneInfo{StatusCode: code, Latency: lat})
		got[addr]++
	}
	return got
}

func status(t testing.TB, b *Balancer, addr string) EndpointStatus {
	t.Helper()
	for _, s := range b.Endpoints() {
		if s.Address == addr {
			return s
		}
	}
	t.Fatalf("endpoint %s not found in %+v", addr, b.Endpoints())
	return EndpointStatus{}
}
