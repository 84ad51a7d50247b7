package e2e_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/sets"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/server/filters"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/fanout-dev/fanout/e2e/harness"
	"github.com/fanout-dev/fanout/internal/reqinfo"
)

// relayGroup is the aggregated API the test registers.
const relayGroup = "relay.e2e.fanout.dev"

// relayModes are the answers the relay backend gives, by the last path
// segment of the request: kube-apiserver's own rejections, written by its
// own filters where they can run alone, and a 401.
var relayModes = []struct {
	name   string
	status int
}{
	{"shutdown503", http.StatusServiceUnavailable},
	{"shutdown429", http.StatusTooManyRequests},
	{"apf429", http.StatusTooManyRequests},
	{"unauthorized", http.StatusUnauthorized},
}

// relayBackend is a server behind services/relay/proxy (plain HTTP) and
// behind the APIService v1.relay.e2e.fanout.dev (HTTPS), on the bridge
// address that every apiserver's network namespace routes to. It counts
// the POSTs it gets, by route and mode.
type relayBackend struct {
	httpPort, httpsPort int
	mu                  sync.Mutex
	posts               map[string]int // "<route>/<mode>"
	answers             map[string]http.Handler
}

func (b *relayBackend) count(key string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.posts[key]
}

func startRelayBackend(t *testing.T, bridge net.IP) *relayBackend {
	t.Helper()
	elapsed := make(chan struct{})
	close(elapsed)
	infos := &apirequest.RequestInfoFactory{APIPrefixes: sets.NewString("api", "apis"), GrouplessAPIPrefixes: sets.NewString("api")}
	waitGroup := filters.WithWaitGroup(http.NotFoundHandler(), func(*http.Request, *apirequest.RequestInfo) bool { return false }, closedWaitGroup{})
	b := &relayBackend{
		posts: map[string]int{},
		answers: map[string]http.Handler{
			// filters.WithRetryAfter once --shutdown-delay-duration elapsed.
			"shutdown429": filters.WithRetryAfter(http.NotFoundHandler(), elapsed),
			// filters.WithWaitGroup once the server stopped accepting.
			"shutdown503": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				info, _ := infos.NewRequestInfo(r)
				waitGroup.ServeHTTP(w, r.WithContext(apirequest.WithRequestInfo(r.Context(), info)))
			}),
			// filters.WithPriorityAndFairness's rejection.
			"apf429": http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("X-Kubernetes-PF-PriorityLevel-UID", "pl-uid")
				w.Header().Set("X-Kubernetes-PF-FlowSchema-UID", "fs-uid")
				w.Header().Set("Retry-After", "1")
				http.Error(w, "Too many requests, please try again later.", http.StatusTooManyRequests)
			}),
			"unauthorized": http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				st := apierrors.NewUnauthorized("the relay backend does not know you").Status()
				st.Kind, st.APIVersion = "Status", "v1"
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusUnauthorized)
				_ = json.NewEncoder(w).Encode(st)
			}),
		},
	}
	serve := func() http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet && r.URL.Path == "/apis/"+relayGroup+"/v1" {
				// Discovery: what the aggregator's availability check and
				// discovery merge read.
				var res []metav1.APIResource
				for _, m := range relayModes {
					res = append(res, metav1.APIResource{Name: m.name, Namespaced: true, Kind: "Relay", Verbs: metav1.Verbs{"create"}})
				}
				w.Header().Set("Content-Type", "application/json")
				_ = json.NewEncoder(w).Encode(metav1.APIResourceList{
					TypeMeta:     metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"},
					GroupVersion: relayGroup + "/v1", APIResources: res,
				})
				return
			}
			if r.Method == http.MethodGet && r.URL.Path == "/healthz" {
				_, _ = io.WriteString(w, "ok")
				return
			}
			mode := r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]
			h, ok := b.answers[mode]
			if r.Method != http.MethodPost || !ok {
				http.NotFound(w, r)
				return
			}
			_, _ = io.Copy(io.Discard, r.Body)
			// The route is the first path segment behind a proxy
			// subresource (/service/<mode>, /pod/<mode>).
			route := "aggregated"
			if !strings.HasPrefix(r.URL.Path, "/apis/") {
				route, _, _ = strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
			}
			b.mu.Lock()
			b.posts[route+"/"+mode]++
			b.mu.Unlock()
			h.ServeHTTP(w, r)
		})
	}
	listen := func() net.Listener {
		l, err := net.Listen("tcp", net.JoinHostPort(bridge.String(), "0"))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	plain := httptest.NewUnstartedServer(serve())
	plain.Listener = listen()
	plain.Start()
	t.Cleanup(plain.Close)
	// The APIService is registered with insecureSkipTLSVerify, so
	// httptest's own certificate does.
	secure := httptest.NewUnstartedServer(serve())
	secure.Listener = listen()
	secure.TLS = &tls.Config{NextProtos: []string{"h2", "http/1.1"}}
	secure.EnableHTTP2 = true
	secure.StartTLS()
	t.Cleanup(secure.Close)
	b.httpPort = plain.Listener.Addr().(*net.TCPAddr).Port
	b.httpsPort = secure.Listener.Addr().(*net.TCPAddr).Port
	return b
}

// closedWaitGroup is a RequestWaitGroup after Wait: Add fails.
type closedWaitGroup struct{}

func (closedWaitGroup) Add(int) error { return errors.New("waitgroup is closed") }
func (closedWaitGroup) Done()         {}

// TestRelayedAnswersDriveNothing: a backend behind services/x/proxy and
// behind an aggregated APIService answers POSTs through fanout with
// kube-apiserver's shutdown 503 and 429, APF's 429 and a 401. Each POST
// reaches it exactly once, the client gets the backend's answer, and
// fanout neither drains, ejects nor penalises an apiserver, nor reloads
// credentials.
func TestRelayedAnswersDriveNothing(t *testing.T) {
	ctx, cp := controlPlane(t, 10*time.Minute)
	if !cp.Net.NetNS {
		t.Skip("needs network namespaces: the apiservers must reach the backend on the bridge address")
	}
	const ns, svc = "relayed", "relay"
	admin := cp.AdminClient
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	backend := startRelayBackend(t, cp.Net.BridgeIP)

	// A Service without selector: its endpoints are ours to write.
	_, err := admin.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: svc},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{
			{Name: "http", Port: 80, TargetPort: intstr.FromInt32(int32(backend.httpPort))},
			{Name: "https", Port: 443, TargetPort: intstr.FromInt32(int32(backend.httpsPort))},
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	apiService := map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1",
		"kind":       "APIService",
		"metadata":   map[string]any{"name": "v1." + relayGroup},
		"spec": map[string]any{
			"group": relayGroup, "version": "v1",
			"service":               map[string]any{"namespace": ns, "name": svc, "port": 443},
			"insecureSkipTLSVerify": true,
			"groupPriorityMinimum":  1000, "versionPriority": 15,
		},
	}
	body, _ := json.Marshal(apiService)
	if err := admin.Discovery().RESTClient().Post().AbsPath("/apis/apiregistration.k8s.io/v1/apiservices").
		SetHeader("Content-Type", "application/json").Body(body).Do(ctx).Error(); err != nil {
		t.Fatalf("creating the APIService: %v", err)
	}
	t.Cleanup(func() {
		_ = admin.Discovery().RESTClient().Delete().AbsPath("/apis/apiregistration.k8s.io/v1/apiservices/v1." + relayGroup).Do(context.Background()).Error()
		_ = admin.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	})

	user, err := cp.UserKubeconfig("relayed-client", "system:masters")
	if err != nil {
		t.Fatal(err)
	}
	sidecar, err := cp.StartFanout(ctx, t, "relayed", user)
	if err != nil {
		t.Fatal(err)
	}
	// The sidecar's pools to every apiserver exist once it is ready (its
	// prober uses them).
	poolsMade := time.Now()
	client := &http.Client{Timeout: time.Minute}
	post := func(path string) (int, string) {
		t.Helper()
		resp, err := client.Post("http://"+sidecar.ListenAddress+path, "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatalf("POST %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	aggregatedPath := func(mode string) string {
		return "/apis/" + relayGroup + "/v1/namespaces/" + ns + "/" + mode
	}

	// Before the Service has endpoints the APIService is not Available,
	// and kube-apiserver answers requests for it itself, without
	// proxying: 503 "service unavailable". Each apiserver learns of the
	// APIService from its own informer; until then it answers 404.
	for _, a := range cp.APIServers {
		waitStatus(ctx, t, cp.Admin, a, "/apis/"+relayGroup+"/v1", http.StatusServiceUnavailable)
	}
	code, msg := post(aggregatedPath("shutdown503"))
	t.Logf("while the APIService is not Available: %d %s", code, strings.TrimSpace(msg))
	if code != http.StatusServiceUnavailable || backend.count("aggregated/shutdown503") != 0 {
		t.Errorf("POST to an APIService that is not Available: %d %q, backend reached %d times; want kube-apiserver's own 503 without proxying",
			code, msg, backend.count("aggregated/shutdown503"))
	}

	// Pods need their ServiceAccount; no controller-manager makes it here.
	if _, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	// kube-apiserver's services proxy only goes to endpoints that are a
	// pod of the namespace with that IP (isValidAddress), so a pod stands
	// for the backend: never scheduled (no kubelet runs it), with the
	// bridge address as its IP. It is also the target of pods/x/proxy.
	pod, err := admin.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: svc},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "relay", Image: "relay.invalid/never-pulled:none"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bridgeIP := cp.Net.BridgeIP.String()
	pod.Status.PodIP, pod.Status.PodIPs = bridgeIP, []corev1.PodIP{{IP: bridgeIP}}
	if _, err := admin.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("giving the relay pod the bridge address: %v", err)
	}
	ports := []discoveryv1.EndpointPort{
		{Name: ptr.To("http"), Port: ptr.To(int32(backend.httpPort)), Protocol: ptr.To(corev1.ProtocolTCP)},
		{Name: ptr.To("https"), Port: ptr.To(int32(backend.httpsPort)), Protocol: ptr.To(corev1.ProtocolTCP)},
	}
	if _, err := admin.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: svc, Labels: map[string]string{
			discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: "fanout-e2e",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{bridgeIP},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: svc, UID: pod.UID},
		}},
		Ports: ports,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Every apiserver must proxy every route before counting starts.
	began := time.Now()
	for _, a := range cp.APIServers {
		waitStatus(ctx, t, cp.Admin, a, "/api/v1/namespaces/"+ns+"/services/"+svc+":http/proxy/healthz", http.StatusOK)
		waitStatus(ctx, t, cp.Admin, a, fmt.Sprintf("/api/v1/namespaces/%s/pods/%s:%d/proxy/healthz", ns, svc, backend.httpPort), http.StatusOK)
		waitStatus(ctx, t, cp.Admin, a, "/apis/"+relayGroup+"/v1", http.StatusOK)
	}
	t.Logf("every route proxied by every apiserver after %s", time.Since(began).Round(100*time.Millisecond))

	routes := []struct {
		name string
		path func(mode string) string
	}{
		{"service", func(mode string) string {
			return "/api/v1/namespaces/" + ns + "/services/" + svc + ":http/proxy/service/" + mode
		}},
		{"pod", func(mode string) string {
			return fmt.Sprintf("/api/v1/namespaces/%s/pods/%s:%d/proxy/pod/%s", ns, svc, backend.httpPort, mode)
		}},
		{"aggregated", aggregatedPath},
	}
	counters := []string{
		"fanout_retries_total", "fanout_retry_budget_exhausted_total",
		"fanout_upstream_connection_rotations_total",
		"fanout_endpoint_errors_total", "fanout_endpoint_ejections_total",
	}
	before := map[string]float64{}
	for _, c := range counters {
		before[c] = fanoutMetric(t, sidecar.AdminAddress, c)
	}
	requestsBefore := fanoutMetric(t, sidecar.AdminAddress, "fanout_endpoint_requests_total")

	// A 401 makes the transport renew a pool's connections, and the
	// proxy send again, only once they are a second old (minRenew in
	// components/transport/rotate.go). Without this wait the whole run can
	// fit in that second, and a relayed 401 would not be resent even by a
	// fanout that takes it for its own: the check below would prove nothing.
	if d := time.Until(poolsMade.Add(2 * time.Second)); d > 0 {
		time.Sleep(d)
	}
	const posts = 3
	sent := 0
	for _, r := range routes {
		for _, m := range relayModes {
			rec := httptest.NewRecorder()
			backend.answers[m.name].ServeHTTP(rec, httptest.NewRequest(http.MethodPost, r.path(m.name), nil))
			for i := range posts {
				code, got := post(r.path(m.name))
				sent++
				if code != m.status || !bytes.Equal(bytes.TrimSpace([]byte(got)), bytes.TrimSpace(rec.Body.Bytes())) {
					t.Errorf("%s %s POST %d: %d %q, want the backend's %d %q", r.name, m.name, i, code, got, m.status, rec.Body.String())
				}
			}
			if n := backend.count(r.name + "/" + m.name); n != posts {
				t.Errorf("%s route, %s: %d POSTs reached the backend %d times, want exactly %d", r.name, m.name, posts, n, posts)
			} else {
				t.Logf("%s route, %s: %d POSTs reached the backend %d times", r.name, m.name, posts, n)
			}
		}
	}

	// Every request has been reported to the balancer once its counter
	// has moved by as many: only then are the endpoint counters final.
	deadline := time.Now().Add(time.Minute)
	for fanoutMetric(t, sidecar.AdminAddress, "fanout_endpoint_requests_total")-requestsBefore < float64(sent) {
		if time.Now().After(deadline) {
			t.Fatalf("fanout_endpoint_requests_total did not grow by %d", sent)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, c := range counters {
		if d := fanoutMetric(t, sidecar.AdminAddress, c) - before[c]; d != 0 {
			t.Errorf("%s grew by %v during relayed answers, want 0 (%s)", c, d, fanoutMetricLines(t, sidecar.AdminAddress, c))
		} else {
			t.Logf("%s grew by 0", c)
		}
	}
	usable, draining, known, err := debugEndpoints(sidecar.AdminAddress)
	if err != nil {
		t.Fatal(err)
	}
	if len(usable) != len(cp.APIServers) || len(draining) != 0 {
		t.Errorf("after relayed answers: ready %v, draining %v of %v; want all %d ready", usable, draining, known, len(cp.APIServers))
	}
	t.Logf("fanout after %d relayed POSTs: ready %v, draining %v", sent, usable, draining)
}

// waitStatus waits until apiserver a answers GET path with status want,
// read as the admin directly.
func waitStatus(ctx context.Context, t *testing.T, admin *rest.Config, a *harness.APIServer, path string, want int) {
	t.Helper()
	cfg := rest.CopyConfig(admin)
	cfg.Host = a.URL
	cfg.Timeout = 5 * time.Second
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var code int
		err := c.Discovery().RESTClient().Get().AbsPath(path).Do(ctx).StatusCode(&code).Error()
		if code == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("apiserver %d answers GET %s with %d (%v), want %d", a.Index+1, path, code, err, want)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// TestOwnGroupsAreLocalAPIServices checks fanout's list of the groups
// kube-apiserver serves itself (reqinfo.OwnGroups) against a real one: each
// is a local APIService (no service: not aggregated; apiregistration.k8s.io,
// the aggregator's own group, has none), and every local
// group fanout does not list is a CustomResourceDefinition's, which fanout
// treats as possibly aggregated on purpose.
func TestOwnGroupsAreLocalAPIServices(t *testing.T) {
	ctx, cp := controlPlane(t, time.Minute)
	raw, err := cp.AdminClient.Discovery().RESTClient().Get().AbsPath("/apis/apiregistration.k8s.io/v1/apiservices").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Items []struct {
			Spec struct {
				Group   string          `json:"group"`
				Service json.RawMessage `json:"service"`
			} `json:"spec"`
		} `json:"items"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		t.Fatal(err)
	}
	local, aggregated := sets.New[string](), sets.New[string]()
	for _, s := range list.Items {
		if len(s.Spec.Service) == 0 || string(s.Spec.Service) == "null" {
			local.Insert(s.Spec.Group)
		} else {
			aggregated.Insert(s.Spec.Group)
		}
	}
	raw, err = cp.AdminClient.Discovery().RESTClient().Get().AbsPath("/apis/apiextensions.k8s.io/v1/customresourcedefinitions").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var crds struct {
		Items []struct {
			Spec struct {
				Group string `json:"group"`
			} `json:"spec"`
		} `json:"items"`
	}
	if err := json.Unmarshal(raw, &crds); err != nil {
		t.Fatal(err)
	}
	crdGroups := sets.New[string]()
	for _, c := range crds.Items {
		crdGroups.Insert(c.Spec.Group)
	}
	own := sets.New(reqinfo.OwnGroups()...)
	for _, g := range sets.List(own) {
		// kube-aggregator serves its own group and lists no APIService
		// for it.
		if (!local.Has(g) && g != "apiregistration.k8s.io") || aggregated.Has(g) {
			t.Errorf("fanout takes %q as kube-apiserver's own, but its APIServices are local %v, aggregated %v", g, local.Has(g), aggregated.Has(g))
		}
	}
	for _, g := range sets.List(local) {
		if g != "" && !own.Has(g) && !crdGroups.Has(g) {
			t.Errorf("kube-apiserver serves %q itself and it is no CRD's group, but fanout does not list it in ownGroups", g)
		}
	}
	t.Logf("own groups %d; local APIService groups %d (%d of CRDs); aggregated %v", own.Len(), local.Len(), crdGroups.Len(), slices.Sorted(slices.Values(sets.List(aggregated))))
}
