package reqinfo

import (
	"net/http"
	"net/url"
	"testing"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/server/filters"
)

func TestClassify(t *testing.T) {
	tests := []struct {
		method, target string
		want           bool
	}{
		{"GET", "/api/v1/pods", false},
		{"GET", "/api/v1/namespaces/ns/pods/p", false},
		{"POST", "/api/v1/namespaces/ns/pods", false},
		{"DELETE", "/apis/apps/v1/namespaces/ns/deployments", false},
		{"GET", "/healthz", false},
		{"GET", "/version", false},
		{"GET", "/openapi/v3", false},

		{"GET", "/api/v1/pods?watch=true", true},
		{"GET", "/api/v1/pods?watch=1", true},
		{"GET", "/api/v1/pods?watch=yes", true},
		{"GET", "/api/v1/pods?watch=0", false},
		{"GET", "/api/v1/pods?watch=false", false},
		{"GET", "/api/v1/pods?watch=False", false},
		{"GET", "/apis/apps/v1/namespaces/ns/deployments?watch=true&resourceVersion=5&allowWatchBookmarks=true", true},
		{"GET", "/api/v1/namespaces/ns/configmaps?fieldSelector=metadata.name%3Dx&watch=true", true},
		// A named GET is a get for the apiserver, watch or not.
		{"GET", "/api/v1/namespaces/ns/pods/p?watch=true", false},
		{"GET", "/api/v1/watch/pods", true},
		{"GET", "/api/v1/watch/namespaces/ns/pods/p", true},
		{"GET", "/apis/apps/v1/watch/deployments", true},
		// Too short to name a resource: the apiserver fails to parse it.
		{"GET", "/api/v1/watch", false},

		{"GET", "/api/v1/namespaces/ns/pods/p/log", true},
		{"GET", "/api/v1/namespaces/ns/pods/p/log?follow=true&container=c", true},
		{"POST", "/api/v1/namespaces/ns/pods/p/exec?command=ls", true},
		{"GET", "/api/v1/namespaces/ns/pods/p/attach", true},
		{"POST", "/api/v1/namespaces/ns/pods/p/portforward", true},
		{"GET", "/api/v1/namespaces/ns/services/s/proxy/metrics", true},
		{"GET", "/api/v1/proxy/namespaces/ns/pods/p", true},
		{"GET", "/api/v1/namespaces/ns/pods/p/status", false},
		{"GET", "/debug/pprof/profile", true},
		{"GET", "/debug/pprof", false},
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.target, func(t *testing.T) {
			r, err := http.NewRequest(tc.method, "http://127.0.0.1:7080"+tc.target, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := New(r).LongRunning; got != tc.want {
				t.Errorf("New(r).LongRunning = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestClassifyRequest(t *testing.T) {
	tests := []struct {
		method, target string
		long, resource bool
		verb           string
	}{
		{"GET", "/api/v1/namespaces/ns/pods/p", false, true, "get"},
		{"HEAD", "/api/v1/namespaces/ns/pods/p", false, true, "get"},
		{"GET", "/api/v1/namespaces/ns/pods/p/status", false, true, "get"},
		{"GET", "/api/v1/pods", false, true, "list"},
		{"GET", "/apis/apps/v1/namespaces/ns/deployments?limit=500", false, true, "list"},
		{"GET", "/api/v1/pods?watch=false", false, true, "list"},
		{"POST", "/api/v1/namespaces/ns/pods", false, true, "create"},
		{"PUT", "/api/v1/namespaces/ns/pods/p", false, true, "update"},
		{"PATCH", "/apis/apps/v1/namespaces/ns/deployments/d/scale", false, true, "patch"},
		{"DELETE", "/api/v1/namespaces/ns/pods/p", false, true, "delete"},
		{"DELETE", "/apis/apps/v1/namespaces/ns/deployments", false, true, "deletecollection"},
		// Non-resource requests: their verb is the HTTP method, not
		// comparable with a resource GET.
		{"GET", "/healthz", false, false, "get"},
		{"GET", "/version", false, false, "get"},
		{"GET", "/apis", false, false, "get"},
		{"GET", "/openapi/v3", false, false, "get"},
		{"POST", "/some/non/resource", false, false, "post"},
		// Unparseable: short, and no verb.
		{"GET", "/api/v1/watch", false, false, ""},
		{"GET", "/api/v1/pods?watch=true", true, true, "watch"},
		{"GET", "/api/v1/namespaces/ns/pods/p/log", true, true, "get"},
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.target, func(t *testing.T) {
			r, err := http.NewRequest(tc.method, "http://127.0.0.1:7080"+tc.target, nil)
			if err != nil {
				t.Fatal(err)
			}
			info := New(r)
			if info.LongRunning != tc.long || info.Resource != tc.resource || info.Verb != tc.verb {
				t.Errorf("New(r) long, resource, verb = %v, %v, %q; want %v, %v, %q",
					info.LongRunning, info.Resource, info.Verb, tc.long, tc.resource, tc.verb)
			}
		})
	}
}

func TestBringsOwnCredentials(t *testing.T) {
	tests := []struct {
		name   string
		header http.Header
		want   bool
	}{
		{"no credentials", http.Header{}, false},
		{"bearer token", http.Header{"Authorization": {"Bearer abc"}}, true},
		{"basic auth", http.Header{"Authorization": {"Basic dTpw"}}, true},
		{"blank Authorization", http.Header{"Authorization": {"  "}}, false},
		{"websocket token first", http.Header{"Sec-Websocket-Protocol": {"base64url.bearer.authorization.k8s.io.dG9rZW4,v4.channel.k8s.io"}}, true},
		{"websocket token later with spaces", http.Header{"Sec-Websocket-Protocol": {"v5.channel.k8s.io,  base64url.bearer.authorization.k8s.io.dG9rZW4"}}, true},
		{"websocket token in a second header line", http.Header{"Sec-Websocket-Protocol": {"v4.channel.k8s.io", "base64url.bearer.authorization.k8s.io.dG9rZW4"}}, true},
		{"websocket without token", http.Header{"Sec-Websocket-Protocol": {"v4.channel.k8s.io, channel.k8s.io"}}, false},
		{"lookalike protocol", http.Header{"Sec-Websocket-Protocol": {"base64url.bearer.authorization.k8s.io"}}, false},
		{"impersonation alone", http.Header{"Impersonate-User": {"bob"}}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := &http.Request{Header: tc.header}
			if got := bringsOwnCredentials(r); got != tc.want {
				t.Errorf("bringsOwnCredentials = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestIsUpgrade(t *testing.T) {
	tests := []struct {
		name   string
		header http.Header
		want   bool
	}{
		{"plain", http.Header{}, false},
		{"spdy", http.Header{"Connection": {"Upgrade"}, "Upgrade": {"SPDY/3.1"}}, true},
		{"websocket, token list", http.Header{"Connection": {"keep-alive, upgrade"}, "Upgrade": {"websocket"}}, true},
		{"Upgrade header without Connection token", http.Header{"Upgrade": {"websocket"}}, false},
		{"keep-alive only", http.Header{"Connection": {"keep-alive"}}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := isUpgrade(&http.Request{Header: tc.header}); got != tc.want {
				t.Errorf("isUpgrade = %v, want %v", got, tc.want)
			}
		})
	}
}

// apiserverLongRunning is kube-apiserver's own check, built as
// pkg/controlplane/apiserver/config.go builds it.
var apiserverLongRunning = filters.BasicLongRunningRequestCheck(
	sets.NewString("watch", "proxy"),
	sets.NewString("attach", "exec", "proxy", "log", "portforward"),
)

// FuzzLongRunningMatchesApiserver keeps the reimplemented check equal to the
// apiserver's for any method, path and query.
func FuzzLongRunningMatchesApiserver(f *testing.F) {
	seeds := []struct{ method, path, query string }{
		{"GET", "/api/v1/pods", ""},
		{"GET", "/api/v1/pods", "watch=true"},
		{"GET", "/api/v1/pods", "watch=0"},
		{"GET", "/api/v1/pods", "watch=false&limit=x"},
		{"GET", "/api/v1/pods", "watch"},
		{"GET", "/api/v1/pods", "watch=%zz"},
		{"GET", "/api/v1/pods", "timeoutSeconds=abc&watch=1"},
		{"GET", "/apis/apps/v1/watch/deployments", ""},
		{"GET", "/api/v1/watch", ""},
		{"GET", "/api/v1/namespaces/ns/pods/p/log", "follow=true"},
		{"POST", "/api/v1/namespaces/ns/pods/p/exec", "command=sh"},
		{"GET", "/api/v1/namespaces/ns/pods/p/attach", ""},
		{"POST", "/api/v1/namespaces/ns/pods/p/portforward", ""},
		{"GET", "/api/v1/namespaces/ns/services/s/proxy/x/y", ""},
		{"GET", "/api/v1/proxy/nodes/n/stats", ""},
		{"GET", "/api/v1/namespaces/log", ""},
		{"GET", "/api/v1/namespaces/ns/status", ""},
		{"GET", "/apis/g/v1/namespaces/ns/r/n/exec", ""},
		{"PATCH", "/apis/g/v1/proxy", ""},
		{"GET", "/debug/pprof/heap", ""},
		{"GET", "/debug/pprof/", ""},
		{"GET", "//api//v1//pods", "watch=true"},
		{"WATCH", "/api/v1/pods", ""},
		{"PROXY", "/healthz", ""},
		{"GET", "/api/v1/pods", "fieldSelector=metadata.name%3Dfoo&watch=true"},
		{"GET", "/api/v1/pods", "fieldSelector=metadata.name%3D%2F&watch=true"},
	}
	for _, s := range seeds {
		f.Add(s.method, s.path, s.query)
	}
	f.Fuzz(func(t *testing.T, method, path, query string) {
		r := &http.Request{Method: method, URL: &url.URL{Path: path, RawQuery: query}, Header: http.Header{}}
		info, err := apiserverFactory.NewRequestInfo(r)
		want := err == nil && apiserverLongRunning(r, info)
		if err == nil {
			if ours := fromAPIServer(info); isLongRunning(&ours) != want {
				t.Errorf("isLongRunning(%+v) = %v, apiserver says %v", ours, !want, want)
			}
		}
		if got := New(r).LongRunning; got != want {
			t.Errorf("%s %s?%s: New(r).LongRunning = %v, apiserver says %v", method, path, query, got, want)
		}
	})
}

// TestWhatFields: New names the group, resource, subresource and scope of
// a resource request as the apiserver's RequestInfo does, and nothing for
// the others (the cost table keys on them).
func TestWhatFields(t *testing.T) {
	tests := []struct {
		method, target  string
		group, res, sub string
		namespaced      bool
	}{
		{"GET", "/api/v1/namespaces/ns/pods/p/log", "", "pods", "log", true},
		{"PUT", "/apis/apps/v1/namespaces/ns/replicasets/r/status", "apps", "replicasets", "status", true},
		{"GET", "/apis/apps/v1/replicasets?watch=true", "apps", "replicasets", "", false},
		{"GET", "/api/v1/nodes/n", "", "nodes", "", false},
		{"GET", "/api/v1/namespaces/ns", "", "namespaces", "", false},
		{"PUT", "/api/v1/namespaces/ns/finalize", "", "namespaces", "finalize", false},
		{"GET", "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/l", "coordination.k8s.io", "leases", "", true},
		{"GET", "/version", "", "", "", false},
		{"GET", "/apis/apps/v1", "", "", "", false},
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.target, func(t *testing.T) {
			r, err := http.NewRequest(tc.method, "http://127.0.0.1:7080"+tc.target, nil)
			if err != nil {
				t.Fatal(err)
			}
			got := New(r)
			if got.Group != tc.group || got.APIResource != tc.res || got.Subresource != tc.sub || got.Namespaced != tc.namespaced {
				t.Errorf("New(r) = group %q resource %q subresource %q namespaced %v, want %q %q %q %v",
					got.Group, got.APIResource, got.Subresource, got.Namespaced, tc.group, tc.res, tc.sub, tc.namespaced)
			}
			if ri, err := apiserverFactory.NewRequestInfo(r); err == nil && ri.IsResourceRequest &&
				(ri.APIGroup != got.Group || ri.APIVersion != got.Version || ri.Resource != got.APIResource || ri.Subresource != got.Subresource) {
				t.Errorf("apiserver says group %q version %q resource %q subresource %q, fanout %q %q %q %q", ri.APIGroup, ri.APIVersion, ri.Resource, ri.Subresource,
					got.Group, got.Version, got.APIResource, got.Subresource)
			}
			if ri, err := apiserverFactory.NewRequestInfo(r); err == nil && !ri.IsResourceRequest && got.Version != "" {
				t.Errorf("non-resource request: Version = %q, want empty", got.Version)
			}
		})
	}
}
