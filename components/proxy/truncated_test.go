package proxy

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/fanout-dev/fanout/components/listener"
	"github.com/fanout-dev/fanout/components/proxy/proxytest"
	"github.com/fanout-dev/fanout/internal/testkit"
)

// TestTruncatedAnswerIsAnError: when the apiserver's stream breaks in
// the middle of a body (a reset, an apiserver killed mid-LIST), the
// client gets a read error over HTTP/1.1 as over h2c, never a complete
// answer with a cut-off body. Over HTTP/1.1 the response is aborted: no
// last chunk, the connection closed. Both servers of plaintext HTTP/1.1
// (--h1-server) do so.
func TestTruncatedAnswerIsAnError(t *testing.T) {
	part := strings.Repeat("x", 8<<10)
	cut := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, part)
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // net/http's HTTP/2 server resets the stream
	})
	for _, h1 := range []string{listener.H1ServerOwn, listener.H1ServerStd} {
		for _, h2c := range []bool{false, true} {
			name := map[bool]string{false: "HTTP/1.1", true: "h2c"}[h2c]
			t.Run("h1-server="+h1+"/"+name, func(t *testing.T) {
				p, u := proxytest.Backend(t, cut)
				_, _, base := startProxyOn(t, listener.Config{H1Server: h1}, nil, Config{}, p, u, nil)
				resp, err := testkit.NewClient(t, h2c).Get(base + "/api/v1/pods")
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				got, err := io.ReadAll(resp.Body)
				if err == nil {
					t.Fatalf("%s client read %d bytes and a clean end of a body the apiserver cut off, want a read error", name, len(got))
				}
				t.Logf("%s client: %d bytes, then %v", name, len(got), err)
			})
		}
	}
}
