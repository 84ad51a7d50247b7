package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fanout-dev/fanout/components/balancer"
	"github.com/fanout-dev/fanout/internal/testkit"
	"github.com/fanout-dev/fanout/internal/watchtest"
)

const (
	goneEvent  = `{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 5 (90)","reason":"Expired","code":410}}`
	addedEvent = `{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","resourceVersion":"91"}}}`
)

// watchServer answers every watch with first as its first event, in the
// given content type, then holds the stream until the client goes.
func watchServer(first, contentType string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", contentType)
		w.WriteHeader(200)
		fmt.Fprintln(w, first)
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-time.After(testkit.WaitLimit):
		}
	})
}

func TestWatchGoneRetriedOnOldest(t *testing.T) {
	const path = "/api/v1/namespaces/ns/configmaps?watch=true&resourceVersion=5"
	tests := []struct {
		name        string
		young, old  http.Handler
		path        string
		want        string // first line the client gets
		wantRetried float64
	}{
		{"410 from the young one: retried on the old one", watchServer(goneEvent, "application/json"), watchServer(addedEvent, "application/json"), path, addedEvent, 1},
		{"410 from both: the oldest one's passed on", watchServer(goneEvent, "application/json"), watchServer(goneEvent, "application/json"), path, goneEvent, 1},
		{"no resourceVersion: passed on", watchServer(goneEvent, "application/json"), watchServer(addedEvent, "application/json"), "/api/v1/namespaces/ns/configmaps?watch=true", goneEvent, 0},
		{"CBOR stream: passed on", watchServer(goneEvent, "application/cbor-seq"), watchServer(addedEvent, "application/json"), path, goneEvent, 0},
		{"other events untouched", watchServer(addedEvent, "application/json"), watchServer(goneEvent, "application/json"), path, addedEvent, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Address order decides which backend is which; make the
			// second one young whichever it is.
			c := newRealCluster(t, Config{}, tt.young, tt.old)
			young := c.addrs[0]
			c.b.SetReady(young, false)
			c.b.SetReady(young, true)
			// The young one must be picked first: hold a watch open on the
			// old one so the young one has the fewest.
			p, _ := c.b.Pick(balancer.PickInfo{Kind: balancer.Long, Avoid: young})
			defer p.Done(balancer.DoneInfo{})
			resp, err := testkit.NewClient(t, false).Get(c.base + tt.path)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			line, err := bufio.NewReader(resp.Body).ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.TrimSpace(line); got != tt.want {
				t.Errorf("first event = %s, want %s", got, tt.want)
			}
			if got := counterValue(t, c.m.retries.WithLabelValues(reasonGone)); got != tt.wantRetried {
				t.Errorf("fanout_retries_total{reason=gone} = %v, want %v", got, tt.wantRetried)
			}
		})
	}
}

// protoWatchServer answers every watch with frame first, as a protobuf
// watch stream, then holds it until the client goes.
func protoWatchServer(frame []byte) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/vnd.kubernetes.protobuf;stream=watch")
		w.WriteHeader(200)
		w.Write(frame)
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-time.After(testkit.WaitLimit):
		}
	})
}

func TestProtobufWatchGoneRetriedOnOldest(t *testing.T) {
	gone := watchtest.ProtoFrame(t, "ERROR", watchtest.GoneStatus())
	added := watchtest.ProtoFrame(t, "ADDED", watchtest.AddedConfigMap())
	internal := watchtest.ProtoFrame(t, "ERROR", &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Code: 500})
	tests := []struct {
		name        string
		young, old  []byte
		want        []byte
		wantRetried float64
	}{
		{"410 from the young one: retried on the old one", gone, added, added, 1},
		{"410 from both: the oldest one's passed on", gone, gone, gone, 1},
		{"another error event: passed on", internal, added, internal, 0},
		{"other events untouched", added, gone, added, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newRealCluster(t, Config{}, protoWatchServer(tt.young), protoWatchServer(tt.old))
			young := c.addrs[0]
			c.b.SetReady(young, false)
			c.b.SetReady(young, true)
			p, _ := c.b.Pick(balancer.PickInfo{Kind: balancer.Long, Avoid: young})
			defer p.Done(balancer.DoneInfo{})
			resp, err := testkit.NewClient(t, false).Get(c.base + "/api/v1/namespaces/ns/configmaps?watch=true&resourceVersion=5")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			got := make([]byte, len(tt.want))
			if _, err := io.ReadFull(resp.Body, got); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, tt.want) {
				t.Errorf("first frame = %q, want %q", got, tt.want)
			}
			if got := counterValue(t, c.m.retries.WithLabelValues(reasonGone)); got != tt.wantRetried {
				t.Errorf("fanout_retries_total{reason=gone} = %v, want %v", got, tt.wantRetried)
			}
		})
	}
}
