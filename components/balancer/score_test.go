package balancer

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
	"testing/synctest"
	"time"
)

var threeAddrs = []string{"a:443", "b:443", "c:443"}

// checkEven fails the test if an address of addrs got outside 1/len ± 5
// points of the n requests.
func checkEven(t *testing.T, what string, got map[string]int, n int, addrs []string) {
	t.Helper()
	even := 100.0 / float64(len(addrs))
	for _, a := range addrs {
		share := 100 * float64(got[a]) / float64(n)
		if share < even-5 || share > even+5 {
			t.Errorf("%s: %s got %.1f%% of requests, want %.1f%% ± 5 (all: %v)", what, a, share, even, got)
		}
	}
}

// longestAbsence returns the most consecutive requests that went past one
// address of addrs.
func longestAbsence(picked []string, addrs []string) int {
	worst := 0
	for _, a := range addrs {
		last := -1
		for i, p := range picked {
			if p == a {
				worst = max(worst, i-last-1)
				last = i
			}
		}
		worst = max(worst, len(picked)-last-1)
	}
	return worst
}

// worstShare returns the share (in percent) furthest from even.
func worstShare(got map[string]int, n int, addrs []string) float64 {
	even := 100.0 / float64(len(addrs))
	worst := even
	for _, a := range addrs {
		if s := 100 * float64(got[a]) / float64(n); math.Abs(s-even) > math.Abs(worst-even) {
			worst = s
		}
	}
	return worst
}

// A transient spike (GC pause, CPU contention) on one of three equal
// backends must neither skew the shares nor take the endpoint out of
// rotation for long. The old estimate, which jumped to the full spike and
// faded only with wall time, kept a:443 out for DecayTime×ln(spike/2):
// about 30s, or all 3,000 requests of this test.
func TestTransientSpikeCostsLittle(t *testing.T) {
	tests := []struct {
		name   string
		noise  latencyNoise
		factor int // how many times the usual latency the spike takes
		spikes int // consecutive answers of a:443 that spike
		// maxGap bounds the requests between a:443's last spike and its
		// next pick. One spike lifts the score to 2 at most: in the tie
		// band of peers at 1 or more, so a:443 stays in rotation. Peers'
		// scores dip below 1 under a long tail, and then a:443 waits until
		// its score has faded to twice theirs: within decayRounds rounds
		// (of 3 requests) for peers down to 0.7. Two spikes in a row lift
		// it to 8, three or more to the spike itself (50), which fade to
		// 1.8 in decayRounds×ln(7/0.8) ≈ 22 and decayRounds×ln(49/0.8)
		// ≈ 41 rounds.
		maxGap int
	}{
		{name: "one 50x spike", noise: tenMsJitter, factor: 50, spikes: 1, maxGap: 10},
		{name: "one 20x spike, long tail", noise: longTail, factor: 20, spikes: 1, maxGap: 3 * decayRounds},
		{name: "one 50x spike, long tail", noise: longTail, factor: 50, spikes: 1, maxGap: 3 * decayRounds},
		{name: "two 50x spikes in a row", noise: tenMsJitter, factor: 50, spikes: 2, maxGap: 3 * 22},
		{name: "five 50x spikes in a row", noise: tenMsJitter, factor: 50, spikes: 5, maxGap: 3 * 41},
	}
	const n, at = 3000, 100
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				worstGap, worst := 0, 100.0/3
				for seed := uint64(1); seed <= 20; seed++ {
					b := newTest(t, Config{}, seed, threeAddrs...)
					r := rand.New(rand.NewPCG(seed, 7))
					spiked, last := 0, -1
					picked := play(t, b, 1, n, nil, func(i int, addr string, _ Class) (time.Duration, int) {
						d := tt.noise(r)
						if i >= at && addr == "a:443" && spiked < tt.spikes {
							spiked++
							last = i
							d *= time.Duration(tt.factor)
						}
						return d, 200
					})
					if spiked != tt.spikes {
						t.Fatalf("seed %d: a:443 got %d spikes, want %d", seed, spiked, tt.spikes)
					}
					gap := -1
					for i := last + 1; i < n; i++ {
						if picked[i] == "a:443" {
							gap = i - last
							break
						}
					}
					if gap < 0 || gap > tt.maxGap {
						t.Errorf("seed %d: a:443 picked again %d requests after its last spike, want within %d", seed, gap, tt.maxGap)
					}
					got := count(picked)
					checkEven(t, "seed "+strconv.FormatUint(seed, 10), got, n, threeAddrs)
					worstGap = max(worstGap, gap)
					if s := worstShare(got, n, threeAddrs); math.Abs(s-100.0/3) > math.Abs(worst-100.0/3) {
						worst = s
					}
				}
				t.Logf("over 20 seeds: back in rotation within %d requests, worst share %.1f%%", worstGap, worst)
			})
		})
	}
}

var (
	tenMsJitter latencyNoise = func(r *rand.Rand) time.Duration {
		return 9*time.Millisecond + time.Duration(r.Int64N(int64(2*time.Millisecond)))
	}
	longTail latencyNoise = func(r *rand.Rand) time.Duration {
		return 2*time.Millisecond + time.Duration(r.ExpFloat64()*float64(3*time.Millisecond))
	}
)

// kubeVerbs is a controller's short-request mix: ten GETs, then one LIST.
func kubeVerbs(i int) Class {
	if i%11 == 10 {
		return ClassList
	}
	return ClassGet
}

// verbLatency answers a GET in about 2ms and a LIST in about 200ms, with
// listSpread: LISTs of different collections differ far more than GETs.
func verbLatency(r *rand.Rand, c Class, listSpread bool) time.Duration {
	if c != ClassList {
		return 1500*time.Microsecond + time.Duration(r.Int64N(int64(time.Millisecond)))
	}
	if listSpread {
		// log-uniform between 50ms and 800ms
		return time.Duration(float64(50*time.Millisecond) * math.Pow(16, r.Float64()))
	}
	return 180*time.Millisecond + time.Duration(r.Int64N(int64(40*time.Millisecond)))
}

// A LIST costs a hundred GETs. Judged in seconds, the endpoint that served
// the last LIST would look a hundred times slower than its peers and lose
// every comparison for a long while after each one; judged against the
// usual LIST, it is as fast as the others.
func TestMixedVerbsShareEvenly(t *testing.T) {
	tests := []struct {
		name       string
		clients    int // 1: sequential
		listSpread bool
		// maxAbsence bounds how many requests in a row a sequential client
		// sends past one endpoint: LISTs judged against LISTs keep every
		// endpoint in rotation. Judged in seconds (with the class
		// baselines disabled), the endpoint that served the last LIST sat
		// out for up to 80 requests, 200 with lists of every size. With
		// concurrent clients, in-flight LISTs rightly keep an endpoint
		// aside for a while, so only the shares are checked.
		maxAbsence int
	}{
		{name: "sequential", clients: 1, maxAbsence: 30},
		{name: "sequential, lists of every size", clients: 1, listSpread: true, maxAbsence: 40},
		{name: "8 clients", clients: 8},
		{name: "8 clients, lists of every size", clients: 8, listSpread: true},
	}
	const n = 3000
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				worst, worstGap := 100.0/3, 0
				for seed := uint64(1); seed <= 20; seed++ {
					b := newTest(t, Config{}, seed, threeAddrs...)
					r := rand.New(rand.NewPCG(seed, 7))
					answer := func(_ int, _ string, c Class) (time.Duration, int) { return verbLatency(r, c, tt.listSpread), 200 }
					var picked []string
					if tt.clients == 1 {
						picked = play(t, b, 1, n, kubeVerbs, answer)
					} else {
						picked = play(t, b, tt.clients, n, kubeVerbs, answer)
					}
					got := count(picked)
					checkEven(t, "seed "+strconv.FormatUint(seed, 10), got, n, threeAddrs)
					if s := worstShare(got, n, threeAddrs); math.Abs(s-100.0/3) > math.Abs(worst-100.0/3) {
						worst = s
					}
					gap := longestAbsence(picked, threeAddrs)
					if tt.maxAbsence > 0 && gap > tt.maxAbsence {
						t.Errorf("seed %d: an endpoint went unpicked for %d requests in a row, want at most %d", seed, gap, tt.maxAbsence)
					}
					worstGap = max(worstGap, gap)
				}
				t.Logf("over 20 seeds: worst share %.1f%%, longest absence %d requests", worst, worstGap)
			})
		})
	}
}

// A backend that really is slower, on every verb, must still lose traffic:
// the normalisation compares it with its peers on the same requests, and
// the bound on one sample's lift slows its detection by a sample or two.
func TestPersistentlySlowBackendGetsLess(t *testing.T) {
	tests := []struct {
		name     string
		clients  int
		classes  func(int) Class
		slowdown time.Duration
		maxShare float64 // of the slow backend, in percent
	}{
		{name: "5x, sequential", clients: 1, slowdown: 5, maxShare: 10},
		{name: "5x, sequential, GET and LIST", clients: 1, classes: kubeVerbs, slowdown: 5, maxShare: 10},
		{name: "5x, 8 clients", clients: 8, slowdown: 5, maxShare: 15},
		{name: "5x, 8 clients, GET and LIST", clients: 8, classes: kubeVerbs, slowdown: 5, maxShare: 15},
		{name: "5x, 32 clients", clients: 32, slowdown: 5, maxShare: 15},
		{name: "100x, sequential", clients: 1, slowdown: 100, maxShare: 2},
	}
	const n = 3000
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				worst := 0.0
				for seed := uint64(1); seed <= 10; seed++ {
					b := newTest(t, Config{}, seed, threeAddrs...)
					r := rand.New(rand.NewPCG(seed, 7))
					answer := func(_ int, addr string, c Class) (time.Duration, int) {
						d := verbLatency(r, c, false)
						if addr == "b:443" {
							d *= tt.slowdown
						}
						return d, 200
					}
					var picked []string
					if tt.clients == 1 {
						picked = play(t, b, 1, n, tt.classes, answer)
					} else {
						picked = play(t, b, tt.clients, n, tt.classes, answer)
					}
					got := count(picked)
					share := 100 * float64(got["b:443"]) / n
					if share >= tt.maxShare {
						t.Errorf("seed %d: slow backend got %.1f%% of requests, want below %.0f%% (all: %v)", seed, share, tt.maxShare, got)
					}
					worst = max(worst, share)
				}
				t.Logf("over 10 seeds: slow backend got at most %.1f%%", worst)
			})
		})
	}
}

// Sustained slowness reaches its level in a few samples, although one
// sample lifts the score only twice: each consecutive capped sample doubles
// the allowance.
func TestSustainedSlownessClimbs(t *testing.T) {
	tests := []struct {
		slowdown float64
		samples  int // of the slowed endpoint until its score reaches 90% of slowdown
	}{
		{slowdown: 3, samples: 2},
		{slowdown: 5, samples: 2},
		{slowdown: 20, samples: 3},
		{slowdown: 100, samples: 4},
	}
	for _, tt := range tests {
		t.Run(strconv.FormatFloat(tt.slowdown, 'g', -1, 64)+"x", func(t *testing.T) {
			p := newParams(Config{}.withDefaults())
			p.baseline[ClassGet].Store(math.Float64bits(float64(10 * time.Millisecond)))
			e := newEndpoint("a:1", p, 1, 0, 0)
			sample := time.Duration(tt.slowdown * float64(10*time.Millisecond))
			for i := 1; i <= tt.samples; i++ {
				// The baseline stays put: the other endpoints keep it.
				p.baseline[ClassGet].Store(math.Float64bits(float64(10 * time.Millisecond)))
				e.observe(ClassGet, sample, false, 0, 0)
			}
			if got := e.estimate(0, 0); got < 0.9*tt.slowdown {
				t.Errorf("score after %d samples %v× slower = %v, want at least %v", tt.samples, tt.slowdown, got, 0.9*tt.slowdown)
			}
		})
	}
}

func TestClassBaseline(t *testing.T) {
	ms := time.Millisecond
	type obs struct {
		class   Class
		sample  time.Duration
		learn   bool
		want    float64 // ratio returned
		wantGet time.Duration
	}
	tests := []struct {
		name  string
		steps []obs
	}{
		{name: "first sample sets the baseline", steps: []obs{
			{class: ClassGet, sample: 4 * ms, learn: true, want: 1, wantGet: 4 * ms},
			{class: ClassGet, sample: 8 * ms, learn: true, want: 2, wantGet: time.Duration(4e6 * math.Pow(2, baselineWeight))},
		}},
		{name: "a spike moves it as if baselineStep times off", steps: []obs{
			{class: ClassGet, sample: 4 * ms, learn: true, want: 1, wantGet: 4 * ms},
			{class: ClassGet, sample: 200 * ms, learn: true, want: 50, wantGet: time.Duration(4e6 * math.Pow(baselineStep, baselineWeight))},
		}},
		{name: "classes are apart", steps: []obs{
			{class: ClassGet, sample: 4 * ms, learn: true, want: 1, wantGet: 4 * ms},
			{class: ClassList, sample: 400 * ms, learn: true, want: 1, wantGet: 4 * ms},
			{class: ClassList, sample: 400 * ms, learn: true, want: 1, wantGet: 4 * ms},
			{class: ClassGet, sample: 4 * ms, learn: true, want: 1, wantGet: 4 * ms},
		}},
		{name: "a failure neither sets nor moves it", steps: []obs{
			{class: ClassGet, sample: ms, learn: false, want: 1},
			{class: ClassGet, sample: 4 * ms, learn: true, want: 1, wantGet: 4 * ms},
			{class: ClassGet, sample: ms, learn: false, want: 0.25, wantGet: 4 * ms},
		}},
		{name: "out of range class is other", steps: []obs{
			{class: Class(200), sample: 4 * ms, learn: true, want: 1},
			{class: ClassOther, sample: 8 * ms, learn: true, want: 2},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newTest(t, Config{}, 1, "a:1")
				for i, s := range tt.steps {
					if got := b.p.ratio(s.class, s.sample, s.learn); math.Abs(got-s.want) > 1e-9 {
						t.Errorf("step %d: ratio = %v, want %v", i, got, s.want)
					}
					got, ok := b.Baseline(ClassGet)
					if ok != (s.wantGet != 0) || got != s.wantGet {
						t.Errorf("step %d: GET baseline = %v, %v; want %v", i, got, ok, s.wantGet)
					}
				}
			})
		})
	}
}

func TestClassForVerb(t *testing.T) {
	tests := []struct {
		verb string
		want Class
	}{
		{"get", ClassGet},
		{"list", ClassList},
		{"create", ClassCreate},
		{"update", ClassUpdate},
		{"patch", ClassPatch},
		{"delete", ClassDelete},
		{"deletecollection", ClassDeleteCollection},
		{"watch", ClassOther},
		{"proxy", ClassOther},
		{"", ClassOther},
		{"GET", ClassOther},
	}
	for _, tt := range tests {
		got := ClassForVerb(tt.verb)
		if got != tt.want {
			t.Errorf("ClassForVerb(%q) = %v, want %v", tt.verb, got, tt.want)
		}
		if tt.want != ClassOther && got.String() != tt.verb {
			t.Errorf("ClassForVerb(%q).String() = %q, want the verb back", tt.verb, got.String())
		}
	}
	if got := Class(200).String(); got != "other" {
		t.Errorf("Class(200).String() = %q, want other", got)
	}
}
