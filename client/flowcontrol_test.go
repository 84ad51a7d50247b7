package client

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/fanout-dev/fanout/internal/testkit"
)

// TestSlowWatchConsumersDoNotBlockOtherRequests: a program that holds
// watches and reads their ResultChan slowly (here: not at all) must still
// get answers to its other requests to the same apiserver. client-go's
// StreamWatcher stops reading a watch's body while its event waits on the
// channel, so each such watch holds up to the transport's stream window of
// unread data; with the connection window smaller than 20 stream windows
// (16 MiB, fanout's earlier default) those watches took it all and the
// GET below never got its response body.
func TestSlowWatchConsumersDoNotBlockOtherRequests(t *testing.T) {
	const watches = 20
	ca := testkit.NewCA(t)
	client := ca.Client("system:library-test")
	var sent atomic.Int64
	event := `{"type":"MODIFIED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"cm","namespace":"default","resourceVersion":"2"},"data":{"k":"` + strings.Repeat("v", 4000) + `"}}}` + "\n"
	srv := testkit.NewAPIServer(t, ca, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Query().Get("watch") == "true":
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			for r.Context().Err() == nil {
				n, err := fmt.Fprint(w, event)
				sent.Add(int64(n))
				if err != nil {
					return
				}
			}
		default:
			fmt.Fprint(w, `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"cm","namespace":"default","resourceVersion":"1"}}`)
		}
	}), testkit.WithClientAuth(tls.RequireAndVerifyClientCert))

	cfg := &rest.Config{
		Host:            srv.URL,
		TLSClientConfig: rest.TLSClientConfig{ServerName: "kubernetes", CAData: ca.CertPEM, CertData: client.CertPEM, KeyData: client.KeyPEM},
		QPS:             -1,
	}
	b := newBalancer(t, cfg, WithProbeInterval(0), WithLogger(quiet()))
	cs, err := kubernetes.NewForConfig(b.Config())
	if err != nil {
		t.Fatal(err)
	}
	cms := cs.CoreV1().ConfigMaps("default")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := range watches {
		w, err := cms.Watch(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("watch %d: %v", i, err)
		}
		defer w.Stop() // never read: the slow consumer
	}
	// Wait until the apiserver cannot send more: every watch holds what
	// its window allows.
	var last int64 = -1
	for deadline := time.Now().Add(testkit.WaitLimit); ; time.Sleep(500 * time.Millisecond) {
		n := sent.Load()
		if n == last && n > 0 {
			break
		}
		last = n
		if time.Now().After(deadline) {
			t.Fatalf("the watches were still receiving after %s (%d bytes)", testkit.WaitLimit, n)
		}
	}
	getCtx, getCancel := context.WithTimeout(ctx, 5*time.Second)
	defer getCancel()
	start := time.Now()
	if _, err := cms.Get(getCtx, "cm", metav1.GetOptions{}); err != nil {
		t.Fatalf("GET with %d unread watches holding %d bytes: %v after %s", watches, last, err, time.Since(start).Round(time.Millisecond))
	}
	t.Logf("%d unread watches hold %d bytes; a GET took %s", watches, last, time.Since(start).Round(time.Millisecond))
}
