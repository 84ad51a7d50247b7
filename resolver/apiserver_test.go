package resolver

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// fakeAPIServer serves the EndpointSlices of namespace default as
// kube-apiserver does, for the list and watch requests of the resolver: a
// list by label selector with the current resourceVersion, and watches
// from a resourceVersion that replay what happened since and then follow
// changes, with 410 Gone for a resourceVersion older than the history.
// Objects are built with the API's own types, so the JSON is the real
// one.
//
// It speaks HTTP/2 over TLS, as kube-apiserver does, on httptest's
// in-memory network, so that the tests run in synctest bubbles: create it
// inside the bubble.
type fakeAPIServer struct {
	srv *httptest.Server

	mu       sync.Mutex
	rv       int
	objects  map[string]*discoveryv1.EndpointSlice
	history  []fakeEvent // every change, oldest first
	oldest   int         // watches from before this resourceVersion get 410
	watchers map[*fakeWatcher]struct{}
	// failLists is how many of the next lists fail with failCode.
	failLists int
	failCode  int
	requests  []*http.Request // every request, in order
}

type fakeEvent struct {
	rv    int
	typ   string
	slice *discoveryv1.EndpointSlice
}

type fakeWatcher struct {
	selector string
	events   chan []byte
	// end closes the stream: "clean" ends it as the server's timeout does,
	// "break" aborts the stream, "gone" sends an ERROR 410 first.
	end chan string
}

func newFakeAPIServer(t *testing.T, objects ...*discoveryv1.EndpointSlice) *fakeAPIServer {
	f := &fakeAPIServer{rv: 100, objects: map[string]*discoveryv1.EndpointSlice{}, watchers: map[*fakeWatcher]struct{}{}}
	for _, o := range objects {
		f.rv++
		o = o.DeepCopy()
		o.ResourceVersion = strconv.Itoa(f.rv)
		f.objects[o.Name] = o
	}
	f.oldest = f.rv
	f.srv = httptest.NewTestServer(t, http.HandlerFunc(f.serve))
	f.srv.EnableHTTP2 = true
	return f
}

// transport sends every request to f, whatever its URL's host.
func (f *fakeAPIServer) transport() http.RoundTripper { return f.srv.Client().Transport }

// apiServer is the resolver's APIServer for f.
func (f *fakeAPIServer) apiServer() APIServer {
	return APIServer{URL: "https://kubernetes", Transport: f.transport()}
}

func (f *fakeAPIServer) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.requests = append(f.requests, r.Clone(r.Context()))
	f.mu.Unlock()
	if r.URL.Path != "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices" || r.Method != http.MethodGet {
		f.status(w, http.StatusNotFound, "NotFound", "the server could not find the requested resource")
		return
	}
	q := r.URL.Query()
	sel := q.Get("labelSelector")
	if q.Get("watch") == "true" {
		f.serveWatch(w, r, sel, q.Get("resourceVersion"))
		return
	}
	f.mu.Lock()
	if f.failLists > 0 {
		f.failLists--
		code := f.failCode
		f.mu.Unlock()
		f.status(w, code, http.StatusText(code), "injected failure")
		return
	}
	l := discoveryv1.EndpointSliceList{
		TypeMeta: metav1.TypeMeta{Kind: "EndpointSliceList", APIVersion: "discovery.k8s.io/v1"},
		ListMeta: metav1.ListMeta{ResourceVersion: strconv.Itoa(f.rv)},
	}
	for _, o := range f.objects {
		if matches(o, sel) {
			l.Items = append(l.Items, *o)
		}
	}
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(l)
}

func (f *fakeAPIServer) serveWatch(w http.ResponseWriter, r *http.Request, sel, rv string) {
	from, err := strconv.Atoi(rv)
	if err != nil {
		f.status(w, http.StatusBadRequest, "BadRequest", "resourceVersion "+rv+" is not a number")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	f.mu.Lock()
	if from < f.oldest {
		f.mu.Unlock()
		w.Write(statusEvent(http.StatusGone, "Expired", "too old resource version"))
		return
	}
	fw := &fakeWatcher{selector: sel, events: make(chan []byte, 64), end: make(chan string, 1)}
	for _, e := range f.history {
		if e.rv > from && matches(e.slice, sel) {
			fw.events <- event(e.typ, e.slice)
		}
	}
	f.watchers[fw] = struct{}{}
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.watchers, fw)
		f.mu.Unlock()
	}()
	w.(http.Flusher).Flush()
	for {
		select {
		case <-r.Context().Done():
			return
		case b := <-fw.events:
			w.Write(b)
			w.(http.Flusher).Flush()
		case how := <-fw.end:
			// What was sent before the end goes out first.
			for len(fw.events) > 0 {
				w.Write(<-fw.events)
			}
			switch how {
			case "break":
				// Half an event, then the connection goes away.
				w.Write([]byte(`{"type":"MODIFIED","object":{"metadata":`))
				w.(http.Flusher).Flush()
				panic(http.ErrAbortHandler)
			case "gone":
				w.Write(statusEvent(http.StatusGone, "Expired", "too old resource version"))
			}
			return
		}
	}
}

func (f *fakeAPIServer) status(w http.ResponseWriter, code int, reason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status: metav1.StatusFailure, Code: int32(code), Reason: metav1.StatusReason(reason), Message: msg})
}

func statusEvent(code int, reason, msg string) []byte {
	b, _ := json.Marshal(map[string]any{"type": "ERROR", "object": metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status: metav1.StatusFailure, Code: int32(code), Reason: metav1.StatusReason(reason), Message: msg}})
	return append(b, '\n')
}

// event is a watch event as kube-apiserver encodes it: the object
// carries its kind and apiVersion, which client-go's decoder requires.
func event(typ string, o *discoveryv1.EndpointSlice) []byte {
	o = o.DeepCopy()
	o.TypeMeta = metav1.TypeMeta{Kind: "EndpointSlice", APIVersion: "discovery.k8s.io/v1"}
	b, _ := json.Marshal(map[string]any{"type": typ, "object": o})
	return append(b, '\n')
}

// matches supports the one selector the resolver sends.
func matches(o *discoveryv1.EndpointSlice, sel string) bool {
	k, v, ok := strings.Cut(sel, "=")
	return ok && o.Labels[k] == v
}

// change records a change and sends it to the watches. typ is ADDED,
// MODIFIED or DELETED.
func (f *fakeAPIServer) change(typ string, s *discoveryv1.EndpointSlice) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rv++
	s = s.DeepCopy()
	s.ResourceVersion = strconv.Itoa(f.rv)
	switch typ {
	case "DELETED":
		if old, ok := f.objects[s.Name]; ok {
			s = old.DeepCopy()
			s.ResourceVersion = strconv.Itoa(f.rv)
		}
		delete(f.objects, s.Name)
	case "ADDED", "MODIFIED":
		if _, ok := f.objects[s.Name]; ok {
			typ = "MODIFIED"
		} else {
			typ = "ADDED"
		}
		f.objects[s.Name] = s
	}
	f.history = append(f.history, fakeEvent{f.rv, typ, s})
	for fw := range f.watchers {
		if matches(s, fw.selector) {
			fw.events <- event(typ, s)
		}
	}
}

func (f *fakeAPIServer) create(s *discoveryv1.EndpointSlice) { f.change("ADDED", s) }
func (f *fakeAPIServer) update(s *discoveryv1.EndpointSlice) { f.change("MODIFIED", s) }
func (f *fakeAPIServer) remove(name string) {
	f.change("DELETED", &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}})
}

// bookmark sends a BOOKMARK at the current resourceVersion to every watch.
func (f *fakeAPIServer) bookmark() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rv++ // as if another service's slice had changed
	b, _ := json.Marshal(map[string]any{"type": "BOOKMARK", "object": map[string]any{
		"kind": "EndpointSlice", "apiVersion": "discovery.k8s.io/v1",
		"metadata": map[string]any{"resourceVersion": strconv.Itoa(f.rv)}}})
	// One line for every watch: an append per watch would write into the
	// same spare capacity while another watch's handler reads it.
	b = append(b, '\n')
	for fw := range f.watchers {
		fw.events <- b
	}
}

// endWatches ends every open watch (see fakeWatcher.end); with "gone",
// the history is also compacted, so that watching again from before now
// gets 410 too.
func (f *fakeAPIServer) endWatches(how string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if how == "gone" {
		f.oldest = f.rv + 1
	}
	for fw := range f.watchers {
		fw.end <- how
		delete(f.watchers, fw)
	}
}

func (f *fakeAPIServer) watching() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.watchers)
}

func (f *fakeAPIServer) failNextLists(n, code int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failLists, f.failCode = n, code
}

// calls returns the requests so far as "list" or "watch@RV".
func (f *fakeAPIServer) calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, r := range f.requests {
		q := r.URL.Query()
		if q.Get("watch") == "true" {
			out = append(out, "watch@"+q.Get("resourceVersion"))
		} else {
			out = append(out, "list")
		}
	}
	return out
}

func (f *fakeAPIServer) lastRequest() (*http.Request, url.Values) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.requests[len(f.requests)-1]
	return r, r.URL.Query()
}
