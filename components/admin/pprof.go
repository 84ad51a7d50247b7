package admin

import (
	"net/http"
	"net/http/pprof"
	"strings"
)

// WithPprof serves Go's profiling endpoints under /debug/pprof/ in front of
// next, to loopback clients only (--enable-pprof). Profiles show memory
// contents' shapes, goroutine stacks and the command line, which names the
// credential files, so they never go beyond the pod; reach them with
// kubectl port-forward or exec. They are registered here, on the admin
// mux, and never on the proxy listener or http.DefaultServeMux's server.
//
// The admin server's 30 s write timeout bounds a CPU profile or trace:
// ask for ?seconds=20 or less.
func WithPprof(next http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index) // also serves heap, goroutine, allocs, block, mutex, threadcreate
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	profiles := WithLoopbackOnly(mux)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/debug/pprof" || strings.HasPrefix(r.URL.Path, "/debug/pprof/") {
			profiles.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}
