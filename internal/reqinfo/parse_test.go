package reqinfo

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/sets"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
)

// apiserverFactory is kube-apiserver's request-info parser, configured as
// kube-apiserver configures it (k8s.io/apiserver/pkg/server.NewRequestInfoResolver).
// The tests compare parse with it; only the tests link it.
var apiserverFactory = &apirequest.RequestInfoFactory{
	APIPrefixes:          sets.NewString("api", "apis"),
	GrouplessAPIPrefixes: sets.NewString("api"),
}

// fromAPIServer is the apiserver's RequestInfo in parse's terms.
func fromAPIServer(ri *apirequest.RequestInfo) request {
	return request{
		Path:              ri.Path,
		IsResourceRequest: ri.IsResourceRequest,
		Verb:              ri.Verb,
		APIPrefix:         ri.APIPrefix,
		APIGroup:          ri.APIGroup,
		APIVersion:        ri.APIVersion,
		Namespace:         ri.Namespace,
		Resource:          ri.Resource,
		Subresource:       ri.Subresource,
		Name:              ri.Name,
	}
}

// parseTargets are real request targets of every shape the apiserver
// parses, and odd ones.
var parseTargets = []struct{ method, target string }{
	// Core group, namespaced and cluster-scoped, get/list/watch.
	{"GET", "/api/v1/namespaces/default/pods/p"},
	{"HEAD", "/api/v1/namespaces/default/pods/p"},
	{"GET", "/api/v1/namespaces/default/pods"},
	{"GET", "/api/v1/pods"},
	{"GET", "/api/v1/pods?limit=500&resourceVersion=0"},
	{"GET", "/api/v1/nodes/n1"},
	{"GET", "/api/v1/namespaces"},
	{"GET", "/api/v1/namespaces/kube-system"},
	{"GET", "/api/v1/namespaces/kube-system/status"},
	{"PUT", "/api/v1/namespaces/kube-system/finalize"},
	{"GET", "/api/v1/namespaces/ns/log"},
	// Named groups.
	{"GET", "/apis/apps/v1/namespaces/ns/deployments/d"},
	{"PATCH", "/apis/apps/v1/namespaces/ns/deployments/d/scale"},
	{"PUT", "/apis/apps/v1/namespaces/ns/deployments/d/status"},
	{"POST", "/apis/apps/v1/namespaces/ns/deployments"},
	{"GET", "/apis/rbac.authorization.k8s.io/v1/clusterroles/admin"},
	{"POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews"},
	{"GET", "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kube-scheduler"},
	{"PUT", "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kube-scheduler"},
	{"GET", "/apis/example.dev/v1alpha1/namespaces/ns/widgets/w/x/y/z"},
	// Watches: the query, the deprecated /watch/ prefix.
	{"GET", "/api/v1/pods?watch=1"},
	{"GET", "/api/v1/pods?watch=true&resourceVersion=10&allowWatchBookmarks=true"},
	{"GET", "/api/v1/pods?watch=false"},
	{"GET", "/api/v1/pods?watch=FALSE"},
	{"GET", "/api/v1/pods?watch=0"},
	{"GET", "/api/v1/pods?watch="},
	{"GET", "/api/v1/pods?watch"},
	{"GET", "/api/v1/pods?watch=yes"},
	{"GET", "/api/v1/pods?watch=0&watch=1"},
	{"GET", "/api/v1/pods?watch=1&watch=0"},
	{"GET", "/api/v1/pods?w%61tch=1"},
	{"GET", "/api/v1/pods?watch=%31"},
	{"GET", "/api/v1/pods?watch=%zz&watch=1"},
	{"GET", "/api/v1/pods?watch=1;x=2"},
	{"GET", "/api/v1/pods?x=1;y&watch=1"},
	{"GET", "/api/v1/pods?watch=+"},
	{"GET", "/api/v1/pods?&&watch=1&"},
	{"GET", "/api/v1/pods?limit=abc&watch=true"},
	{"GET", "/api/v1/pods?labelSelector=%3D%3D%3D&watch=false"},
	{"GET", "/api/v1/pods?labelSelector=%3D%3D%3D&watch=1"},
	{"GET", "/api/v1/namespaces/ns/pods/p?watch=true"},
	{"GET", "/api/v1/watch/pods"},
	{"GET", "/api/v1/watch/namespaces/ns/pods"},
	{"GET", "/api/v1/watch/namespaces/ns/pods/p"},
	{"GET", "/apis/apps/v1/watch/deployments"},
	{"GET", "/apis/apps/v1/watch/namespaces/ns/deployments/d"},
	{"GET", "/api/v1/watch"},
	{"GET", "/apis/apps/v1/watch"},
	// Writes and deletecollection.
	{"DELETE", "/api/v1/namespaces/ns/pods/p"},
	{"DELETE", "/api/v1/namespaces/ns/pods"},
	{"DELETE", "/apis/apps/v1/namespaces/ns/deployments"},
	{"DELETE", "/api/v1/namespaces/ns"},
	{"POST", "/api/v1/namespaces/ns/pods/p/eviction"},
	{"POST", "/api/v1/namespaces/ns/serviceaccounts/sa/token"},
	// Node streams and proxy.
	{"GET", "/api/v1/namespaces/ns/pods/p/log?follow=true&container=c"},
	{"POST", "/api/v1/namespaces/ns/pods/p/exec?command=ls&stdout=true"},
	{"GET", "/api/v1/namespaces/ns/pods/p/attach"},
	{"POST", "/api/v1/namespaces/ns/pods/p/portforward"},
	{"GET", "/api/v1/namespaces/ns/services/https:s:443/proxy/metrics"},
	{"GET", "/api/v1/nodes/n/proxy/stats/summary"},
	{"GET", "/api/v1/proxy/namespaces/ns/pods/p"},
	{"GET", "/api/v1/proxy/nodes/n/stats"},
	{"POST", "/apis/g/v1/proxy"},
	// Non-resource URLs.
	{"GET", "/"},
	{"GET", "/healthz"},
	{"GET", "/livez?verbose"},
	{"GET", "/readyz/etcd"},
	{"GET", "/version"},
	{"GET", "/openapi/v2"},
	{"GET", "/openapi/v3/apis/apps/v1"},
	{"GET", "/api"},
	{"GET", "/api/v1"},
	{"GET", "/apis"},
	{"GET", "/apis/apps"},
	{"GET", "/apis/apps/v1"},
	{"GET", "/metrics"},
	{"GET", "/debug/pprof/profile?seconds=30"},
	{"GET", "/.well-known/openid-configuration"},
	{"OPTIONS", "/api/v1/pods"},
	{"WATCH", "/healthz"},
	{"get", "/api/v1/pods"},
	{"Get", "/version"},
	{"", "/api/v1/pods"},
	// Odd paths.
	{"GET", "/api/v1/pods/"},
	{"GET", "/api/v1/namespaces/ns/pods/p/"},
	{"GET", "//api//v1//pods"},
	{"GET", "///api/v1/pods///"},
	{"GET", "/api/v1//namespaces/ns/pods"},
	{"GET", "/api/v1/namespaces//pods"},
	{"GET", "/api/v1/namespaces/ns/pods/a%2Fb"},
	{"GET", "/api/v1/namespaces/ns%2Fx/pods"},
	{"GET", "/API/v1/pods"},
	{"GET", "/apis/v1"},
	{"GET", "/apis/g/v1/namespaces"},
	{"GET", "/apis/g/v1/namespaces/ns"},
	{"GET", "/apis/g/v1/watch/namespaces"},
	{"GET", "/apis/g/v1/proxy/namespaces/ns/r/n/sub/x"},
	{"GET", "/apis/g/v1/watch/namespaces/ns/r/n/sub/x/y/z/a/b/c"},
	{"GET", "/api/v1/namespaces/ns/pods/p/log/x/y/z/a/b/c/d"},
}

// TestParseMatchesApiserver compares parse with kube-apiserver's own
// parser on real request targets.
func TestParseMatchesApiserver(t *testing.T) {
	for _, tc := range parseTargets {
		u, err := url.ParseRequestURI(tc.target)
		if err != nil {
			t.Fatalf("%s: %v", tc.target, err)
		}
		compareWithApiserver(t, tc.method, u.Path, u.RawQuery)
	}
}

// FuzzParseMatchesApiserver compares parse with kube-apiserver's own
// parser for any method, path and query.
func FuzzParseMatchesApiserver(f *testing.F) {
	for _, tc := range parseTargets {
		path, query, _ := strings.Cut(tc.target, "?")
		f.Add(tc.method, path, query)
	}
	f.Fuzz(func(t *testing.T, method, path, query string) {
		compareWithApiserver(t, method, path, query)
	})
}

func compareWithApiserver(t *testing.T, method, path, query string) {
	t.Helper()
	r := &http.Request{Method: method, URL: &url.URL{Path: path, RawQuery: query}, Header: http.Header{}}
	ri, err := apiserverFactory.NewRequestInfo(r)
	want := fromAPIServer(ri)
	got, ok := parse(method, path, query)
	if ok != (err == nil) {
		t.Errorf("%q %q?%s: parse ok = %v, apiserver error %v", method, path, query, ok, err)
	}
	// The apiserver takes a list's name from a fieldSelector on
	// metadata.name; parse does not (see request.Name).
	if got.Name == "" && want.Name != "" && len(r.URL.Query()["fieldSelector"]) > 0 {
		want.Name = ""
	}
	// The one corner parse decides by the ordinary path (see watchParam).
	if got.Verb == "list" && want.Verb == "watch" {
		if v := r.URL.Query()["watch"]; len(v) > 0 && strings.EqualFold(v[0], "false") && strings.ToLower(v[0]) != "false" {
			want.Verb = "list"
		}
	}
	if got != want {
		t.Errorf("%q %q?%s:\nparse     %+v\napiserver %+v", method, path, query, got, want)
	}
}

// TestParseAllocations: parse allocates nothing for the requests clients
// send; the apiserver's parser allocated 3 times per request.
func TestParseAllocations(t *testing.T) {
	for _, target := range []string{
		"/api/v1/namespaces/ns/pods/p",
		"/apis/apps/v1/namespaces/ns/deployments?watch=true&resourceVersion=123&allowWatchBookmarks=true",
		"/api/v1/pods?limit=500&resourceVersion=0",
		"/healthz",
	} {
		u, _ := url.ParseRequestURI(target)
		if got := testing.AllocsPerRun(100, func() { parse("GET", u.Path, u.RawQuery) }); got != 0 {
			t.Errorf("parse(GET %s) allocates %.0f times, want 0", target, got)
		}
	}
}
