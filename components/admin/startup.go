package admin

import (
	"net/http"
	"sync/atomic"
)

// Startup answers /startupz: 503 until Done, then 200 for good. The app
// calls Done once the client listener is bound and the localhost
// kubeconfig is written, so a kubelet startupProbe on /startupz releases
// the client container exactly when it can connect. It does not wait for a
// usable kube-apiserver: an apiserver outage must not keep clients from
// starting. Safe for concurrent use.
type Startup struct{ done atomic.Bool }

// NewStartup returns a Startup that is not done yet.
func NewStartup() *Startup { return &Startup{} }

// Done marks startup complete.
func (s *Startup) Done() { s.done.Store(true) }

// Wrap serves GET /startupz and passes every other request to h. A nil
// Startup serves h alone.
func (s *Startup) Wrap(h http.Handler) http.Handler {
	if s == nil {
		return h
	}
	mux := http.NewServeMux()
	mux.Handle("/", h)
	mux.HandleFunc("GET /startupz", func(w http.ResponseWriter, _ *http.Request) {
		if !s.done.Load() {
			writeText(w, http.StatusServiceUnavailable, "starting: the client listener or its kubeconfig is not ready yet")
			return
		}
		writeText(w, http.StatusOK, "ok")
	})
	return mux
}
