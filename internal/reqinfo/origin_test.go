package reqinfo

import (
	"net/http/httptest"
	"testing"
)

func TestOriginOf(t *testing.T) {
	tests := []struct {
		method, target string
		want           Origin
	}{
		{"POST", "/api/v1/namespaces/ns/configmaps", OriginAPIServer},
		{"GET", "/apis/apps/v1/namespaces/ns/deployments?watch=1", OriginAPIServer},
		{"POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", OriginAPIServer},
		{"GET", "/api/v1/namespaces/ns/pods/p", OriginAPIServer},
		{"POST", "/api/v1/namespaces/ns/pods/p/eviction", OriginAPIServer},
		{"GET", "/version", OriginAPIServer},
		{"GET", "/apis", OriginAPIServer},
		// The group document of any group is kube-aggregator's own.
		{"GET", "/apis/metrics.k8s.io", OriginAPIServer},
		{"GET", "/apis/metrics.k8s.io/", OriginAPIServer},

		{"POST", "/api/v1/namespaces/ns/services/x/proxy/", OriginProxy},
		{"GET", "/api/v1/namespaces/ns/services/https:x:443/proxy/any/path", OriginProxy},
		{"POST", "/api/v1/namespaces/ns/pods/p:8080/proxy", OriginProxy},
		{"GET", "/api/v1/nodes/n/proxy/metrics", OriginProxy},
		{"GET", "/api/v1/proxy/namespaces/ns/services/x/", OriginProxy},

		{"GET", "/api/v1/namespaces/ns/pods/p/log?follow=1", OriginNode},
		{"POST", "/api/v1/namespaces/ns/pods/p/exec?command=ls", OriginNode},
		{"POST", "/api/v1/namespaces/ns/pods/p/attach", OriginNode},
		{"POST", "/api/v1/namespaces/ns/pods/p/portforward", OriginNode},

		{"POST", "/apis/example.dev/v1/namespaces/ns/widgets", OriginAggregated},
		{"GET", "/apis/metrics.k8s.io/v1beta1/nodes", OriginAggregated},
		{"GET", "/apis/metrics.k8s.io/v1beta1", OriginAggregated},
		{"GET", "/apis/metrics.k8s.io/v1beta1/", OriginAggregated},
		// Alpha-only groups may be claimed by an APIService.
		{"POST", "/apis/lifecycle.k8s.io/v1alpha1/leases", OriginAggregated},
		// RequestInfo fails on a bare special verb; the group still counts.
		{"GET", "/apis/example.dev/v1/watch", OriginAggregated},
		{"GET", "/api/v1/watch", OriginAPIServer},
	}
	for _, tt := range tests {
		r := httptest.NewRequest(tt.method, tt.target, nil)
		if got := New(r).Origin; got != tt.want {
			t.Errorf("%s %s: origin %v, want %v", tt.method, tt.target, got, tt.want)
		}
	}
}
