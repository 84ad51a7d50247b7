//go:build linux

package transport

import (
	"context"
	"crypto/tls"
	"net/http"
	"testing"

	"github.com/fanout-dev/fanout/internal/testkit"
)

// BenchmarkPoolRoundTrip prices a short GET through a pool, with each
// HTTP/2 client (Config.Client), to an in-process TLS HTTP/2 server whose
// side is counted too: cpu-ns/op is the process's CPU (user and system)
// per request, both sides. It compares the clients on the same path
// fanout's requests take; the proxy's benchmark at a fixed rate is the
// one that decides.
func BenchmarkPoolRoundTrip(b *testing.B) {
	p := testkit.NewPKI(b, serverName)
	srv := newH2Server(b, p, tls.RequireAndVerifyClientCert, 0, testkit.ShortAnswer())
	url := "https://" + srv.addr + "/api/v1/namespaces/default/configmaps/x"
	for _, c := range []Client{ClientOwn, ClientStd} {
		b.Run(string(c), func(b *testing.B) {
			tr := newTransports(b, Config{Client: c}, newCreds(p.CA.Pool, &p.Alice.TLS, ""))
			rt := tr.For(srv.addr, AuthSidecar)
			testkit.RunParallelCPU(b, func() error {
				req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
				_, err := testkit.RoundTrip(rt, req)
				return err
			})
		})
	}
}
