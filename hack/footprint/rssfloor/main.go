//lint:file-ignore SA1019 fanout's transports use x/net's HTTP/2 client (components/transport); the floor links the same one.

// Command rssfloor is a measuring aid for docs/footprint.md: a process
// that links what fanout's proxy path needs at the least (net/http, x/net's
// HTTP/2 client, crypto/tls, the Prometheus client and fx), makes one
// HTTP/2 round trip over TLS to itself, and then idles, so that its
// VmRSS (anonymous and file-backed) is the floor a fanout without the
// Kubernetes libraries could reach. It prints its VmRSS and exits.
package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/fx"
	"golang.org/x/net/http2"
)

func main() {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	app := fx.New(fx.NopLogger, fx.Supply(reg))
	if err := app.Err(); err != nil {
		panic(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	tr := &http2.Transport{TLSClientConfig: srv.Client().Transport.(*http.Transport).TLSClientConfig}
	resp, err := (&http.Client{Transport: tr}).Get(srv.URL)
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	if _, err := reg.Gather(); err != nil {
		panic(err)
	}
	time.Sleep(3 * time.Second)
	runtime.GC()
	debug.FreeOSMemory()
	status, _ := os.ReadFile("/proc/self/status")
	smaps, _ := os.ReadFile("/proc/self/smaps_rollup")
	for _, l := range strings.Split(string(status)+string(smaps), "\n") {
		if strings.HasPrefix(l, "VmRSS") || strings.HasPrefix(l, "Anonymous") || strings.HasPrefix(l, "RssFile") {
			fmt.Println(l)
		}
	}
}
