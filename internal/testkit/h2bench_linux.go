package testkit

import (
	"io"
	"net/http"
	"testing"
)

// ShortAnswer answers every request as an apiserver answers a GET of one
// ConfigMap: a few bytes of JSON. It is the request the benchmarks of
// fanout's HTTP/2 clients price.
func ShortAnswer() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"kind":"ConfigMap"}`)
	})
}

// RunParallelCPU runs op b.N times in all on 4 goroutines per GOMAXPROCS
// and reports the allocations and the process's CPU (ReportCPU) per op;
// an error fails b and stops that goroutine.
func RunParallelCPU(b *testing.B, op func() error) {
	b.ReportAllocs()
	b.SetParallelism(4)
	defer ReportCPU(b)()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := op(); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
