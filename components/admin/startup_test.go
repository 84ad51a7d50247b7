package admin

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestStartupz: 503 until Done, 200 after, and other routes still served.
func TestStartupz(t *testing.T) {
	st, inner := newTestHandler(t)
	st.ready.Store(false)
	s := NewStartup()
	h := s.Wrap(inner)
	get := func(path string) int {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code
	}
	if got := get("/startupz"); got != http.StatusServiceUnavailable {
		t.Fatalf("/startupz before Done = %d, want 503", got)
	}
	s.Done()
	if got := get("/startupz"); got != http.StatusOK {
		t.Fatalf("/startupz after Done = %d, want 200", got)
	}
	// Startup does not wait for endpoints: /readyz may still fail.
	if got := get("/readyz"); got != http.StatusServiceUnavailable {
		t.Fatalf("/readyz = %d, want 503 with no ready endpoint", got)
	}
	if got := get("/healthz"); got != http.StatusOK {
		t.Fatalf("/healthz = %d", got)
	}
	var nilStartup *Startup
	if nilStartup.Wrap(inner) == nil {
		t.Fatal("nil Startup must serve the inner handler")
	}
}
