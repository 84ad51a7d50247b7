package proxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	restful "github.com/emicklei/go-restful/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	"k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/util/notfoundhandler"

	"github.com/fanout-dev/fanout/components/balancer"
	"github.com/fanout-dev/fanout/internal/testkit"
)

// apiserverMux is kube-apiserver's own request routing
// (server.NewAPIServerHandler: go-restful for the group/versions it
// serves, then the non-go-restful mux ending in notfoundhandler, as
// kube-apiserver completes its chain), serving core v1 pods (every GET of
// one answers its NotFound, as for an object that does not exist) and,
// if alpha, storage.k8s.io/v1alpha1 volumeattributesclasses.
func apiserverMux(alpha bool) http.Handler {
	sch := runtime.NewScheme()
	metav1.AddToGroupVersion(sch, schema.GroupVersion{Version: "v1"})
	codecs := serializer.NewCodecFactory(sch).WithoutConversion()
	h := server.NewAPIServerHandler("test", codecs, func(h http.Handler) http.Handler { return h },
		notfoundhandler.New(codecs, func(context.Context) bool { return true }))
	notFound := func(resource string) restful.RouteFunction {
		return func(req *restful.Request, resp *restful.Response) {
			responsewriters.ErrorNegotiated(apierrors.NewNotFound(schema.GroupResource{Resource: resource}, req.PathParameter("name")),
				codecs, schema.GroupVersion{Version: "v1"}, resp.ResponseWriter, req.Request)
		}
	}
	// kube-apiserver's routes produce and consume its media types
	// (endpoints/installer.go).
	media := []string{"application/json", "application/yaml", "application/vnd.kubernetes.protobuf"}
	core := new(restful.WebService).Path("/api/v1").Produces(media...).Consumes(append(media, "*/*")...)
	core.Route(core.GET("/namespaces/{namespace}/pods/{name}").To(notFound("pods")))
	h.GoRestfulContainer.Add(core)
	if alpha {
		ws := new(restful.WebService).Path("/apis/storage.k8s.io/v1alpha1").Produces(media...).Consumes(append(media, "*/*")...)
		ws.Route(ws.GET("/volumeattributesclasses").To(func(_ *restful.Request, resp *restful.Response) {
			_, _ = io.WriteString(resp, `{"kind":"VolumeAttributesClassList"}`)
		}))
		ws.Route(ws.POST("/volumeattributesclasses").To(func(_ *restful.Request, resp *restful.Response) {
			resp.WriteHeader(http.StatusCreated)
		}))
		h.GoRestfulContainer.Add(ws)
	}
	return h
}

// TestNoSuchPathMatchesApiserver: kube-apiserver's own routing, asked for
// a group/version it does not serve, a resource or subresource it does not
// serve in one it does, or an object that does not exist, in JSON and in
// protobuf: only the first two are "no such path".
func TestNoSuchPathMatchesApiserver(t *testing.T) {
	mux := apiserverMux(false)
	tests := []struct {
		method, path string
		want         bool
	}{
		{"GET", "/apis/storage.k8s.io/v1alpha1/volumeattributesclasses", true},
		{"POST", "/apis/storage.k8s.io/v1alpha1/volumeattributesclasses", true},
		{"GET", "/apis/storage.k8s.io/v1alpha1/volumeattributesclasses?watch=true", true},
		{"GET", "/api/v1/namespaces/ns/secrets/s", true},
		{"GET", "/api/v1/namespaces/ns/pods/p/resize", true},
		{"GET", "/api/v1/namespaces/ns/pods/p", false}, // the object's NotFound
	}
	for _, accept := range []string{"application/json", "application/vnd.kubernetes.protobuf, application/json"} {
		for _, tc := range tests {
			t.Run(accept+" "+tc.method+" "+tc.path, func(t *testing.T) {
				r := httptest.NewRequest(tc.method, tc.path, nil)
				r.Header.Set("Accept", accept)
				rec := httptest.NewRecorder()
				mux.ServeHTTP(rec, r)
				before := append([]byte(nil), rec.Body.Bytes()...)
				resp := rec.Result()
				if resp.StatusCode != http.StatusNotFound {
					t.Fatalf("kube-apiserver answered %d, want 404", resp.StatusCode)
				}
				if got := noSuchPath(resp); got != tc.want {
					t.Errorf("noSuchPath = %v, want %v for %s %q", got, tc.want, resp.Header.Get("Content-Type"), before)
				}
				after, _ := io.ReadAll(resp.Body)
				if string(after) != string(before) {
					t.Errorf("body after inspection %q, want %q", after, before)
				}
			})
		}
	}
	// An object NotFound without a name still names its kind.
	rec := httptest.NewRecorder()
	negotiatedStatus(apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, ""))(rec, httptest.NewRequest("GET", "/api/v1/pods", nil))
	if noSuchPath(rec.Result()) {
		t.Error(`noSuchPath(NewNotFound(pods, "")) = true, want false`)
	}
}

// allServe is a routing table that knows every endpoint serves everything:
// the skew retry needs one to look for an endpoint that serves the path.
type allServe struct{}

func (allServe) Differ() bool                     { return false }
func (allServe) Serves(string, balancer.API) bool { return true }
func (allServe) Version(string) string            { return "" }

// TestSkew404MovesOnce: a request, of any verb, that an apiserver answers
// "no such path" goes once to another that serves it; an object's 404 is
// the answer; without a routing table nothing moves.
func TestSkew404MovesOnce(t *testing.T) {
	// A budget that the test's own 404s do not exhaust.
	c := newRealCluster(t, Config{RetryBudget: &RetryBudget{Ratio: 1, Min: 1000, Window: 10 * time.Second}}, apiserverMux(false), apiserverMux(true))
	c.b.SetAPIs(allServe{})
	client := testkit.NewClient(t, false)
	do := func(method, path string) int {
		req, _ := http.NewRequest(method, c.base+path, strings.NewReader("{}"))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	const n = 20
	for i := range n {
		if got := do("GET", "/apis/storage.k8s.io/v1alpha1/volumeattributesclasses"); got != http.StatusOK {
			t.Fatalf("GET %d: %d, want 200", i, got)
		}
		if got := do("POST", "/apis/storage.k8s.io/v1alpha1/volumeattributesclasses"); got != http.StatusCreated {
			t.Fatalf("POST %d: %d, want 201", i, got)
		}
	}
	retries := counterValue(t, c.m.retries.WithLabelValues(reasonSkew))
	if hits := float64(c.hits[0].Load()); retries != hits || hits == 0 {
		t.Errorf("fanout_retries_total{reason=skew} = %v, want the %v requests the old apiserver answered", retries, hits)
	}
	before := c.hits[0].Load() + c.hits[1].Load()
	for range n {
		if got := do("GET", "/api/v1/namespaces/ns/pods/p"); got != http.StatusNotFound {
			t.Fatalf("GET of a missing pod: %d, want 404", got)
		}
	}
	if sent := c.hits[0].Load() + c.hits[1].Load() - before; sent != n {
		t.Errorf("%d requests reached an apiserver for %d GETs of a missing pod, want one each", sent, n)
	}
	c.b.SetAPIs(nil)
	// The balancer picks by load, so the old apiserver may take none of a
	// few requests: they go on until it took some (200 at most).
	failed, oldBefore, sent := 0, c.hits[0].Load(), 0
	for ; sent < 200 && (sent < n || c.hits[0].Load() == oldBefore); sent++ {
		if do("GET", "/apis/storage.k8s.io/v1alpha1/volumeattributesclasses") == http.StatusNotFound {
			failed++
		}
	}
	old := c.hits[0].Load() - oldBefore
	if old == 0 || int(old) != failed || counterValue(t, c.m.retries.WithLabelValues(reasonSkew)) != retries {
		t.Errorf("without a routing table, of %d GETs: %d reached the old apiserver, %d answered 404, retries %v (were %v); want some 404s, one for each GET the old apiserver took, and no more retries",
			sent, old, failed, counterValue(t, c.m.retries.WithLabelValues(reasonSkew)), retries)
	}
}
