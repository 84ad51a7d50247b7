package transport

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/fanout-dev/fanout/internal/testkit"
)

func TestDialUpgrade(t *testing.T) {
	p := testkit.NewPKI(t, serverName)
	srv := testkit.NewAPIServer(t, p.CA, echoHandler(), testkit.WithNames(serverName), testkit.WithALPN("h2", "http/1.1"))
	addr := srv.Addr()
	tests := []struct {
		name   string
		mode   AuthMode
		wantCN string
	}{
		{"sidecar presents the client certificate", AuthSidecar, "alice"},
		{"passthrough presents none", AuthPassthrough, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTransports(t, Config{}, newCreds(p.CA.Pool, &p.Alice.TLS, "tok"))
			c, err := tr.DialUpgrade(context.Background(), addr, tc.mode)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			// The server offers h2 and http/1.1: only an http/1.1 offer
			// gets HTTP/1.1, which an Upgrade needs.
			if got := c.(*tls.Conn).ConnectionState().NegotiatedProtocol; got != "http/1.1" {
				t.Errorf("negotiated %q, want http/1.1", got)
			}
			req, _ := http.NewRequest(http.MethodGet, "https://"+addr+"/", nil)
			if err := req.Write(c); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if cn := resp.Header.Get("X-Client-CN"); cn != tc.wantCN {
				t.Errorf("server saw client certificate %q, want %q", cn, tc.wantCN)
			}
			if proto := resp.Header.Get("X-Proto"); proto != "HTTP/1.1" {
				t.Errorf("server saw %s, want HTTP/1.1", proto)
			}
		})
	}
}

func TestDialUpgradeErrorsAreUnprocessed(t *testing.T) {
	p := testkit.NewPKI(t, serverName)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	untrusted := newH2Server(t, testkit.NewPKI(t, serverName), tls.NoClientCert, 0, echoHandler())

	tr := newTransports(t, Config{}, newCreds(p.CA.Pool, &p.Alice.TLS, ""))
	for name, addr := range map[string]string{"refused": closed, "untrusted certificate": untrusted.addr} {
		t.Run(name, func(t *testing.T) {
			_, err := tr.DialUpgrade(context.Background(), addr, AuthSidecar)
			if !IsUnprocessed(err) {
				t.Errorf("DialUpgrade = %v, want an UnprocessedError", err)
			}
		})
	}
	t.Run("after Close", func(t *testing.T) {
		tr.Close()
		_, err := tr.DialUpgrade(context.Background(), untrusted.addr, AuthSidecar)
		if !IsUnprocessed(err) || !errors.Is(err, ErrClosed) {
			t.Errorf("DialUpgrade after Close = %v, want ErrClosed, unprocessed", err)
		}
	})
}

type failingToken struct{ *fakeCreds }

func (failingToken) Token() (string, error) { return "", errors.New("token file unreadable") }

func TestAuthorizeUpgrade(t *testing.T) {
	p := testkit.NewPKI(t, serverName)
	tests := []struct {
		name    string
		mode    AuthMode
		token   string
		in      string // client's Authorization, "" for none
		want    string
		wantSet bool
	}{
		{"sidecar adds its token", AuthSidecar, "tok", "", "Bearer tok", true},
		{"sidecar replaces a blank client header", AuthSidecar, "tok", " ", "Bearer tok", true},
		{"sidecar without token sends none", AuthSidecar, "", " ", "", false},
		{"passthrough leaves the client's", AuthPassthrough, "tok", "Bearer user", "Bearer user", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTransports(t, Config{}, newCreds(p.CA.Pool, &p.Alice.TLS, tc.token))
			h := http.Header{}
			if tc.in != "" {
				h.Set("Authorization", tc.in)
			}
			if err := tr.AuthorizeUpgrade(h, tc.mode); err != nil {
				t.Fatal(err)
			}
			got, set := h.Get("Authorization"), len(h.Values("Authorization")) > 0
			if got != tc.want || set != tc.wantSet || len(h.Values("Authorization")) > 1 {
				t.Errorf("Authorization = %q (set %v, %d values), want %q (set %v)", got, set, len(h.Values("Authorization")), tc.want, tc.wantSet)
			}
		})
	}
	t.Run("token error", func(t *testing.T) {
		tr := newTransports(t, Config{}, failingToken{newCreds(p.CA.Pool, &p.Alice.TLS, "")})
		err := tr.AuthorizeUpgrade(http.Header{}, AuthSidecar)
		if err == nil || !strings.Contains(err.Error(), "token file unreadable") {
			t.Errorf("err = %v, want the token error", err)
		}
	})
}
