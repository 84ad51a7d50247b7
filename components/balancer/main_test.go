package balancer

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fanout-dev/fanout/resolver"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// seeded returns a deterministic Rand for single-goroutine tests.
func seeded(seed uint64) func(int) int {
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)).IntN
}

// endpoints parses specs "addr", "addr@zone" for an endpoint in a zone,
// and either with a "-" prefix for a draining one.
func endpoints(specs ...string) []resolver.Endpoint {
	out := make([]resolver.Endpoint, len(specs))
	for i, s := range specs {
		s, draining := strings.CutPrefix(s, "-")
		addr, zone, _ := strings.Cut(s, "@")
		out[i] = resolver.Endpoint{Address: addr, Zone: zone, Draining: draining}
	}
	return out
}

// newTest returns a balancer over addrs with a seeded rand. Call it in a
// synctest bubble: the tests count on time standing still but for their
// time.Sleeps.
func newTest(t testing.TB, cfg Config, seed uint64, addrs ...string) *Balancer {
	t.Helper()
	if cfg.Rand == nil {
		cfg.Rand = seeded(seed)
	}
	b, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	b.Update(endpoints(addrs...))
	return b
}

// backend says how an endpoint answers one short request.
type backend func(addr string) (time.Duration, int)

// runSequential plays n requests of a single sequential client: each one is
// picked, sleeps its latency on the bubble's clock, and is done before the
// next. It returns the number of picks per address.
func runSequential(t testing.TB, b *Balancer, n int, answer backend) map[string]int {
	t.Helper()
	return count(play(t, b, 1, n, nil, func(_ int, addr string, _ Class) (time.Duration, int) { return answer(addr) }))
}

// scripted says how an endpoint answers the i-th request of a script, of
// class c.
type scripted func(i int, addr string, c Class) (time.Duration, int)

// play plays n requests from clients closed-loop clients: each client
// sends its next request as soon as its previous one is done, so with more
// than one client requests overlap and in-flight counts matter. Request i
// is of class(i) (ClassOther when class is nil) and answered as answer
// says. Time is simulated on the bubble's clock, one completion at a time
// in time order (ties in order of issue), so the run is deterministic. It
// returns the address picked for each request, in order of issue.
func play(t testing.TB, b *Balancer, clients, n int, class func(i int) Class, answer scripted) []string {
	t.Helper()
	type req struct {
		p    Pick
		lat  time.Duration
		code int
		end  int64
		seq  int
	}
	picked := make([]string, 0, n)
	var open []req
	issue := func() {
		i := len(picked)
		c := ClassOther
		if class != nil {
			c = class(i)
		}
		p, err := b.Pick(PickInfo{Kind: Short, Class: c})
		if err != nil {
			t.Fatalf("Pick: %v", err)
		}
		addr := p.Endpoint.Address()
		lat, code := answer(i, addr, c)
		picked = append(picked, addr)
		open = append(open, req{p: p, lat: lat, code: code, end: time.Now().UnixNano() + int64(lat), seq: i})
	}
	for range min(clients, n) {
		issue()
	}
	for len(open) > 0 {
		k := 0
		for j, r := range open {
			if r.end < open[k].end || (r.end == open[k].end && r.seq < open[k].seq) {
				k = j
			}
		}
		r := open[k]
		open = append(open[:k], open[k+1:]...)
		time.Sleep(time.Until(time.Unix(0, r.end))) // no time passes for an end already reached
		r.p.Done(DoneInfo{StatusCode: r.code, Latency: r.lat})
		if len(picked) < n {
			issue()
		}
	}
	return picked
}

// count returns the number of picks per address.
func count(picked []string) map[string]int {
	got := map[string]int{}
	for _, a := range picked {
		got[a]++
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

// checkStates fails t unless each endpoint of states is in its state, with
// the probe and draining flags that state implies, Ready() is ready, and
// picks choose exactly the endpoints of picked (as pickedAddresses
// lists them).
func checkStates(t *testing.T, b *Balancer, states map[string]string, ready bool, picked string) {
	t.Helper()
	for addr, want := range states {
		s := status(t, b, addr)
		if s.State != want || s.ProbeReady != (want != StateNotReady) || s.Draining != (want == StateDraining) {
			t.Errorf("%s: state %q probe_ready %v draining %v, want %q", addr, s.State, s.ProbeReady, s.Draining, want)
		}
	}
	if got := b.Ready(); got != ready {
		t.Errorf("Ready() = %v, want %v", got, ready)
	}
	if g := pickedAddresses(t, b); g != picked {
		t.Errorf("picked %s, want %s", g, picked)
	}
}

// pickedAddresses picks 200 short and 200 long requests, finishing each,
// and returns the addresses that were chosen at least once, in address
// order, comma-separated.
func pickedAddresses(t *testing.T, b *Balancer) string {
	t.Helper()
	seen := map[string]bool{}
	for _, kind := range []Kind{Short, Long} {
		for range 200 {
			p, err := b.Pick(PickInfo{Kind: kind})
			if err != nil {
				t.Fatalf("Pick: %v", err)
			}
			seen[p.Endpoint.Address()] = true
			time.Sleep(time.Millisecond)
			p.Done(DoneInfo{StatusCode: 200, Latency: time.Millisecond})
		}
	}
	var got []string
	for _, s := range b.Endpoints() {
		if seen[s.Address] {
			got = append(got, s.Address)
		}
	}
	return strings.Join(got, ",")
}
