package balancer

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// shortPicks returns the addresses n short requests go to, each answered
// 200 in 1ms.
func shortPicks(t *testing.T, b *Balancer, n int) map[string]int {
	t.Helper()
	return runSequential(t, b, n, func(string) (time.Duration, int) { return time.Millisecond, 200 })
}

func TestShuttingDownDrainsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newTest(t, Config{DrainHold: 10 * time.Second}, 1, "a:1", "b:1", "c:1")
		finishOn(t, b, longPick, "b:1", DoneInfo{StatusCode: 429, ShuttingDown: true}, done200)
		s := status(t, b, "b:1")
		if s.State != StateDraining || s.ShuttingDownUntil == "" {
			t.Fatalf("after a shutdown answer: %+v, want draining", s)
		}
		if s.ConsecutiveFailures != 0 || s.EjectedUntil != "" {
			t.Errorf("a shutdown answer counted as a failure: %+v", s)
		}
		if got := shortPicks(t, b, 300); got["b:1"] != 0 {
			t.Errorf("shutting-down endpoint picked %d times, want 0 (%v)", got["b:1"], got)
		}
		time.Sleep(10 * time.Second)
		if s := status(t, b, "b:1"); s.State != StateReady {
			t.Errorf("after the hold: %+v, want ready again", s)
		}
		// Not capped like passive ejections: with two of three shutting down
		// and a cap of one ejection, only the third is used.
		b2 := newTest(t, Config{MaxEjectedFraction: RecommendedMaxEjectedFraction}, 1, "a:1", "b:1", "c:1")
		finishOn(t, b2, longPick, "a:1", DoneInfo{StatusCode: 503, ShuttingDown: true}, done200)
		finishOn(t, b2, longPick, "b:1", DoneInfo{StatusCode: 429, ShuttingDown: true}, done200)
		if got := shortPicks(t, b2, 100); got["c:1"] != 100 {
			t.Errorf("with a and b shutting down: picks %v, want all on c:1", got)
		}
		// All shutting down: panic mode still picks.
		finishOn(t, b2, longPick, "c:1", DoneInfo{StatusCode: 429, ShuttingDown: true}, done200)
		if got := shortPicks(t, b2, 300); len(got) != 3 {
			t.Errorf("all shutting down: picks %v, want all three", got)
		}
	})
}

func TestOverloadPenalty(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newTest(t, Config{OverloadPenalty: 5 * time.Second}, 3, "a:1", "b:1", "c:1")
		finishOn(t, b, longPick, "a:1", DoneInfo{StatusCode: 429, Overloaded: true, Latency: time.Millisecond}, done200)
		if s := status(t, b, "a:1"); s.OverloadedUntil == "" || s.State != StateReady {
			t.Fatalf("after an overload rejection: %+v, want ready but overloaded", s)
		}
		// Unloaded picks pass over the overloaded endpoint and the avoided one.
		for range 50 {
			p, err := b.Pick(PickInfo{Unloaded: true, Avoid: "b:1"})
			if err != nil {
				t.Fatal(err)
			}
			if got := p.Endpoint.Address(); got != "c:1" {
				t.Fatalf("Unloaded pick avoiding b:1 went to %s, want c:1", got)
			}
			p.Done(DoneInfo{StatusCode: 200})
		}
		finishOn(t, b, longPick, "c:1", DoneInfo{StatusCode: 429, Overloaded: true}, done200)
		if _, err := b.Pick(PickInfo{Unloaded: true, Avoid: "b:1"}); !errors.Is(err, ErrNoAlternative) {
			t.Errorf("Unloaded pick with the rest overloaded: err %v, want ErrNoAlternative", err)
		}
		// Plain picks still use overloaded endpoints, but less.
		got := shortPicks(t, b, 300)
		if got["b:1"] <= got["a:1"] || got["b:1"] <= got["c:1"] {
			t.Errorf("picks %v: want most on b:1, the one not overloaded", got)
		}
		time.Sleep(5 * time.Second)
		if s := status(t, b, "a:1"); s.OverloadedUntil != "" {
			t.Errorf("penalty did not expire: %+v", s)
		}
		p, err := b.Pick(PickInfo{Unloaded: true, Avoid: "b:1"})
		if err != nil {
			t.Fatalf("Unloaded pick after the penalty: %v", err)
		}
		p.Done(DoneInfo{StatusCode: 200})
	})
}

func TestConsecutiveFailuresEject(t *testing.T) {
	tests := []struct {
		name      string
		results   []DoneInfo
		wantState string
	}{
		{name: "four 5xx: still in", results: repeat(4, DoneInfo{StatusCode: 500, Failed: true}), wantState: StateReady},
		{name: "five 5xx: ejected", results: repeat(5, DoneInfo{StatusCode: 503, Failed: true}), wantState: StateEjected},
		{name: "five timeouts: ejected", results: repeat(5, DoneInfo{Err: errTest, Failed: true}), wantState: StateEjected},
		{name: "an answer breaks the streak", results: append(repeat(4, DoneInfo{StatusCode: 500, Failed: true}), append([]DoneInfo{{StatusCode: 200}}, repeat(4, DoneInfo{StatusCode: 500, Failed: true})...)...), wantState: StateReady},
		{name: "401 and 403 are answers", results: append(repeat(4, DoneInfo{StatusCode: 502, Failed: true}), DoneInfo{StatusCode: 401}, DoneInfo{StatusCode: 403}, DoneInfo{StatusCode: 504, Failed: true}), wantState: StateReady},
		{name: "shutdown answers are not failures", results: append(repeat(4, DoneInfo{StatusCode: 500, Failed: true}), DoneInfo{StatusCode: 503, ShuttingDown: true}), wantState: StateDraining},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newTest(t, Config{}, 1, "a:1", "b:1", "c:1")
				for _, di := range tt.results {
					finishOn(t, b, longPick, "b:1", di, done200)
				}
				if s := status(t, b, "b:1"); s.State != tt.wantState {
					t.Errorf("state %s, want %s (%+v)", s.State, tt.wantState, s)
				}
			})
		})
	}
}

func repeat(n int, di DoneInfo) []DoneInfo {
	out := make([]DoneInfo, n)
	for i := range out {
		out[i] = di
	}
	return out
}

func TestRepeatedEjectionsBackOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newTest(t, Config{ConsecutiveFailures: 2, EjectBase: time.Second, EjectMax: 4 * time.Second}, 1, "a:1", "b:1", "c:1")
		for i, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second} {
			for range 2 {
				finishOn(t, b, longPick, "b:1", DoneInfo{StatusCode: 500, Failed: true}, done200)
			}
			s := status(t, b, "b:1")
			if wantUntil := time.Now().Add(want).UTC().Format(time.RFC3339Nano); s.EjectedUntil != wantUntil {
				t.Fatalf("ejection %d: until %s, want %s", i+1, s.EjectedUntil, wantUntil)
			}
			time.Sleep(want)
		}
		finishOn(t, b, longPick, "b:1", DoneInfo{StatusCode: 200}, done200)
		for range 2 {
			finishOn(t, b, longPick, "b:1", DoneInfo{StatusCode: 500, Failed: true}, done200)
		}
		if s := status(t, b, "b:1"); s.EjectedUntil != time.Now().Add(time.Second).UTC().Format(time.RFC3339Nano) {
			t.Errorf("ejection after an answer: until %s, want the base again", s.EjectedUntil)
		}
	})
}

func TestEjectionCap(t *testing.T) {
	tests := []struct {
		name     string
		n        int
		ejected  int
		notReady int
		wantUsed int // endpoints picked by 600 short requests
	}{
		{name: "one of three ejected: honoured", n: 3, ejected: 1, wantUsed: 2},
		{name: "two of three ejected: over the cap, ignored", n: 3, ejected: 2, wantUsed: 3},
		{name: "one of two ejected: honoured", n: 2, ejected: 1, wantUsed: 1},
		{name: "two of six ejected: honoured", n: 6, ejected: 2, wantUsed: 4},
		{name: "three of six ejected: ignored", n: 6, ejected: 3, wantUsed: 6},
		// Probe failures are the apiserver's word: not capped.
		{name: "two of three not ready: honoured", n: 3, notReady: 2, wantUsed: 1},
		{name: "one ejected, one not ready: both honoured", n: 3, ejected: 1, notReady: 1, wantUsed: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				addrs := []string{"a:1", "b:1", "c:1", "d:1", "e:1", "f:1"}[:tt.n]
				b := newTest(t, Config{MaxEjectedFraction: RecommendedMaxEjectedFraction}, 1, addrs...)
				ejectAll(t, b, addrs[:tt.ejected]...)
				for _, a := range addrs[tt.ejected : tt.ejected+tt.notReady] {
					b.SetReady(a, false)
				}
				if got := shortPicks(t, b, 600); len(got) != tt.wantUsed {
					t.Errorf("picks %v, want %d endpoints used", got, tt.wantUsed)
				}
			})
		})
	}
}

func TestEjectionCapRounding(t *testing.T) {
	for _, tt := range []struct {
		n, want int
	}{{1, 1}, {2, 1}, {3, 1}, {4, 2}, {6, 2}, {7, 3}, {9, 3}} {
		if got := ejectionCap(RecommendedMaxEjectedFraction, tt.n); got != tt.want {
			t.Errorf("ejectionCap(1/3, %d) = %d, want %d", tt.n, got, tt.want)
		}
	}
}

func TestSlowStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := Config{SlowStart: 10 * time.Second, SlowStartMinWeight: 0.1}
		b := newTest(t, cfg, 4, "a:1", "b:1", "c:1")
		// The first set does not ramp.
		for _, s := range b.Endpoints() {
			if s.SlowStartWeight != 1 {
				t.Fatalf("%s starts with weight %v, want 1 in the first set", s.Address, s.SlowStartWeight)
			}
		}
		b.Update(endpoints("a:1", "b:1", "c:1", "d:1"))
		for _, tt := range []struct {
			after time.Duration
			want  float64
		}{{0, 0.1}, {500 * time.Millisecond, 0.1}, {5 * time.Second, 0.5}, {10 * time.Second, 1}} {
			at := time.Now().Add(tt.after)
			if got := status(t, b, "d:1").SlowStartWeight; tt.after == 0 && got != tt.want {
				t.Errorf("weight at once = %v, want %v", got, tt.want)
			}
			e := b.current.Load().eps[3]
			if got := e.weight(at.UnixNano()); got < tt.want-1e-9 || got > tt.want+1e-9 {
				t.Errorf("weight after %v = %v, want %v", tt.after, got, tt.want)
			}
		}
		// Under concurrent load the new endpoint takes less than its share at
		// first and its full share once the window has passed.
		lat := func(int, string, Class) (time.Duration, int) { return 10 * time.Millisecond, 200 }
		early := count(play(t, b, 8, 800, nil, lat))
		time.Sleep(10 * time.Second)
		late := count(play(t, b, 8, 800, nil, lat))
		if early["d:1"]*2 >= early["a:1"] {
			t.Errorf("early picks %v: want d:1 well below a:1 while it slow-starts", early)
		}
		if late["d:1"]*10 < late["a:1"]*7 {
			t.Errorf("late picks %v: want d:1 near a:1 once the window has passed", late)
		}
		// A probe failing then passing restarts the ramp.
		b.SetReady("a:1", false)
		b.SetReady("a:1", true)
		if w := status(t, b, "a:1").SlowStartWeight; w != 0.1 {
			t.Errorf("weight after the probe passed again = %v, want 0.1", w)
		}
		// So does the end of a shutdown hold.
		finishOn(t, b, longPick, "b:1", DoneInfo{StatusCode: 429, ShuttingDown: true}, done200)
		time.Sleep(DefaultDrainHold)
		if w := status(t, b, "b:1").SlowStartWeight; w != 0.1 {
			t.Errorf("weight when the shutdown hold ended = %v, want 0.1", w)
		}
	})
}

// Slow start weighs long requests too: a young apiserver does not take
// every new watch at once.
func TestSlowStartLong(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newTest(t, Config{SlowStart: 10 * time.Second}, 4, "a:1", "b:1")
		var open []Pick
		for range 10 {
			p, _ := b.Pick(PickInfo{Kind: Long})
			open = append(open, p)
		}
		b.Update(endpoints("a:1", "b:1", "c:1"))
		for range 10 {
			p, _ := b.Pick(PickInfo{Kind: Long})
			open = append(open, p)
		}
		if n := status(t, b, "c:1").InflightLong; n > 2 {
			t.Errorf("new endpoint took %d of 10 new watches at weight 0.1, want at most 2 (%+v)", n, b.Endpoints())
		}
		for _, p := range open {
			p.Done(DoneInfo{})
		}
	})
}

// Ties among the endpoints with the fewest open watches go to the one the
// injected randomness chooses.
func TestWatchPlacementTiesRandom(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for start, want := range []string{"a:1", "b:1", "c:1"} {
			b := newTest(t, Config{Rand: func(int) int { return start }}, 0, "a:1", "b:1", "c:1")
			p, _ := b.Pick(PickInfo{Kind: Long})
			if got := p.Endpoint.Address(); got != want {
				t.Errorf("rand %d: first watch on %s, want %s", start, got, want)
			}
			p.Done(DoneInfo{})
		}
	})
}

func TestOldest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newTest(t, Config{}, 1, "a:1", "b:1", "c:1")
		// a:1 failed its probe and came back: younger than b and c. b:1 was
		// shut down and back: younger still. c:1 holds more watches but has
		// been up longest.
		b.SetReady("a:1", false)
		time.Sleep(time.Second)
		b.SetReady("a:1", true)
		finishOn(t, b, longPick, "b:1", DoneInfo{StatusCode: 429, ShuttingDown: true}, done200)
		time.Sleep(DefaultDrainHold + time.Second)
		var open []Pick
		for range 3 {
			p, _ := b.Pick(PickInfo{Kind: Long, Avoid: "a:1"})
			open = append(open, p)
		}
		p, err := b.Pick(PickInfo{Kind: Long, Oldest: true})
		if err != nil {
			t.Fatal(err)
		}
		if got := p.Endpoint.Address(); got != "c:1" {
			t.Errorf("Oldest pick = %s, want c:1, up since the start", got)
		}
		open = append(open, p)
		// Avoid is honoured: the next oldest is a:1.
		p, _ = b.Pick(PickInfo{Kind: Long, Oldest: true, Avoid: "c:1"})
		if got := p.Endpoint.Address(); got != "a:1" {
			t.Errorf("Oldest pick avoiding c:1 = %s, want a:1", got)
		}
		open = append(open, p)
		for _, p := range open {
			p.Done(DoneInfo{})
		}
	})
}
