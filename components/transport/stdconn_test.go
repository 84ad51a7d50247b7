package transport

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/fanout-dev/fanout/internal/testkit"
)

// TestStdErrorsRecognised provokes the errors net/http's HTTP/2 client
// gives a request it wrote nothing of, which stdConn knows only by their
// text: a RoundTrip on a connection the server closed, before any stream
// and after one. Each must come out as not written (the pool tries
// another connection) or, with a body net/http has closed, unprocessed.
// The GOAWAY errors are TestHTTP2ErrorsClassified's.
func TestStdErrorsRecognised(t *testing.T) {
	p := testkit.NewPKI(t, serverName)
	srv := newRawH2(t, p, true, respond200)
	tr := newTransports(t, Config{Client: ClientStd}, newCreds(p.CA.Pool, &p.Alice.TLS, ""))
	g := tr.For(srv.Addr, AuthSidecar).(*pool).gen.Load()
	sc := &stdConn{cs: g.h2}
	closeServerSide := func(cc *http.ClientConn) {
		srv.CloseConns()
		testkit.WaitFor(t, "the client to see its connection closed", func() bool { return cc.Err() != nil })
	}
	for _, tc := range []struct {
		name        string
		streamFirst bool
		want        string
	}{
		{"closed before any stream", false, stdNotEstablished},
		{"closed after a stream", true, stdUnusable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cc, err := g.std.NewClientConn(context.Background(), "https", srv.Addr)
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			if tc.streamFirst {
				if _, err := testkit.RoundTrip(cc, testkit.NewRequest(t, context.Background(), srv.Addr, "/")); err != nil {
					t.Fatal(err)
				}
			}
			closeServerSide(cc)
			_, err = cc.RoundTrip(testkit.NewRequest(t, context.Background(), srv.Addr, "/"))
			if err == nil || err.Error() != tc.want {
				t.Fatalf("RoundTrip on a closed connection: %v, want %q (has net/http reworded it?)", err, tc.want)
			}
			if got := sc.classify(testkit.NewRequest(t, context.Background(), srv.Addr, "/"), err); !notWritten(got) {
				t.Errorf("classify(%v) = %v, want it not written", err, got)
			}
			post := testkit.NewRequest(t, context.Background(), srv.Addr, "/")
			post.Body = io.NopCloser(strings.NewReader("{}"))
			got := sc.classify(post, err)
			if !IsUnprocessed(got) || notWritten(got) || !errors.Is(got, err) {
				t.Errorf("classify(%v) with a body = %v, want an UnprocessedError (the pool cannot resend the body)", err, got)
			}
		})
	}
}
