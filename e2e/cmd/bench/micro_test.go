package main

import "testing"

const benchOutput = `goos: linux
goarch: amd64
pkg: github.com/fanout-dev/fanout/components/balancer
cpu: AMD EPYC 7B13
BenchmarkPickParallel/least-request/short-2         	 9876543	       121.5 ns/op	       0 B/op	       0 allocs/op
BenchmarkPick/least-request-2                       	12345678	        95.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkPick/least-request-2                       	12345678	        97.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkPick/least-request-2                       	12345678	        99.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkPick/round-robin-2                         	30000000	        40.10 ns/op	       8 B/op	       1 allocs/op
PASS
ok  	github.com/fanout-dev/fanout/components/balancer	12.3s
BenchmarkServeShort-2   	  200000	      5321 ns/op	    4120 B/op	      37 allocs/op
BenchmarkNoMem-2   	  200000	      5321 ns/op
`

func TestParseBenchOutput(t *testing.T) {
	got := ParseBenchOutput(benchOutput)
	want := []MicroBench{
		{Name: "BenchmarkPickParallel/least-request/short", Samples: 1, NsPerOp: 121.5, BytesPerOp: 0, AllocsPerOp: 0},
		{Name: "BenchmarkPick/least-request", Samples: 3, NsPerOp: 97, BytesPerOp: 0, AllocsPerOp: 0},
		{Name: "BenchmarkPick/round-robin", Samples: 1, NsPerOp: 40.1, BytesPerOp: 8, AllocsPerOp: 1},
		{Name: "BenchmarkServeShort", Samples: 1, NsPerOp: 5321, BytesPerOp: 4120, AllocsPerOp: 37},
	}
	if len(got) != len(want)+1 {
		t.Fatalf("got %d benchmarks, want %d: %+v", len(got), len(want)+1, got)
	}
	for i, w := range want {
		if got[i] != w {
			t.Errorf("benchmark %d = %+v, want %+v", i, got[i], w)
		}
	}
	// Without -benchmem there are no allocation figures: NaN, not 0, so
	// the Pick target can never be met by a missing number.
	last := got[len(got)-1]
	if last.Name != "BenchmarkNoMem" || last.AllocsPerOp == last.AllocsPerOp {
		t.Errorf("benchmark without -benchmem = %+v, want allocs NaN", last)
	}
}
