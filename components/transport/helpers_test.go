package transport

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/fanout-dev/fanout/internal/testkit"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// serverName is the SAN of every test serving certificate. Tests dial
// 127.0.0.1, so a passing handshake proves Config.ServerName is what gets
// verified, not the dial address.
const serverName = "kubernetes"

// fakeCreds is a Credentials whose material tests swap at will.
type fakeCreds struct {
	roots     *x509.CertPool
	cert      atomic.Pointer[tls.Certificate]
	certErr   atomic.Pointer[error]
	token     atomic.Pointer[string]
	certCalls atomic.Int32
}

var _ Credentials = (*fakeCreds)(nil)

func newCreds(roots *x509.CertPool, cert *tls.Certificate, token string) *fakeCreds {
	c := &fakeCreds{roots: roots}
	c.cert.Store(cert)
	c.setToken(token)
	return c
}

func (c *fakeCreds) setToken(s string)       { c.token.Store(&s) }
func (c *fakeCreds) RootCAs() *x509.CertPool { return c.roots }
func (c *fakeCreds) Token() (string, error)  { return *c.token.Load(), nil }
func (c *fakeCreds) ClientCertificate() (*tls.Certificate, error) {
	c.certCalls.Add(1)
	if p := c.certErr.Load(); p != nil {
		return nil, *p
	}
	return c.cert.Load(), nil
}

// h2Server is the kit's fake apiserver, named as the tests here use it.
type h2Server struct {
	*testkit.APIServer
	addr           string
	opened, closed *atomic.Int32
}

// newH2Server starts an HTTP/2 server serving a certificate for
// serverName from p.CA and checking
// client certificates against p.CA with policy auth. maxStreams > 0 sets
// SETTINGS_MAX_CONCURRENT_STREAMS; opts add to those. GET /readyz is the
// kit's; the tests here send none.
func newH2Server(t testing.TB, p *testkit.PKI, auth tls.ClientAuthType, maxStreams int, h http.Handler, opts ...testkit.APIServerOption) *h2Server {
	t.Helper()
	s := testkit.NewAPIServer(t, p.CA, h, append(testkit.H2Options(serverName, auth, maxStreams), opts...)...)
	return &h2Server{APIServer: s, addr: s.Addr(), opened: &s.Opened, closed: &s.Closed}
}

// newHTTP1Server starts a TLS server that offers only ALPN http/1.1 and
// returns its address.
func newHTTP1Server(t *testing.T, p *testkit.PKI) string {
	t.Helper()
	s := testkit.NewAPIServer(t, p.CA, echoHandler(), testkit.WithNames(serverName),
		testkit.WithClientAuth(tls.NoClientCert), testkit.WithALPN("http/1.1"))
	return s.Addr()
}

// echoHandler reports what the server saw of the client.
var echoHandler = testkit.Echo

func newTransports(t testing.TB, cfg Config, creds Credentials) *Transports {
	t.Helper()
	if cfg.ServerName == "" {
		cfg.ServerName = serverName
	}
	tr, err := New(cfg, creds)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(tr.Close)
	return tr
}

// metricValue returns the value of the series name{labels} gathered from
// tr's collectors, and whether it exists.
func metricValue(t *testing.T, tr *Transports, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	return testkit.Series(t, testkit.Registry(t, tr.Collectors()...), name, labels)
}

func connGauge(t *testing.T, tr *Transports, addr string, mode AuthMode) float64 {
	v, _ := metricValue(t, tr, "fanout_upstream_connections", map[string]string{"endpoint": addr, "mode": mode.String()})
	return v
}

func dials(t *testing.T, tr *Transports, addr string, mode AuthMode, result string) float64 {
	v, _ := metricValue(t, tr, "fanout_upstream_dials_total", map[string]string{"endpoint": addr, "mode": mode.String(), "result": result})
	return v
}

// rawH2 is a hand-driven HTTP/2 server for behaviour net/http's server
// never shows: refused streams, GOAWAY at chosen points, and a record of
// the client's flow-control settings. onHeaders runs for every HEADERS
// frame and returns true to close the connection.
type rawH2 struct {
	*testkit.RawH2
	onHeaders func(fr *http2.Framer, streamID uint32) (closeConn bool)

	mu sync.Mutex
	// serverSettings are what the server's SETTINGS say (none: the
	// defaults); set before the first dial.
	serverSettings []http2.Setting
	open           int                        // connections being served
	acks           int                        // SETTINGS ACKs from the client
	settings       map[http2.SettingID]uint32 // first client SETTINGS
	connWindowIncr uint32                     // first connection WINDOW_UPDATE
}

// newRawH2 listens with TLS; alpn false makes it negotiate no protocol.
func newRawH2(t *testing.T, p *testkit.PKI, alpn bool, onHeaders func(*http2.Framer, uint32) bool) *rawH2 {
	t.Helper()
	cfg := p.CA.ServerTLSConfig(p.Serving, tls.NoClientCert)
	if alpn {
		cfg.NextProtos = []string{http2.NextProtoTLS}
	}
	s := &rawH2{onHeaders: onHeaders}
	s.RawH2 = testkit.NewRawH2(t, cfg, s.serveConn)
	return s
}

func (s *rawH2) serveConn(c net.Conn) {
	fr := http2.NewFramer(c, c)
	s.mu.Lock()
	settings := s.serverSettings
	s.open++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.open--
		s.mu.Unlock()
	}()
	if err := fr.WriteSettings(settings...); err != nil {
		return
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			s.mu.Lock()
			if f.IsAck() {
				s.acks++
				s.mu.Unlock()
				continue
			}
			if s.settings == nil {
				s.settings = map[http2.SettingID]uint32{}
				f.ForeachSetting(func(st http2.Setting) error {
					s.settings[st.ID] = st.Val
					return nil
				})
			}
			s.mu.Unlock()
			if fr.WriteSettingsAck() != nil {
				return
			}
		case *http2.WindowUpdateFrame:
			s.mu.Lock()
			if f.StreamID == 0 && s.connWindowIncr == 0 {
				s.connWindowIncr = f.Increment
			}
			s.mu.Unlock()
		case *http2.PingFrame:
			if !f.IsAck() && fr.WritePing(true, f.Data) != nil {
				return
			}
		case *http2.HeadersFrame:
			if s.onHeaders(fr, f.StreamID) {
				return
			}
		}
	}
}

// respond200 answers the stream with an empty 200.
func respond200(fr *http2.Framer, id uint32) bool {
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	enc.WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: buf.Bytes(), EndStream: true, EndHeaders: true})
	return false
}

// onlyReader hides a body's type so net/http cannot set GetBody: x/net
// then cannot replay it, as with a proxied client's request body.
type onlyReader struct{ io.Reader }

var errTest = errors.New("test failure")

// forEachClient runs test with each HTTP/2 client a pool can use
// (Config.Client), as subtests named after it.
func forEachClient(t *testing.T, test func(t *testing.T, client Client)) {
	for _, c := range []Client{ClientOwn, ClientStd} {
		t.Run(string(c), func(t *testing.T) { test(t, c) })
	}
}
