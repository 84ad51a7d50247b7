package balancer

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"
)

var policies = []string{PolicyLeastRequest, PolicyRoundRobin}

// noisy answers 200 after base ± jitter, from a seeded source.
func noisy(seed uint64, base, jitter map[string]time.Duration) backend {
	r := rand.New(rand.NewPCG(seed, 7))
	return func(addr string) (time.Duration, int) {
		j := jitter[addr]
		d := base[addr]
		if j > 0 {
			d += time.Duration(r.Int64N(int64(2*j+1))) - j
		}
		return d, 200
	}
}

// latencyNoise draws one latency of an equal backend.
type latencyNoise func(r *rand.Rand) time.Duration

var equalBackendNoise = []struct {
	name  string
	noise latencyNoise
}{
	{"10ms ± 1ms", func(r *rand.Rand) time.Duration {
		return 9*time.Millisecond + time.Duration(r.Int64N(int64(2*time.Millisecond)))
	}},
	{"10ms ± 5ms", func(r *rand.Rand) time.Duration {
		return 5*time.Millisecond + time.Duration(r.Int64N(int64(10*time.Millisecond)))
	}},
	// A long tail, as real apiserver latencies have.
	{"2ms + exponential 3ms", func(r *rand.Rand) time.Duration {
		return 2*time.Millisecond + time.Duration(r.ExpFloat64()*float64(3*time.Millisecond))
	}},
	// Rare stalls (GC, etcd) of ten times the usual latency.
	{"3ms, 1% at 30ms", func(r *rand.Rand) time.Duration {
		if r.IntN(100) == 0 {
			return 30 * time.Millisecond
		}
		return 3 * time.Millisecond
	}},
}

// A single sequential client (nothing ever in flight when it picks) over
// equal backends must see even shares whatever the noise on latencies.
func TestEqualBackendsShareEvenly(t *testing.T) {
	addrs := []string{"a:443", "b:443", "c:443"}
	for _, pol := range policies {
		for _, nt := range equalBackendNoise {
			t.Run(pol+"/"+nt.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					for seed := uint64(1); seed <= 20; seed++ {
						b := newTest(t, Config{Policy: pol}, seed, addrs...)
						r := rand.New(rand.NewPCG(seed, 7))
						const n = 3000
						got := runSequential(t, b, n, func(string) (time.Duration, int) { return nt.noise(r), 200 })
						for _, a := range addrs {
							share := 100 * float64(got[a]) / n
							if share < 100.0/3-5 || share > 100.0/3+5 {
								t.Errorf("seed %d: %s got %.1f%% of requests, want 33.3%% ± 5 (all: %v)", seed, a, share, got)
							}
						}
					}
				})
			})
		}
	}
}

// An endpoint back from a long ejection is favoured in ties for about
// DecayTime×ln 2 (the decayed served counts meet), not until it has served
// as many requests as its peer did meanwhile, which would be 30s here.
func TestRecoveredEndpointIsNotFlooded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newTest(t, Config{EjectBase: 30 * time.Second}, 12, "a:1", "b:1")
		steady := func(string) (time.Duration, int) { return 10 * time.Millisecond, 200 }
		runSequential(t, b, 1000, steady)
		ejectAll(t, b, "a:1")
		if got := runSequential(t, b, 3000, steady); got["a:1"] != 0 {
			t.Fatalf("ejected endpoint got %d requests", got["a:1"])
		}
		// 30s passed at 10ms a request: a is back.
		got := runSequential(t, b, 1000, steady)
		if got["b:1"] < 100 {
			t.Errorf("peer got %d of the 1000 requests after a came back, want at least 100 (all: %v)", got["b:1"], got)
		}
		// And it settles back to even shares.
		got = runSequential(t, b, 1000, steady)
		if got["a:1"] < 450 || got["a:1"] > 550 {
			t.Errorf("shares after recovery settled at %v, want 500 ± 50 each", got)
		}
	})
}

func TestLeastRequestSkewsToFasterBackend(t *testing.T) {
	tests := []struct {
		name     string
		base     map[string]time.Duration
		fast     string
		minShare float64
	}{
		{
			name:     "one fast of three",
			base:     map[string]time.Duration{"a:443": 50 * time.Millisecond, "b:443": 10 * time.Millisecond, "c:443": 50 * time.Millisecond},
			fast:     "b:443",
			minShare: 0.55, // P2C: the fast one wins every pair it is in (2/3)
		},
		{
			name:     "one fast of two",
			base:     map[string]time.Duration{"a:443": 10 * time.Millisecond, "b:443": 50 * time.Millisecond},
			fast:     "a:443",
			minShare: 0.8,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var addrs []string
				jitter := map[string]time.Duration{}
				for a, d := range tt.base {
					addrs = append(addrs, a)
					jitter[a] = d / 10
				}
				b := newTest(t, Config{}, 1, addrs...)
				const n = 3000
				got := runSequential(t, b, n, noisy(1, tt.base, jitter))
				if share := float64(got[tt.fast]) / n; share < tt.minShare {
					t.Errorf("fast backend %s got %.1f%% of requests, want at least %.0f%% (all: %v)", tt.fast, 100*share, 100*tt.minShare, got)
				}
			})
		})
	}
}

// A backend that answers fast with 429 or 5xx must lose traffic, not gain
// it; the 200 row shows the same fast answers do attract traffic when they
// are successes, so the penalty is what makes the difference. With
// concurrent clients the healthy endpoints carry many requests in flight
// and the failing one none, so the penalty must outweigh the in-flight
// count too.
func TestFastFailuresArePenalised(t *testing.T) {
	tests := []struct {
		code      int
		wantBelow float64 // share of the failing backend after it turns bad
		wantAbove float64
	}{
		{code: 429, wantBelow: 0.05},
		{code: 500, wantBelow: 0.05},
		{code: 503, wantBelow: 0.05},
		{code: 200, wantAbove: 0.5},
	}
	addrs := []string{"a:443", "b:443", "c:443"}
	for _, tt := range tests {
		for _, clients := range []int{1, 8, 32} {
			t.Run(fmt.Sprintf("%d/%d clients", tt.code, clients), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					b := newTest(t, Config{}, 3, addrs...)
					healthy := noisy(3, map[string]time.Duration{"a:443": 10 * time.Millisecond, "b:443": 10 * time.Millisecond, "c:443": 10 * time.Millisecond},
						map[string]time.Duration{"a:443": time.Millisecond, "b:443": time.Millisecond, "c:443": time.Millisecond})
					runSequential(t, b, 300, healthy)
					const n = 3000
					failing := func(_ int, addr string, _ Class) (time.Duration, int) {
						if addr == "b:443" {
							return time.Millisecond, tt.code
						}
						return healthy(addr)
					}
					var got map[string]int
					if clients == 1 {
						got = count(play(t, b, 1, n, nil, failing))
					} else {
						got = count(play(t, b, clients, n, nil, failing))
					}
					share := float64(got["b:443"]) / n
					if tt.wantBelow > 0 && share >= tt.wantBelow {
						t.Errorf("backend answering %d in 1ms got %.1f%% of requests, want below %.0f%% (all: %v)", tt.code, 100*share, 100*tt.wantBelow, got)
					}
					if tt.wantAbove > 0 && share <= tt.wantAbove {
						t.Errorf("backend answering %d in 1ms got %.1f%% of requests, want above %.0f%% (all: %v)", tt.code, 100*share, 100*tt.wantAbove, got)
					}
				})
			})
		}
	}
}

func TestLongRequestsBalancedByOpenCount(t *testing.T) {
	for _, pol := range policies {
		t.Run(pol, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				addrs := []string{"a:443", "b:443", "c:443"}
				b := newTest(t, Config{Policy: pol}, 11, addrs...)
				// Skew the latency estimates: long requests must ignore them.
				p, _ := b.Pick(PickInfo{Kind: Short})
				time.Sleep(500 * time.Millisecond)
				p.Done(DoneInfo{StatusCode: 200, Latency: 500 * time.Millisecond})
				before := map[string]float64{}
				for _, s := range b.Endpoints() {
					before[s.Address] = s.LatencyScore
				}

				var picks []Pick
				for range 30 {
					p, err := b.Pick(PickInfo{Kind: Long})
					if err != nil {
						t.Fatal(err)
					}
					picks = append(picks, p)
				}
				for _, s := range b.Endpoints() {
					if s.InflightLong < 9 || s.InflightLong > 11 {
						t.Errorf("%s has %d open long requests, want 10 ± 1 (all: %+v)", s.Address, s.InflightLong, b.Endpoints())
					}
					if s.InflightShort != 0 {
						t.Errorf("%s has %d short requests in flight, want 0", s.Address, s.InflightShort)
					}
				}
				// Ending watches, even with a latency, leaves the estimate alone.
				for _, p := range picks {
					p.Done(DoneInfo{StatusCode: 200, Latency: time.Hour})
				}
				for _, s := range b.Endpoints() {
					if s.LatencyScore != before[s.Address] {
						t.Errorf("%s latency estimate moved from %v to %v after long requests", s.Address, before[s.Address], s.LatencyScore)
					}
					if s.InflightLong != 0 {
						t.Errorf("%s has %d open long requests after Done, want 0", s.Address, s.InflightLong)
					}
				}
			})
		})
	}
}

// Long requests fill the emptiest endpoint first, even when it is the
// slowest.
func TestLongRequestsFillEmptiestEndpoint(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newTest(t, Config{}, 5, "a:443", "b:443", "c:443")
		var onC []Pick
		for range 6 {
			p, _ := b.Pick(PickInfo{Kind: Long})
			if p.Endpoint.Address() == "c:443" {
				onC = append(onC, p)
			}
		}
		if len(onC) != 2 {
			t.Fatalf("6 long picks put %d on c:443, want 2 (%+v)", len(onC), b.Endpoints())
		}
		for _, p := range onC {
			p.Done(DoneInfo{StatusCode: 200})
			p.Endpoint.score.Store(math.Float64bits(100))
		}
		// Now a and b hold 2 watches each, c none: the next two go to c.
		for i := range 2 {
			p, _ := b.Pick(PickInfo{Kind: Long})
			if got := p.Endpoint.Address(); got != "c:443" {
				t.Fatalf("long pick %d went to %s, want c:443 with the fewest open (%+v)", i, got, b.Endpoints())
			}
		}
	})
}

func TestAvoid(t *testing.T) {
	tests := []struct {
		name   string
		addrs  []string
		eject  []string
		kind   Kind
		avoid  string
		policy string
		want   []string // acceptable picks
	}{
		{name: "other usable", addrs: []string{"a:1", "b:1", "c:1"}, avoid: "b:1", want: []string{"a:1", "c:1"}},
		{name: "other usable long", addrs: []string{"a:1", "b:1", "c:1"}, avoid: "b:1", kind: Long, want: []string{"a:1", "c:1"}},
		{name: "other usable round-robin", policy: PolicyRoundRobin, addrs: []string{"a:1", "b:1", "c:1"}, avoid: "b:1", want: []string{"a:1", "c:1"}},
		{name: "only endpoint", addrs: []string{"a:1"}, avoid: "a:1", want: []string{"a:1"}},
		{name: "others ejected", addrs: []string{"a:1", "b:1", "c:1"}, eject: []string{"a:1", "c:1"}, avoid: "b:1", want: []string{"b:1"}},
		{name: "all ejected", addrs: []string{"a:1", "b:1", "c:1"}, eject: []string{"a:1", "b:1", "c:1"}, avoid: "b:1", want: []string{"a:1", "c:1"}},
		{name: "unknown address", addrs: []string{"a:1", "b:1"}, avoid: "z:1", want: []string{"a:1", "b:1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newTest(t, Config{Policy: tt.policy}, 9, tt.addrs...)
				ejectAll(t, b, tt.eject...)
				seen := map[string]int{}
				for range 200 {
					p, err := b.Pick(PickInfo{Kind: tt.kind, Avoid: tt.avoid})
					if err != nil {
						t.Fatal(err)
					}
					seen[p.Endpoint.Address()]++
					p.Done(DoneInfo{StatusCode: 200, Latency: 10 * time.Millisecond})
				}
				for a := range seen {
					ok := false
					for _, w := range tt.want {
						ok = ok || a == w
					}
					if !ok {
						t.Errorf("picked %s (%d times), want only %v", a, seen[a], tt.want)
					}
				}
				for _, w := range tt.want {
					if seen[w] == 0 {
						t.Errorf("never picked %s, want all of %v (saw %v)", w, tt.want, seen)
					}
				}
			})
		})
	}
}

// ejectAll fails one long request on each address with Unavailable.
func ejectAll(t testing.TB, b *Balancer, addrs ...string) {
	t.Helper()
	for _, a := range addrs {
		finishOn(t, b, longPick, a, DoneInfo{Err: errTest, Unavailable: true}, done200)
	}
}

// longPick and done200 are finishOn's usual info and others: a
// long-running request, and 200 for the picks that miss.
var (
	longPick = PickInfo{Kind: Long}
	done200  = DoneInfo{StatusCode: 200}
)

// finishOn picks as info says until addr comes up and finishes that pick
// with di; the picks before it finish with others.
func finishOn(t testing.TB, b *Balancer, info PickInfo, addr string, di, others DoneInfo) {
	t.Helper()
	for range 1000 {
		p, err := b.Pick(info)
		if err != nil {
			t.Fatal(err)
		}
		if p.Endpoint.Address() == addr {
			p.Done(di)
			return
		}
		p.Done(others)
	}
	t.Fatalf("could not pick %s in 1000 picks", addr)
}

func TestCandidates(t *testing.T) {
	tests := []struct {
		name       string
		ejected    []bool
		avoid      int // index, -1 none
		maxEjected float64
		want       []int
	}{
		{name: "all healthy", ejected: []bool{false, false, false}, avoid: -1, maxEjected: 1, want: []int{0, 1, 2}},
		{name: "skip ejected", ejected: []bool{false, true, false}, avoid: -1, maxEjected: 1, want: []int{0, 2}},
		{name: "skip ejected and avoided", ejected: []bool{false, true, false}, avoid: 2, maxEjected: 1, want: []int{0}},
		{name: "avoided is the only healthy", ejected: []bool{true, false, true}, avoid: 1, maxEjected: 1, want: []int{1}},
		{name: "all ejected", ejected: []bool{true, true, true}, avoid: -1, maxEjected: 1, want: []int{0, 1, 2}},
		{name: "all ejected, avoid", ejected: []bool{true, true, true}, avoid: 0, maxEjected: 1, want: []int{1, 2}},
		{name: "within fraction", ejected: []bool{true, false, false, false}, avoid: -1, maxEjected: 0.25, want: []int{1, 2, 3}},
		{name: "beyond fraction: panic", ejected: []bool{true, true, false, false}, avoid: -1, maxEjected: 0.25, want: []int{0, 1, 2, 3}},
		{name: "beyond fraction keeps avoid", ejected: []bool{true, true, false, false}, avoid: 3, maxEjected: 0.25, want: []int{0, 1, 2}},
	}
	const now = int64(1000)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newParams(Config{}.withDefaults())
			var eps []*Endpoint
			for i, ej := range tt.ejected {
				e := newEndpoint(string(rune('a'+i)), p, 0, 0, now)
				if ej {
					e.ejectedUntil.Store(now + 1)
				}
				eps = append(eps, e)
			}
			avoid := ""
			if tt.avoid >= 0 {
				avoid = eps[tt.avoid].address
			}
			c := newCandidates(eps, now, avoid, tt.maxEjected, nil, API{}, nil)
			if c.n != len(tt.want) {
				t.Fatalf("n = %d, want %d", c.n, len(tt.want))
			}
			for i, w := range tt.want {
				if got := c.at(i); got != eps[w] {
					t.Errorf("at(%d) = %s, want %s", i, got.address, eps[w].address)
				}
			}
		})
	}
}

func TestTie(t *testing.T) {
	ms := float64(time.Millisecond)
	tests := []struct {
		a, b float64
		want bool
	}{
		{10 * ms, 10 * ms, true},
		{10 * ms, 19 * ms, true},
		{10 * ms, 20 * ms, true},
		{10 * ms, 21 * ms, false},
		{10 * ms, 50 * ms, false},
		// Scores are relative: no absolute tolerance any more.
		{0.1 * ms, 1.1 * ms, false},
	}
	for _, tt := range tests {
		if got := tie(tt.a, tt.b); got != tt.want {
			t.Errorf("tie(%v, %v) = %v, want %v", tt.a/ms, tt.b/ms, got, tt.want)
		}
		if got := tie(tt.b, tt.a); got != tt.want {
			t.Errorf("tie(%v, %v) = %v, want %v", tt.b/ms, tt.a/ms, got, tt.want)
		}
	}
}

// With equal latencies, short requests go to the endpoint with fewer in
// flight.
func TestLeastRequestPrefersFewerInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newTest(t, Config{}, 4, "a:1", "b:1")
		var held []Pick
		for range 20 {
			p, _ := b.Pick(PickInfo{Kind: Short})
			held = append(held, p)
		}
		for _, s := range b.Endpoints() {
			if s.InflightShort != 10 {
				t.Errorf("%s has %d in flight, want 10 (all: %+v)", s.Address, s.InflightShort, b.Endpoints())
			}
		}
		for _, p := range held {
			p.Done(DoneInfo{StatusCode: 200})
		}
	})
}

// TestOnly: Pick with Only returns that endpoint whatever its state and
// whatever Avoid says, counts it in flight until Done, and fails when the
// address is not among the endpoints.
func TestOnly(t *testing.T) {
	tests := []struct {
		name    string
		eject   []string
		only    string
		avoid   string
		wantErr error
	}{
		{name: "usable", only: "b:1"},
		{name: "ejected", eject: []string{"b:1"}, only: "b:1"},
		{name: "avoided too", only: "b:1", avoid: "b:1"},
		{name: "gone", only: "z:1", wantErr: ErrNoAlternative},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newTest(t, Config{}, 9, "a:1", "b:1", "c:1")
				ejectAll(t, b, tt.eject...)
				for range 50 {
					p, err := b.Pick(PickInfo{Only: tt.only, Avoid: tt.avoid})
					if err != tt.wantErr {
						t.Fatalf("Pick = %v, want %v", err, tt.wantErr)
					}
					if err != nil {
						return
					}
					if got := p.Endpoint.Address(); got != tt.only {
						t.Fatalf("picked %s, want %s", got, tt.only)
					}
					if n := p.Endpoint.inflight[0].Load(); n != 1 {
						t.Errorf("in flight while picked = %d, want 1", n)
					}
					p.Done(DoneInfo{StatusCode: 200, Latency: 10 * time.Millisecond})
					if n := p.Endpoint.inflight[0].Load(); n != 0 {
						t.Errorf("in flight after Done = %d, want 0", n)
					}
				}
			})
		})
	}
}
