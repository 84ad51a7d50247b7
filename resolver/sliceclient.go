package resolver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// APIServer is how the endpointslice resolver reaches kube-apiserver: a
// URL and a RoundTripper that carries the discovery credentials. The
// sidecar builds it from certs (the kubeconfig or the pod's service
// account, files watched and re-read), the library from its rest.Config.
type APIServer struct {
	// URL is kube-apiserver's base URL, https://host[:port], possibly
	// with a path prefix.
	URL string
	// Transport sends the requests, authenticated; it must be safe for
	// concurrent use.
	Transport http.RoundTripper
	// UserAgent is sent with every request; "fanout-discovery" if empty.
	UserAgent string
	// Start and Stop, if set, run when the resolver starts and after it
	// stopped, e.g. to watch the credentials' files in between.
	Start func() error
	Stop  func()
}

// The parts of discovery.k8s.io/v1 EndpointSlice that the resolver reads.
// Unknown fields are ignored, so newer API versions decode as well.
type endpointSlice struct {
	Metadata  objectMeta      `json:"metadata"`
	Endpoints []sliceEndpoint `json:"endpoints"`
	Ports     []slicePort     `json:"ports"`
}

type objectMeta struct {
	Name            string `json:"name"`
	ResourceVersion string `json:"resourceVersion"`
}

type sliceEndpoint struct {
	Addresses  []string `json:"addresses"`
	Conditions struct {
		Ready       *bool `json:"ready"`
		Serving     *bool `json:"serving"`
		Terminating *bool `json:"terminating"`
	} `json:"conditions"`
	Zone *string `json:"zone"`
}

type slicePort struct {
	Name *string `json:"name"`
	Port *int32  `json:"port"`
}

type sliceList struct {
	Metadata objectMeta      `json:"metadata"`
	Items    []endpointSlice `json:"items"`
}

// apiStatus is a metav1.Status: what kube-apiserver answers on failure,
// and the object of a watch's ERROR event.
type apiStatus struct {
	Kind    string `json:"kind"`
	Code    int    `json:"code"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// StatusError is a failure kube-apiserver reported.
type StatusError struct {
	Op      string // "list" or "watch"
	Code    int
	Reason  string
	Message string
}

func (e *StatusError) Error() string {
	s := fmt.Sprintf("%s: kube-apiserver answered %d", e.Op, e.Code)
	if e.Reason != "" {
		s += " " + e.Reason
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	switch e.Code {
	case http.StatusUnauthorized:
		s += "; check the discovery credentials (--discovery-kubeconfig)"
	case http.StatusForbidden:
		s += "; grant list and watch on discovery.k8s.io endpointslices in this namespace (manifests/rbac)"
	}
	return s
}

// sliceClient lists and watches the EndpointSlices of one Service.
type sliceClient struct {
	http      *http.Client
	url       string // the collection, with the label selector
	userAgent string
}

func newSliceClient(a APIServer, namespace, service string) (*sliceClient, error) {
	if a.Transport == nil {
		return nil, errors.New("endpointslice resolver: no transport for discovery; the APIServer is incomplete")
	}
	u, err := url.Parse(a.URL)
	if err != nil || u.Host == "" || u.Scheme != "https" && u.Scheme != "http" {
		return nil, fmt.Errorf("endpointslice resolver: discovery server %q is not an http(s) URL with a host", a.URL)
	}
	u = u.JoinPath("apis/discovery.k8s.io/v1/namespaces", namespace, "endpointslices")
	u.RawQuery = url.Values{"labelSelector": {labelServiceName + "=" + service}}.Encode()
	ua := a.UserAgent
	if ua == "" {
		ua = "fanout-discovery"
	}
	return &sliceClient{http: &http.Client{Transport: a.Transport}, url: u.String(), userAgent: ua}, nil
}

// listTimeout bounds a list, so that a hung apiserver does not stall
// discovery: the list is small.
const listTimeout = time.Minute

func (c *sliceClient) list(ctx context.Context) (*sliceList, error) {
	ctx, cancel := context.WithTimeout(ctx, listTimeout)
	defer cancel()
	resp, err := c.do(ctx, "list", c.url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var l sliceList
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil {
		return nil, fmt.Errorf("list: decoding the EndpointSliceList: %w", err)
	}
	return &l, nil
}

// watch opens a watch from resourceVersion rv that the server ends after
// timeout.
func (c *sliceClient) watch(ctx context.Context, rv string, timeout time.Duration) (*watchStream, error) {
	q := url.Values{
		"watch":               {"true"},
		"resourceVersion":     {rv},
		"allowWatchBookmarks": {"true"},
		"timeoutSeconds":      {strconv.Itoa(int(timeout.Seconds()))},
	}
	resp, err := c.do(ctx, "watch", c.url+"&"+q.Encode())
	if err != nil {
		var se *StatusError
		if errors.As(err, &se) && se.Code == http.StatusGone {
			return nil, errRelist
		}
		return nil, err
	}
	return &watchStream{body: resp.Body, dec: json.NewDecoder(resp.Body)}, nil
}

// do sends a GET and returns a 200 response with a JSON body, or the
// error: the apiserver's Status for other codes.
func (c *sliceClient) do(ctx context.Context, op, u string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.userAgent)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		se := &StatusError{Op: op, Code: resp.StatusCode}
		var st apiStatus
		if json.Unmarshal(body, &st) == nil && st.Kind == "Status" {
			se.Reason, se.Message = st.Reason, st.Message
		} else {
			se.Message = strings.TrimSpace(string(body[:min(len(body), 200)]))
		}
		return nil, se
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "application/json" {
		resp.Body.Close()
		return nil, fmt.Errorf("%s: kube-apiserver answered with Content-Type %q, want application/json; is the discovery URL kube-apiserver's?", op, resp.Header.Get("Content-Type"))
	}
	return resp, nil
}

// watchStream decodes a watch response: one JSON event after another.
type watchStream struct {
	body io.ReadCloser
	dec  *json.Decoder
}

type watchEvent struct {
	Type   string          `json:"type"`
	Object json.RawMessage `json:"object"`
	slice  *endpointSlice
}

// errWatchEnded is next's error when the server ended the stream cleanly.
var errWatchEnded = errors.New("watch ended")

// next returns the next ADDED, MODIFIED, DELETED or BOOKMARK event, with
// its object decoded. An ERROR event becomes its StatusError (errRelist
// for 410 Gone), a stream that breaks errRelist, one that ends cleanly
// errWatchEnded.
func (w *watchStream) next() (*watchEvent, error) {
	var ev watchEvent
	if err := w.dec.Decode(&ev); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errWatchEnded
		}
		var syn *json.SyntaxError
		var typ *json.UnmarshalTypeError
		if errors.As(err, &syn) || errors.As(err, &typ) {
			return nil, fmt.Errorf("watch: decoding an event: %w", err)
		}
		// Reset, GOAWAY, unexpected EOF: the connection went away.
		return nil, errRelist
	}
	if ev.Type == "ERROR" {
		var st apiStatus
		if err := json.Unmarshal(ev.Object, &st); err != nil {
			return nil, fmt.Errorf("watch: decoding an ERROR event: %w", err)
		}
		if st.Code == http.StatusGone {
			return nil, errRelist
		}
		return nil, &StatusError{Op: "watch", Code: st.Code, Reason: st.Reason, Message: st.Message}
	}
	ev.slice = new(endpointSlice)
	if err := json.Unmarshal(ev.Object, ev.slice); err != nil {
		return nil, fmt.Errorf("watch: decoding the object of a %s event: %w", ev.Type, err)
	}
	return &ev, nil
}

func (w *watchStream) close() { w.body.Close() }
