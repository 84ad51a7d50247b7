package balancer

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

var errTest = errors.New("connection refused")

func TestErrNoEndpoints(t *testing.T) {
	b, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Pick(PickInfo{}); !errors.Is(err, ErrNoEndpoints) {
		t.Errorf("Pick before Update: err = %v, want ErrNoEndpoints", err)
	}
	if b.Ready() {
		t.Error("Ready before Update = true, want false")
	}
	b.Update(endpoints("a:1"))
	if _, err := b.Pick(PickInfo{}); err != nil {
		t.Errorf("Pick after Update: %v", err)
	}
	b.Update(nil)
	if _, err := b.Pick(PickInfo{}); !errors.Is(err, ErrNoEndpoints) {
		t.Errorf("Pick after empty Update: err = %v, want ErrNoEndpoints", err)
	}
	if got := b.Endpoints(); len(got) != 0 {
		t.Errorf("Endpoints after empty Update = %+v, want none", got)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{name: "zero", cfg: Config{}},
		{name: "least-request", cfg: Config{Policy: PolicyLeastRequest}},
		{name: "round-robin", cfg: Config{Policy: PolicyRoundRobin}},
		{name: "unknown policy", cfg: Config{Policy: "random"}, wantErr: `--balancer must be least-request or round-robin, got "random"`},
		{name: "negative decay", cfg: Config{DecayTime: -1}, wantErr: "decay"},
		{name: "negative eject", cfg: Config{EjectBase: -time.Second}, wantErr: "ejection"},
		{name: "max below base", cfg: Config{EjectBase: 10 * time.Second, EjectMax: time.Second}, wantErr: "must not be shorter"},
		{name: "large base alone", cfg: Config{EjectBase: time.Minute}},
		{name: "fraction above 1", cfg: Config{MaxEjectedFraction: 1.5}, wantErr: "fraction"},
		{name: "fraction negative", cfg: Config{MaxEjectedFraction: -0.1}, wantErr: "fraction"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Errorf("Validate() = %v, want nil", err)
				}
				if _, err := New(tt.cfg); err != nil {
					t.Errorf("New() = %v, want nil", err)
				}
				return
			}
			// Validate is the one check (engine.Config.Validate calls it);
			// New trusts a Config that passed it.
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Validate() = %v, want error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestEjectionAndRecovery(t *testing.T) {
	for _, pol := range policies {
		t.Run(pol, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newTest(t, Config{Policy: pol, EjectBase: time.Second, EjectMax: 4 * time.Second}, 2, "a:1", "b:1", "c:1")
				// Consecutive failures double the ejection up to the max.
				for i, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second} {
					ejectAll(t, b, "b:1")
					s := status(t, b, "b:1")
					if s.State != StateEjected || s.ConsecutiveFailures != int64(i+1) {
						t.Fatalf("after failure %d: %+v, want ejected with %d failures", i+1, s, i+1)
					}
					wantUntil := time.Now().Add(want).UTC().Format(time.RFC3339Nano)
					if s.EjectedUntil != wantUntil {
						t.Errorf("after failure %d: ejected until %s, want %s", i+1, s.EjectedUntil, wantUntil)
					}
					for range 100 {
						p, _ := b.Pick(PickInfo{})
						if p.Endpoint.Address() == "b:1" {
							t.Fatalf("after failure %d: picked the ejected endpoint", i+1)
						}
						p.Done(DoneInfo{StatusCode: 200, Latency: 10 * time.Millisecond})
					}
					if !b.Ready() {
						t.Error("Ready = false with two healthy endpoints")
					}
					time.Sleep(want - time.Nanosecond)
					if s := status(t, b, "b:1"); s.State != StateEjected {
						t.Errorf("after failure %d: back before the ejection ran out: %+v", i+1, s)
					}
					time.Sleep(time.Nanosecond)
					if s := status(t, b, "b:1"); s.State != StateReady || s.EjectedUntil != "" {
						t.Errorf("after failure %d: not back when the ejection ran out: %+v", i+1, s)
					}
				}
				// Recovered: it takes traffic again, and a response resets the
				// failure count.
				picked := false
				for range 100 {
					p, _ := b.Pick(PickInfo{})
					if p.Endpoint.Address() == "b:1" {
						picked = true
					}
					time.Sleep(10 * time.Millisecond)
					p.Done(DoneInfo{StatusCode: 200, Latency: 10 * time.Millisecond})
				}
				if !picked {
					t.Error("recovered endpoint never picked again")
				}
				if s := status(t, b, "b:1"); s.ConsecutiveFailures != 0 {
					t.Errorf("failures after a response = %d, want 0", s.ConsecutiveFailures)
				}
				ejectAll(t, b, "b:1")
				if s := status(t, b, "b:1"); s.EjectedUntil != time.Now().Add(time.Second).UTC().Format(time.RFC3339Nano) {
					t.Errorf("ejection after reset = until %s, want the base of 1s", s.EjectedUntil)
				}
			})
		})
	}
}

func TestAllEjectedStillPicks(t *testing.T) {
	for _, pol := range policies {
		t.Run(pol, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newTest(t, Config{Policy: pol}, 6, "a:1", "b:1", "c:1")
				ejectAll(t, b, "a:1", "b:1", "c:1")
				if b.Ready() {
					t.Error("Ready = true with every endpoint ejected")
				}
				seen := map[string]bool{}
				for _, kind := range []Kind{Short, Long} {
					for range 100 {
						p, err := b.Pick(PickInfo{Kind: kind})
						if err != nil {
							t.Fatalf("Pick with all ejected: %v", err)
						}
						seen[p.Endpoint.Address()] = true
						p.Done(DoneInfo{StatusCode: 200, Latency: time.Millisecond})
					}
				}
				if len(seen) != 3 {
					t.Errorf("panic mode picked only %v, want all three", seen)
				}
			})
		})
	}
}

func TestUpdateKeepsSurvivingEndpoints(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newTest(t, Config{}, 8, "a:1", "b:1", "c:1")
		runSequential(t, b, 90, func(addr string) (time.Duration, int) {
			return map[string]time.Duration{"a:1": 10 * time.Millisecond, "b:1": 20 * time.Millisecond, "c:1": 30 * time.Millisecond}[addr], 200
		})
		ptr := map[string]*Endpoint{}
		for _, e := range b.current.Load().eps {
			ptr[e.address] = e
		}
		before := map[string]EndpointStatus{}
		for _, s := range b.Endpoints() {
			before[s.Address] = s
		}
		p, _ := b.Pick(PickInfo{Kind: Long}) // in flight across the update

		// Unsorted, with a duplicate, as a careless resolver might send it.
		b.Update(endpoints("d:1", "c:1", "b:1", "c:1"))

		got := b.Endpoints()
		var addrs []string
		for _, s := range got {
			addrs = append(addrs, s.Address)
		}
		if strings.Join(addrs, ",") != "b:1,c:1,d:1" {
			t.Fatalf("Endpoints() = %v, want b:1,c:1,d:1 sorted", addrs)
		}
		for _, e := range b.current.Load().eps {
			if old, ok := ptr[e.address]; ok && old != e {
				t.Errorf("%s got a new *Endpoint across the update", e.address)
			}
		}
		for _, s := range got[:2] {
			if s.RequestsTotal != before[s.Address].RequestsTotal || s.RequestsTotal == 0 {
				t.Errorf("%s: requests %d after update, want %d kept", s.Address, s.RequestsTotal, before[s.Address].RequestsTotal)
			}
			if s.LatencyScore != before[s.Address].LatencyScore {
				t.Errorf("%s: estimate %v after update, want %v kept", s.Address, s.LatencyScore, before[s.Address].LatencyScore)
			}
		}
		d := got[2]
		if d.RequestsTotal != 0 || d.InflightShort != 0 || d.InflightLong != 0 {
			t.Errorf("new endpoint starts with counters %+v, want zero", d)
		}
		// The median of a, b, c's estimates is b's.
		if want := before["b:1"].LatencyScore; math.Abs(d.LatencyScore-want) > 1e-9 {
			t.Errorf("new endpoint estimate = %v, want the median %v", d.LatencyScore, want)
		}
		// A request on a removed endpoint still finishes cleanly.
		p.Done(DoneInfo{StatusCode: 200})
		if n := p.Endpoint.Status().InflightLong; n != 0 {
			t.Errorf("removed endpoint in flight after Done = %d, want 0", n)
		}
		// Removed and re-added: a fresh endpoint.
		b.Update(endpoints("a:1", "b:1"))
		if s := status(t, b, "a:1"); s.RequestsTotal != 0 {
			t.Errorf("re-added endpoint kept %d requests, want a fresh one", s.RequestsTotal)
		}
	})
}

func TestDoneTwiceIsHarmless(t *testing.T) {
	for _, kind := range []Kind{Short, Long} {
		t.Run(kind.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newTest(t, Config{}, 1, "a:1")
				first, _ := b.Pick(PickInfo{Kind: kind})
				second, _ := b.Pick(PickInfo{Kind: kind})
				first.Done(DoneInfo{StatusCode: 200})
				first.Done(DoneInfo{Err: errTest, Unavailable: true})
				s := status(t, b, "a:1")
				if s.InflightShort+s.InflightLong != 1 {
					t.Errorf("in flight = %d short + %d long, want the second request still counted", s.InflightShort, s.InflightLong)
				}
				if s.RequestsTotal != 1 || s.ErrorsTotal != 0 || s.State != StateReady {
					t.Errorf("status after double Done = %+v, want one clean request", s)
				}
				second.Done(DoneInfo{StatusCode: 200})
				if s := status(t, b, "a:1"); s.InflightShort != 0 || s.InflightLong != 0 || s.RequestsTotal != 2 {
					t.Errorf("status after both = %+v, want nothing in flight and 2 requests", s)
				}
			})
		})
	}
}

func TestErrorsCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tests := []struct {
			di   DoneInfo
			want uint64
		}{
			{DoneInfo{StatusCode: 200}, 0},
			{DoneInfo{StatusCode: 404}, 0},
			{DoneInfo{StatusCode: 429}, 1},
			{DoneInfo{StatusCode: 500}, 1},
			{DoneInfo{StatusCode: 503}, 1},
			{DoneInfo{Err: errTest}, 1},
			{DoneInfo{Err: errTest, Unavailable: true}, 1},
		}
		for _, tt := range tests {
			b := newTest(t, Config{}, 1, "a:1")
			p, _ := b.Pick(PickInfo{})
			p.Done(tt.di)
			if s := status(t, b, "a:1"); s.ErrorsTotal != tt.want || s.RequestsTotal != 1 {
				t.Errorf("Done(%+v): errors %d requests %d, want %d and 1", tt.di, s.ErrorsTotal, s.RequestsTotal, tt.want)
			}
		}
	})
}

// TestPeakEWMA pins down observe on one endpoint whose class baseline is
// 10ms, so a sample of 10ms is a ratio of 1.
func TestPeakEWMA(t *testing.T) {
	ms := time.Millisecond
	const decay = 10 * time.Second
	tests := []struct {
		name    string
		start   float64       // score before the sample
		rising  int32         // consecutive capped samples before
		after   time.Duration // wall time since the last update
		rounds  float64       // traffic since the last update
		sample  time.Duration
		penalty bool
		want    float64
		// wantRising is the streak of capped samples after this one.
		wantRising int32
	}{
		{name: "peak within the bound replaces at once", start: 1, sample: 15 * ms, want: 1.5},
		{name: "spike lifts at most twice", start: 1, sample: 500 * ms, want: 2, wantRising: 1},
		{name: "bound is relative to at least 1", start: 0.5, sample: 500 * ms, want: 2, wantRising: 1},
		{name: "second capped sample in a row: four times", start: 2, rising: 1, sample: 500 * ms, want: 8, wantRising: 2},
		{name: "third in a row: eight times", start: 8, rising: 2, sample: 500 * ms, want: 50, wantRising: 0},
		{name: "streak ends on an uncapped sample", start: 2, rising: 1, sample: 10 * ms, want: 1.75},
		{name: "lower sample moves a quarter of the way", start: 3, sample: 10 * ms, want: 2.5},
		{name: "lower ratio below 1", start: 1, sample: 5 * ms, want: 0.875},
		// 3 decays to 1+2/e = 1.7358 over one DecayTime, then a quarter of
		// the way to 1: 1.5518.
		{name: "decays towards 1 with time", start: 3, after: decay, sample: 10 * ms, want: 1 + 2/math.E*0.75},
		{name: "and with traffic", start: 3, rounds: decayRounds, sample: 10 * ms, want: 1 + 2/math.E*0.75},
		{name: "both add up", start: 3, after: decay, rounds: decayRounds, sample: 10 * ms, want: 1 + 2/math.E/math.E*0.75},
		{name: "penalty quadruples", start: 2, sample: ms, penalty: true, want: 8},
		{name: "penalty floor", start: 0.5, sample: ms / 10, penalty: true, want: 4},
		{name: "penalty cap", start: 400, sample: ms, penalty: true, want: penaltyMax},
		{name: "penalty never lowers", start: 2000, sample: ms, penalty: true, want: 2000},
		{name: "slow failure keeps its ratio", start: 1, sample: 80 * ms, penalty: true, want: 8},
		{name: "slow failure within the cap", start: 1, sample: time.Minute, penalty: true, want: penaltyMax},
		{name: "penalty keeps the streak", start: 2, rising: 1, sample: ms, penalty: true, want: 8, wantRising: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newParams(Config{DecayTime: decay}.withDefaults())
			p.baseline[ClassGet].Store(math.Float64bits(float64(10 * ms)))
			e := newEndpoint("a:1", p, tt.start, 0, 0)
			e.rising.Store(tt.rising)
			now, samples := int64(tt.after), int64(tt.rounds*roundScale)
			e.observe(ClassGet, tt.sample, tt.penalty, now, samples)
			if got := e.estimate(now, samples); math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("score = %v, want %v", got, tt.want)
			}
			if got := e.rising.Load(); got != tt.wantRising {
				t.Errorf("capped streak = %d, want %d", got, tt.wantRising)
			}
		})
	}
}

func TestEstimateDecaysTowardsUsual(t *testing.T) {
	p := newParams(Config{DecayTime: 10 * time.Second}.withDefaults())
	tests := []struct {
		name   string
		start  float64
		after  time.Duration
		rounds float64
		want   float64
	}{
		{name: "slow, one decay time", start: 5, after: 10 * time.Second, want: 1 + 4/math.E},
		{name: "slow, ten rounds", start: 5, rounds: decayRounds, want: 1 + 4/math.E},
		{name: "fast, one decay time", start: 0.5, after: 10 * time.Second, want: 1 - 0.5/math.E},
		{name: "in the past", start: 5, after: -time.Second, rounds: -1, want: 5},
		{name: "long idle", start: 16, after: time.Hour, want: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEndpoint("a:1", p, tt.start, 0, 0)
			if got := e.estimate(int64(tt.after), int64(tt.rounds*roundScale)); math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("score = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestStatusJSON(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newTest(t, Config{}, 1, "a:1", "b:1")
		ejectAll(t, b, "b:1")
		raw, err := json.Marshal(b.Endpoints())
		if err != nil {
			t.Fatal(err)
		}
		var got []map[string]any
		if err := json.Unmarshal(raw, &got); err != nil {
			t.Fatal(err)
		}
		keys := []string{"address", "state", "inflight_short", "inflight_long", "latency_score", "requests_total", "errors_total", "ejected_until", "consecutive_failures", "probe_ready", "draining", "slow_start_weight", "ejections_total"}
		for _, m := range got {
			for _, k := range keys {
				if _, ok := m[k]; !ok {
					t.Errorf("%v lacks key %q", m, k)
				}
			}
			if len(m) != len(keys) {
				t.Errorf("%v has %d keys, want %d", m, len(m), len(keys))
			}
		}
		if got[1]["state"] != "ejected" || got[0]["state"] != "ready" {
			t.Errorf("states = %v, %v; want ready, ejected", got[0]["state"], got[1]["state"])
		}
		until, err := time.Parse(time.RFC3339, got[1]["ejected_until"].(string))
		if err != nil || !until.Equal(time.Now().Add(time.Second)) {
			t.Errorf("ejected_until = %v (%v), want %v", got[1]["ejected_until"], err, time.Now().Add(time.Second))
		}
		if got[0]["ejected_until"] != "" {
			t.Errorf("ready endpoint ejected_until = %q, want empty", got[0]["ejected_until"])
		}
	})
}

func TestNewEndpoint(t *testing.T) {
	e := NewEndpoint("a:1")
	if e.Address() != "a:1" {
		t.Errorf("Address = %q", e.Address())
	}
	if s := e.Status(); s.State != StateReady || s.LatencyScore != 1 {
		t.Errorf("Status = %+v, want ready with the usual latency score 1", s)
	}
}

// Run with -race: picks, Dones and updates from many goroutines must leave
// consistent counters.
func TestConcurrentPickDoneUpdate(t *testing.T) {
	for _, pol := range policies {
		t.Run(pol, func(t *testing.T) {
			b, err := New(Config{Policy: pol})
			if err != nil {
				t.Fatal(err)
			}
			b.Update(endpoints("a:1", "b:1", "c:1"))
			stop := make(chan struct{})
			var updates sync.WaitGroup
			updates.Go(func() {
				sets := [][]string{{"a:1", "b:1", "c:1"}, {"a:1", "b:1"}, {"b:1", "c:1", "d:1"}, {"a:1", "b:1", "c:1"}}
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					b.Update(endpoints(sets[i%len(sets)]...))
					_ = b.Endpoints()
					_ = b.Ready()
				}
			})
			var workers sync.WaitGroup
			var picked sync.Map
			for w := range 8 {
				workers.Go(func() {
					for i := range 2000 {
						kind := Kind(i % 2)
						p, err := b.Pick(PickInfo{Kind: kind, Avoid: "b:1"})
						if err != nil {
							t.Error(err)
							return
						}
						picked.Store(p.Endpoint, true)
						di := DoneInfo{StatusCode: 200, Latency: time.Duration(w+1) * time.Millisecond}
						if i%97 == 0 {
							di = DoneInfo{Err: errTest, Unavailable: true}
						}
						p.Done(di)
						p.Done(di)
					}
				})
			}
			workers.Wait()
			close(stop)
			updates.Wait()
			var total uint64
			picked.Range(func(k, _ any) bool {
				s := k.(*Endpoint).Status()
				if s.InflightShort != 0 || s.InflightLong != 0 {
					t.Errorf("%s: %d short and %d long in flight after all Done", s.Address, s.InflightShort, s.InflightLong)
				}
				total += s.RequestsTotal
				return true
			})
			if total != 8*2000 {
				t.Errorf("requests counted = %d, want %d", total, 8*2000)
			}
		})
	}
}
