//lint:file-ignore SA1019 golang.org/x/net v0.60 deprecates its http2 package in favour of net/http's own HTTP/2; fanout's client uses its Framer, hpack and error types, which net/http does not export.

package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"golang.org/x/net/http2"

	"github.com/fanout-dev/fanout/internal/h2conn"
	"github.com/fanout-dev/fanout/internal/testkit"
)

func TestClassify(t *testing.T) {
	already := &UnprocessedError{Endpoint: "10.0.0.9:6443", Err: errTest}
	for _, tc := range []struct {
		name        string
		err         error
		unprocessed bool
	}{
		{"nil", nil, false},
		{"refused stream", http2.StreamError{StreamID: 3, Code: http2.ErrCodeRefusedStream}, true},
		{"wrapped refused stream", fmt.Errorf("round trip: %w", http2.StreamError{Code: http2.ErrCodeRefusedStream}), true},
		{"stream above a GOAWAY's last stream ID", fmt.Errorf("%w (GOAWAY NO_ERROR, last stream 1)", h2conn.ErrStreamGoneAway), true},
		{"stream reset after processing", http2.StreamError{StreamID: 3, Code: http2.ErrCodeInternal}, false},
		{"stream cancelled", http2.StreamError{StreamID: 3, Code: http2.ErrCodeCancel}, false},
		{"GOAWAY naming our stream as received", http2.GoAwayError{LastStreamID: 7, ErrCode: http2.ErrCodeNo}, false},
		{"connection lost mid-response", errors.New("http2: client connection lost"), false},
		{"unexpected EOF", io.ErrUnexpectedEOF, false},
		{"client went away", context.Canceled, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := classify("10.0.0.1:6443", tc.err)
			if IsUnprocessed(got) != tc.unprocessed {
				t.Fatalf("classify(%v) = %v, unprocessed %v, want %v", tc.err, got, IsUnprocessed(got), tc.unprocessed)
			}
			if !errors.Is(got, tc.err) {
				t.Errorf("classify lost the cause: %v does not wrap %v", got, tc.err)
			}
			if tc.unprocessed && got.(*UnprocessedError).Endpoint != "10.0.0.1:6443" {
				t.Errorf("endpoint = %q", got.(*UnprocessedError).Endpoint)
			}
			// Every error classify recognises is HTTP/2 turning the stream
			// away: the endpoint was reached (the proxy does not eject it).
			if tc.unprocessed && !got.(*UnprocessedError).Refused {
				t.Errorf("classify(%v) is not Refused; the proxy would eject a reachable endpoint", tc.err)
			}
		})
	}
	if got := classify("10.0.0.1:6443", already); got != already {
		t.Errorf("classify rewrapped an UnprocessedError: %v", got)
	}
}

// TestHTTP2ErrorsClassified drives the client's connections into the
// failures that decide whether a request may be retried elsewhere.
func TestHTTP2ErrorsClassified(t *testing.T) { forEachClient(t, testHTTP2ErrorsClassified) }

func testHTTP2ErrorsClassified(t *testing.T, client Client) {
	p := testkit.NewPKI(t, serverName)
	for _, tc := range []struct {
		name string
		// server answers the first HEADERS frame; true closes the connection.
		server func(fr *http2.Framer, id uint32) bool
		// withBody sends a body that cannot be rewound, as a proxied request's.
		withBody    bool
		unprocessed bool
		wantIn      string
	}{
		{
			name: "refused stream, body not replayable",
			server: func(fr *http2.Framer, id uint32) bool {
				fr.WriteRSTStream(id, http2.ErrCodeRefusedStream)
				return false
			},
			withBody: true, unprocessed: true, wantIn: "REFUSED_STREAM",
		},
		{
			name: "graceful GOAWAY before the stream, body not replayable",
			server: func(fr *http2.Framer, id uint32) bool {
				fr.WriteGoAway(0, http2.ErrCodeNo, nil)
				return false
			},
			withBody: true, unprocessed: true, wantIn: "GOAWAY",
		},
		{
			name: "GOAWAY with an error before the first stream",
			server: func(fr *http2.Framer, id uint32) bool {
				fr.WriteGoAway(0, http2.ErrCodeProtocol, nil)
				return false
			},
			unprocessed: true, wantIn: "PROTOCOL_ERROR",
		},
		{
			name: "GOAWAY naming the stream as received, then close",
			server: func(fr *http2.Framer, id uint32) bool {
				fr.WriteGoAway(id, http2.ErrCodeNo, nil)
				return true
			},
			unprocessed: false, wantIn: "GOAWAY",
		},
		{
			name: "stream reset with an internal error",
			server: func(fr *http2.Framer, id uint32) bool {
				fr.WriteRSTStream(id, http2.ErrCodeInternal)
				return false
			},
			unprocessed: false, wantIn: "INTERNAL_ERROR",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newRawH2(t, p, true, tc.server)
			tr := newTransports(t, Config{Client: client}, newCreds(p.CA.Pool, &p.Alice.TLS, ""))
			req := testkit.NewRequest(t, context.Background(), srv.Addr, "/api/v1/namespaces/default/configmaps")
			if tc.withBody {
				req.Method = http.MethodPost
				req.Body = io.NopCloser(onlyReader{strings.NewReader(`{"kind":"ConfigMap"}`)})
				req.ContentLength = -1
			}
			_, err := testkit.RoundTrip(tr.For(srv.Addr, AuthSidecar), req)
			if err == nil {
				t.Fatal("RoundTrip succeeded")
			}
			if IsUnprocessed(err) != tc.unprocessed {
				t.Errorf("error %q: unprocessed = %v, want %v", err, IsUnprocessed(err), tc.unprocessed)
			}
			if !strings.Contains(err.Error(), tc.wantIn) {
				t.Errorf("error %q does not mention %q", err, tc.wantIn)
			}
		})
	}
}

// TestReceiveWindowsAdvertised checks that the flow-control windows of
// Config reach the wire: the stream window as SETTINGS_INITIAL_WINDOW_SIZE
// and the connection window as the first WINDOW_UPDATE on stream 0. With
// an answer window budget (the default) streams start at the 2 KiB floor
// instead.
func TestReceiveWindowsAdvertised(t *testing.T) {
	p := testkit.NewPKI(t, serverName)
	for _, tc := range []struct {
		name                 string
		cfg                  Config
		wantStream, wantConn uint32
	}{
		{"defaults", Config{}, 2 << 10, 1000 << 20},
		{"no answer window budget", Config{AnswerWindowBudget: -1}, 1 << 20, 1000 << 20},
		{"connection window follows the stream window", Config{MaxReceiveBufferPerStream: 256 << 10, AnswerWindowBudget: -1}, 256 << 10, 1000 * 256 << 10},
		{"connection window capped", Config{MaxReceiveBufferPerStream: 4 << 20, AnswerWindowBudget: -1}, 4 << 20, 1<<31 - 1 - 65535},
		{"custom", Config{MaxReceiveBufferPerStream: 256 << 10, MaxReceiveBufferPerConnection: 2 << 20, AnswerWindowBudget: -1}, 256 << 10, 2 << 20},
		{"custom with a budget", Config{MaxReceiveBufferPerStream: 256 << 10, AnswerWindowBudget: 8 << 20}, 2 << 10, 1000 * 256 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newRawH2(t, p, true, respond200)
			tr := newTransports(t, tc.cfg, newCreds(p.CA.Pool, &p.Alice.TLS, ""))
			if _, err := testkit.RoundTrip(tr.For(srv.Addr, AuthSidecar), testkit.NewRequest(t, context.Background(), srv.Addr, "/")); err != nil {
				t.Fatalf("RoundTrip: %v", err)
			}
			srv.mu.Lock()
			defer srv.mu.Unlock()
			if got := srv.settings[http2.SettingInitialWindowSize]; got != tc.wantStream {
				t.Errorf("SETTINGS_INITIAL_WINDOW_SIZE = %d, want %d", got, tc.wantStream)
			}
			if srv.connWindowIncr != tc.wantConn {
				t.Errorf("connection WINDOW_UPDATE = %d, want %d", srv.connWindowIncr, tc.wantConn)
			}
		})
	}
}
