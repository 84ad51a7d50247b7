package serve

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fanout-dev/fanout/internal/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestServeAndStop(t *testing.T) {
	ca := testkit.NewCA(t)
	serving := ca.Serving("127.0.0.1")
	for _, tc := range []struct {
		name string
		tls  bool
	}{{"plain", false}, {"tls", true}} {
		t.Run(tc.name, func(t *testing.T) {
			hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })}
			client := &http.Client{Transport: &http.Transport{}}
			scheme := "http"
			if tc.tls {
				hs.TLSConfig = &tls.Config{Certificates: []tls.Certificate{serving.TLS}}
				client.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool}}
				scheme = "https"
			}
			s := New("test server", "", hs, nil)
			if err := s.Start("127.0.0.1:0"); err != nil {
				t.Fatal(err)
			}
			resp, err := client.Get(scheme + "://" + s.Addr().String() + "/")
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(b) != "ok" {
				t.Errorf("body %q", b)
			}
			client.CloseIdleConnections()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := s.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := net.Dial("tcp", s.Addr().String()); err == nil {
				t.Error("still listening after Stop")
			}
		})
	}
}

func TestListenErrorNamesTheFlag(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	s := New("admin server", "--admin-address", &http.Server{}, nil)
	err = s.Start(ln.Addr().String())
	if err == nil || !strings.Contains(err.Error(), "admin server: listen on --admin-address "+ln.Addr().String()) {
		t.Fatalf("Start on a taken port: %v", err)
	}
	if err := s.Stop(context.Background()); err != nil {
		t.Fatalf("Stop after a failed Start: %v", err)
	}
}
