package proxy

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/fanout-dev/fanout/components/proxy/proxytest"
	"github.com/fanout-dev/fanout/internal/testkit"
)

// fakeDiscovery answers GET /apis itself, as apis.Discoverer does while
// the endpoints' discovery differs.
type fakeDiscovery struct{}

func (fakeDiscovery) Answer(r *http.Request) *http.Response {
	if r.URL.Path != "/apis" {
		return nil
	}
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Etag": {`"merged"`}},
		Body: io.NopCloser(strings.NewReader("merged")), ContentLength: 6, Request: r}
}

// TestDiscoveryAnswer: the Discovery's answer reaches the client of the
// sidecar and of the library's RoundTripper without an endpoint being
// picked; a request it leaves goes to the apiserver.
func TestDiscoveryAnswer(t *testing.T) {
	p, u := proxytest.OKBackend(t)
	m, _ := NewMetrics(nil)
	_, h, base := startProxy(t, Config{Discovery: fakeDiscovery{}}, p, u, m)
	c := testkit.NewClient(t, false)
	get := func(do func(*http.Request) (*http.Response, error), path string) string {
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		resp, err := do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.Header.Get("ETag") + " " + string(b)
	}
	for name, do := range map[string]func(*http.Request) (*http.Response, error){
		"sidecar": c.Do, "library": h.RoundTripper().RoundTrip,
	} {
		if got := get(do, "/apis"); got != `"merged" merged` {
			t.Errorf("%s: /apis answered %q, want the Discovery's", name, got)
		}
		if got := get(do, "/version"); got != " ok" {
			t.Errorf("%s: /version answered %q, want the apiserver's", name, got)
		}
	}
	if n := len(p.Records()); n != 2 {
		t.Errorf("%d picks, want 2 (the two /version requests)", n)
	}
}
