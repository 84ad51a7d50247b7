package listener

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"testing"

	"golang.org/x/net/http2"

	"github.com/fanout-dev/fanout/components/proxy/proxytest"
	"github.com/fanout-dev/fanout/internal/testkit"
)

// dialH2C opens an h2c connection to addr by prior knowledge, closed when
// the test ends, and sends the preface and empty SETTINGS.
func dialH2C(t *testing.T, addr string) *http2.Framer {
	t.Helper()
	c := testkit.Dial(t, addr)
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return fr
}

// TestH2CRequestBodyWindows: an h2c connection is granted the request
// body windows of the defaults, 64 KiB per stream and 256 KiB per
// connection (what docs/security.md sums with the other bounds), and a
// body of 3 MiB, kube-apiserver's largest, still goes through them to the
// apiserver whole.
func TestH2CRequestBodyWindows(t *testing.T) { forEachH1Server(t, testH2CRequestBodyWindows) }

func testH2CRequestBodyWindows(t *testing.T, h1 string) {
	const upload = 3 << 20
	addr, rt := proxytest.NewBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprint(w, n)
	}), false)
	u := proxytest.NewUpstream()
	u.Set(addr, rt)
	s, _, base := startProxy(t, Config{H1Server: h1}, proxytest.NewPicker(addr), u, nil)

	fr := dialH2C(t, s.Addr().String())
	var stream, conn uint32
	for conn == 0 {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if v, ok := f.Value(http2.SettingInitialWindowSize); ok && !f.IsAck() {
				stream = v
			}
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				conn = f.Increment + 65535 // granted on top of the initial window
			}
		}
	}
	if stream != DefaultMaxReceiveBufferPerStream || conn != DefaultMaxReceiveBufferPerConnection {
		t.Errorf("h2c windows: %d per stream, %d per connection; want %d and %d", stream, conn, DefaultMaxReceiveBufferPerStream, DefaultMaxReceiveBufferPerConnection)
	}
	if stream != 64<<10 || conn != 256<<10 {
		t.Errorf("h2c windows: %d per stream, %d per connection; want the 64 KiB and 256 KiB docs/security.md sums", stream, conn)
	}

	resp, err := testkit.NewClient(t, true).Post(base+"/api/v1/namespaces/default/configmaps", "application/json", bytes.NewReader(make([]byte, upload)))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusOK || string(b) != strconv.Itoa(upload) {
		t.Errorf("a %d-byte upload over h2c: %s %d %q, want HTTP/2.0 200 and the apiserver to have read it all", upload, resp.Proto, resp.StatusCode, b)
	}
}
