package apis

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// Forms of a discovery answer, the values of fanout_discovery_merged_total.
const (
	formAggregated = "aggregated"
	formLegacy     = "legacy"
)

// contentTypeAggregated is what kube-apiserver answers aggregated
// discovery with.
const contentTypeAggregated = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"

// Answer returns fanout's own answer to a discovery request while the
// endpoints' discovery documents differ, and nil otherwise: the request
// then goes to an apiserver as any other. It answers GETs of /api and
// /apis asking for aggregated discovery v2 in JSON, and of /apis,
// /apis/<group>, /apis/<group>/<version> and /api/<version> asking for
// JSON, from the union of what the endpoints serve (merge.go); every
// other form (protobuf, CBOR, YAML, v2beta1, the "nopeer" profile,
// legacy /api, which lists the core group's v1 alone) and every group or
// version no endpoint serves goes through. An answer carries an ETag of
// its content; an If-None-Match that matches gets 304.
//
// It is called on the request path, for every request, concurrently:
// while the endpoints agree it costs one atomic load.
func (d *Discoverer) Answer(req *http.Request) *http.Response {
	m := d.merged.Load()
	if m == nil || req.Method != http.MethodGet {
		return nil
	}
	path := req.URL.Path
	if !strings.HasPrefix(path, "/api") {
		return nil
	}
	root := path == "/api" || path == "/apis"
	form := negotiate(req.Header.Get("Accept"), root)
	var answer doc
	var ok bool
	switch {
	case form == "":
		return nil
	case path == "/api":
		answer, ok = m.core, form == formAggregated
	case path == "/apis" && form == formAggregated:
		answer, ok = m.groups, true
	case path == "/apis":
		answer, ok = m.groupList, true
	default:
		group, version, valid := splitDiscoveryPath(path)
		switch {
		case !valid:
		case version == "":
			answer, ok = m.group[group]
		default:
			answer, ok = m.resources[path]
		}
	}
	if !ok {
		return nil
	}
	d.merges.WithLabelValues(form).Inc()
	h := http.Header{}
	h.Set("ETag", answer.etag)
	h.Set("Vary", "Accept")
	if form == formAggregated {
		h.Set("Content-Type", contentTypeAggregated)
		h.Set("Cache-Control", "public")
	} else {
		h.Set("Content-Type", "application/json")
	}
	resp := &http.Response{
		Status: "200 OK", StatusCode: http.StatusOK,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Request: req,
	}
	if req.Header.Get("If-None-Match") == answer.etag {
		resp.Status, resp.StatusCode = "304 Not Modified", http.StatusNotModified
		resp.Body = http.NoBody
		return resp
	}
	h.Set("Content-Length", strconv.Itoa(len(answer.body)))
	resp.ContentLength = int64(len(answer.body))
	resp.Body = io.NopCloser(bytes.NewReader(answer.body))
	return resp
}

// negotiate returns the form of the answer kube-apiserver would choose
// for accept, if fanout writes it, else "": it reads the media ranges in
// order, as kube-apiserver's negotiation does (client-go sends the
// aggregated form, then application/json). Aggregated discovery is
// answered at /api and /apis only (root); elsewhere the apiserver passes
// over it to the next range. A range fanout does not write, or with a
// parameter it does not know (profile=nopeer), leaves the request to the
// apiserver.
func negotiate(accept string, root bool) string {
	if strings.TrimSpace(accept) == "" {
		return formLegacy
	}
	for r := range strings.SplitSeq(accept, ",") {
		typ, params, _ := strings.Cut(r, ";")
		typ = strings.ToLower(strings.TrimSpace(typ))
		p := map[string]string{}
		for kv := range strings.SplitSeq(params, ";") {
			k, v, _ := strings.Cut(kv, "=")
			if k = strings.ToLower(strings.TrimSpace(k)); k != "" {
				p[k] = strings.TrimSpace(v)
			}
		}
		if q, ok := p["q"]; ok {
			if f, err := strconv.ParseFloat(q, 64); err == nil && f == 0 {
				continue
			}
			delete(p, "q")
		}
		switch {
		case typ == "application/json" && len(p) == 0, typ == "application/*" && len(p) == 0, typ == "*/*" && len(p) == 0:
			return formLegacy
		case typ == "application/json" && len(p) == 3 && p["g"] == "apidiscovery.k8s.io" && p["v"] == "v2" && p["as"] == aggregatedKind:
			if root {
				return formAggregated
			}
		default:
			return ""
		}
	}
	return ""
}
