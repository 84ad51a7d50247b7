package reqinfo

import (
	"net/url"
	"os"
	"strings"
)

// request is what kube-apiserver's RequestInfoFactory
// (k8s.io/apiserver/pkg/endpoints/request) learns of a request, as
// kube-apiserver configures it (API prefixes "api" and "apis", "api"
// without a group). fanout parses it itself: importing the factory links
// k8s.io/apiserver and apimachinery's conversion machinery, about 400
// packages, into the sidecar (docs/footprint.md). TestParseMatchesApiserver
// and FuzzParseMatchesApiserver keep the two in agreement.
//
// The strings are substrings of the request's path, query or method,
// or constants: a parse allocates nothing for the requests clients send.
type request struct {
	// Path is the URL path, unparsed.
	Path              string
	IsResourceRequest bool
	// Verb is the resource verb (get, list, watch, create, update, patch,
	// delete, deletecollection, proxy) of a resource request, the
	// lower-cased HTTP method of any other.
	Verb       string
	APIPrefix  string
	APIGroup   string
	APIVersion string
	Namespace  string
	Resource   string
	// Subresource and Name are as the path gives them. Unlike the
	// apiserver, Name is not taken from a fieldSelector
	// "metadata.name=x": nothing in fanout reads it, and the selector
	// grammar is not worth linking for it.
	Subresource string
	Name        string
}

// maxSegments is how many path segments parse looks at: the API prefix,
// group, version, a special verb, "namespaces" and the namespace, then
// resource, name and subresource. What follows is not interpreted.
const maxSegments = 9

// parse classifies a request as RequestInfoFactory.NewRequestInfo does.
// ok is false where the factory returns an error; the request then holds
// what was parsed before the failure, as the factory's does.
func parse(method, path, rawQuery string) (req request, ok bool) {
	req = request{Path: path, Verb: lowerMethod(method)}

	// The factory splits the path, trimmed of every leading and trailing
	// "/", on "/"; empty segments inside count.
	var seg [maxSegments]string
	n := 0
	if p := strings.Trim(path, "/"); p != "" {
		for {
			s, rest, more := strings.Cut(p, "/")
			if n < maxSegments {
				seg[n] = s
			}
			n++
			if !more {
				break
			}
			p = rest
		}
	}
	parts := seg[:min(n, maxSegments)]
	// left counts the segments not consumed yet, including those past
	// maxSegments that parts does not hold.
	left := n

	if left < 3 || (parts[0] != "api" && parts[0] != "apis") {
		return req, true
	}
	req.APIPrefix = parts[0]
	parts, left = parts[1:], left-1

	if req.APIPrefix != "api" {
		if left < 3 {
			return req, true
		}
		req.APIGroup = parts[0]
		parts, left = parts[1:], left-1
	}

	req.IsResourceRequest = true
	req.APIVersion = parts[0]
	parts, left = parts[1:], left-1

	if parts[0] == "proxy" || parts[0] == "watch" {
		if left < 2 {
			return req, false
		}
		req.Verb = parts[0]
		parts, left = parts[1:], left-1
	} else {
		switch method {
		case "POST":
			req.Verb = "create"
		case "GET", "HEAD":
			req.Verb = "get"
		case "PUT":
			req.Verb = "update"
		case "PATCH":
			req.Verb = "patch"
		case "DELETE":
			req.Verb = "delete"
		default:
			req.Verb = ""
		}
	}

	if parts[0] == "namespaces" {
		if left > 1 {
			req.Namespace = parts[1]
			// namespaces/{ns}/status and /finalize are the namespace's
			// subresources; anything else there is a namespaced resource.
			if left > 2 && parts[2] != "status" && parts[2] != "finalize" {
				parts, left = parts[2:], left-2
			}
		}
	}

	// parts is resource/name/subresource/what/is/not/interpreted.
	switch {
	case left >= 3 && req.Verb != "proxy":
		req.Subresource = parts[2]
		fallthrough
	case left >= 2:
		req.Name = parts[1]
		fallthrough
	case left >= 1:
		req.Resource = parts[0]
	}

	// A get without a name is a list, or a watch if the query says so.
	if req.Name == "" && req.Verb == "get" {
		if watchParam(rawQuery) {
			req.Verb = "watch"
		} else {
			req.Verb = "list"
		}
	}
	if req.Name == "" && req.Verb == "delete" {
		req.Verb = "deletecollection"
	}
	return req, true
}

// lowerMethod is strings.ToLower(method) without the allocation for the
// methods clients send.
func lowerMethod(method string) string {
	switch method {
	case "GET":
		return "get"
	case "POST":
		return "post"
	case "PUT":
		return "put"
	case "PATCH":
		return "patch"
	case "DELETE":
		return "delete"
	case "HEAD":
		return "head"
	case "OPTIONS":
		return "options"
	}
	return strings.ToLower(method)
}

// customMaxQueryParams is set when GODEBUG sets urlmaxqueryparams: the
// limit of url.ParseQuery is then the runtime's to tell, and watchParam
// asks it.
var customMaxQueryParams = strings.Contains(os.Getenv("GODEBUG"), "urlmaxqueryparams")

// maxQueryParams is net/url's default limit on the number of query
// parameters: a query with more has none for url.ParseQuery.
const maxQueryParams = 10000

// watchParam reports whether the query asks for a watch the way the
// apiserver decides it: the first "watch" parameter that url.ParseQuery
// keeps, true unless absent, "0" or "false" in any case. It scans the
// query as url.ParseQuery does (pairs with ";" or a bad escape are
// dropped) without building the map.
//
// One corner is decided differently: the apiserver falls back to
// strings.ToLower(v) == "false" when another parameter fails to decode
// (a bad labelSelector, a non-numeric limit), while its ordinary path
// compares with strings.EqualFold. The two differ only for a value with a
// non-ASCII letter that folds to ASCII ("falſe"), which no client sends;
// parse takes the ordinary path.
func watchParam(rawQuery string) bool {
	if rawQuery == "" {
		return false
	}
	if customMaxQueryParams || strings.Count(rawQuery, "&")+1 > maxQueryParams {
		q, _ := url.ParseQuery(rawQuery)
		v, ok := q["watch"]
		return ok && isTrue(v[0])
	}
	for q := rawQuery; q != ""; {
		var pair string
		pair, q, _ = strings.Cut(q, "&")
		if pair == "" || strings.Contains(pair, ";") {
			continue
		}
		key, value, _ := strings.Cut(pair, "=")
		if strings.Contains(key, "%") {
			k, err := url.QueryUnescape(key)
			if err != nil {
				continue
			}
			key = k
		}
		if key != "watch" {
			continue
		}
		v, err := url.QueryUnescape(value)
		if err != nil {
			continue
		}
		return isTrue(v)
	}
	return false
}

// isTrue is apimachinery's Convert_Slice_string_To_bool for one value.
func isTrue(v string) bool {
	return v != "0" && !strings.EqualFold(v, "false")
}
