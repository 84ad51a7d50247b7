package webhook

import (
	"bytes"
	"encoding/json"
	"errors"
)

// Bounds on one AdmissionReview, checked before anything is decoded. The
// webhook port is reachable by whatever the network lets through (without
// --client-ca-file, by anyone), and decoding JSON into k8s.io/api types
// amplifies small inputs: each 3-byte `{},` in spec.containers becomes a
// zero corev1.Container of 408 bytes, with the slice's growth about 2.1 KiB
// allocated. A 512 KiB pod of them allocates 351 MiB when decoded, of
// volumes 229 MiB, of status.containerStatuses 183 MiB, of managedFields
// 96 MiB (go test -run TestReviewMemoryBounded -v). So the body is counted
// first, by scanShape, which walks the bytes without allocating, and only a
// review within these bounds is decoded: one at the bounds allocates about
// 6 MiB, and one beyond them about twice its bytes, for the body read.
//
// A pre-scan rather than a decoder with limits: encoding/json has no
// element limit, and a scan is one linear pass over bytes already in
// memory, path-independent for its main bound (values), so no spelling of
// a key (escapes, case, Unicode folding) gets around it.
const (
	// MaxReviewBytes bounds the request body. kube-apiserver refuses a
	// write request above 3 MiB (its MaxRequestBodyBytes) and etcd an
	// object above 1.5 MiB (--max-request-bytes); a pod CREATE's review
	// carries the pod once (no oldObject) in an envelope of a few KiB.
	// A pod whose JSON is larger could not have been created anyway.
	MaxReviewBytes = 3 << 20
	// MaxReviewValues bounds the JSON values in the body: every object,
	// array, string, number, true, false and null, the envelope's and the
	// pod's: a container's env variable is 3 of them, and about as many
	// again in the pod's managedFields.
	MaxReviewValues = 10_000
	// MaxPodContainers bounds the pod's containers, init containers and
	// ephemeral containers together: the largest element type (2.1 KiB
	// each decoded), and no real pod has more than a few dozen.
	MaxPodContainers = 256
	// MaxPodVolumes bounds the pod's volumes (1.4 KiB each decoded).
	MaxPodVolumes = 1024
	// maxDepth is encoding/json's own nesting limit.
	maxDepth = 10_000
)

// shape is what scanShape counts in an AdmissionReview's bytes.
type shape struct {
	values     int // JSON values in the body, the root included
	containers int // elements of request.object.spec's containers, initContainers and ephemeralContainers
	volumes    int // elements of request.object.spec.volumes
}

// tooComplex says which bound s exceeds, or "" for none.
func (s shape) tooComplex() string {
	switch {
	case s.values > MaxReviewValues:
		return "more than 10000 JSON values"
	case s.containers > MaxPodContainers:
		return "more than 256 containers (init and ephemeral ones included)"
	case s.volumes > MaxPodVolumes:
		return "more than 1024 volumes"
	}
	return ""
}

// node tells where in an AdmissionReview a JSON value is, as far as
// scanShape cares.
type node uint8

const (
	nodeOther node = iota
	nodeReview
	nodeRequest
	nodeObject
	nodeSpec
	nodeContainers // an array whose elements are containers
	nodeVolumes
)

// child is the node of the value at key k of an object at n.
// encoding/json matches keys to fields ignoring case (with Unicode
// folding: "ſpec" is spec), so bytes.EqualFold does here.
func (n node) child(k []byte) node {
	is := func(s string) bool { return bytes.EqualFold(k, []byte(s)) }
	switch n {
	case nodeReview:
		if is("request") {
			return nodeRequest
		}
	case nodeRequest:
		if is("object") {
			return nodeObject
		}
	case nodeObject:
		if is("spec") {
			return nodeSpec
		}
	case nodeSpec:
		switch {
		case is("containers"), is("initContainers"), is("ephemeralContainers"):
			return nodeContainers
		case is("volumes"):
			return nodeVolumes
		}
	}
	return nodeOther
}

var errMalformed = errors.New("not valid JSON")

// scanShape counts the values of the JSON document b, and the containers
// and volumes of the pod in it if it is an AdmissionReview, without
// decoding it and without allocating beyond a stack of one byte per
// nesting level. It stops as soon as values exceed maxValues, returning
// what it counted so far. It accepts every valid JSON document and counts
// it exactly (FuzzScanShape holds it to encoding/json); on invalid input
// it may return anything, with or without errMalformed, since
// encoding/json rejects that input afterwards. Repeated keys are all
// counted, which only errs on the safe side.
func scanShape(b []byte, maxValues int) (shape, error) {
	var s shape
	sc := scanner{b: b}
	// stack: per open object or array, its node, with the array bit set
	// for an array.
	stack := make([]node, 0, 16)
	next := nodeReview // the node of the value about to be read
	for {
		// A value.
		sc.ws()
		if sc.eof() {
			return s, errMalformed
		}
		s.values++
		if s.values > maxValues {
			return s, nil
		}
		if len(stack) > 0 {
			switch stack[len(stack)-1] {
			case nodeContainers | array:
				s.containers++
			case nodeVolumes | array:
				s.volumes++
			}
		}
		switch c := sc.b[sc.i]; c {
		case '{', '[':
			if len(stack) >= maxDepth {
				return s, errMalformed
			}
			top := next
			if c == '[' {
				top |= array
			}
			stack = append(stack, top)
			sc.i++
			sc.ws()
			if !sc.eof() && (sc.b[sc.i] == '}' || sc.b[sc.i] == ']') {
				break // empty: closed below
			}
			if top&array != 0 {
				next = nodeOther
				continue
			}
			k, err := sc.key()
			if err != nil {
				return s, err
			}
			next = top.child(k)
			continue
		case '"':
			if _, _, err := sc.str(); err != nil {
				return s, err
			}
		default:
			// A number, true, false or null: up to the next delimiter.
			start := sc.i
			for !sc.eof() && !delimiter(sc.b[sc.i]) {
				sc.i++
			}
			if sc.i == start {
				return s, errMalformed
			}
		}
		// After a value: the ends of objects and arrays, then a comma and
		// the next element or member.
	after:
		for {
			sc.ws()
			if len(stack) == 0 {
				if !sc.eof() {
					return s, errMalformed
				}
				return s, nil
			}
			if sc.eof() {
				return s, errMalformed
			}
			top := stack[len(stack)-1]
			c := sc.b[sc.i]
			sc.i++
			switch {
			case c == ']' && top&array != 0, c == '}' && top&array == 0:
				stack = stack[:len(stack)-1]
				continue
			case c != ',':
				return s, errMalformed
			}
			if top&array != 0 {
				next = nodeOther
				break after
			}
			k, err := sc.key()
			if err != nil {
				return s, err
			}
			next = top.child(k)
			break after
		}
	}
}

// array marks an array's node on scanShape's stack.
const array node = 0x80

func delimiter(c byte) bool {
	switch c {
	case ',', ']', '}', ':', '"', ' ', '\t', '\n', '\r':
		return true
	}
	return false
}

// scanner is scanShape's position in its input.
type scanner struct {
	b []byte
	i int
}

func (sc *scanner) eof() bool { return sc.i >= len(sc.b) }

func (sc *scanner) ws() {
	for !sc.eof() {
		switch sc.b[sc.i] {
		case ' ', '\t', '\n', '\r':
			sc.i++
		default:
			return
		}
	}
}

// str skips the string at b[i] (its opening quote) and returns its
// contents, undecoded, and whether they hold escapes.
func (sc *scanner) str() (s []byte, escaped bool, err error) {
	start := sc.i + 1
	for sc.i++; !sc.eof(); sc.i++ {
		switch sc.b[sc.i] {
		case '\\':
			escaped = true
			sc.i++
		case '"':
			sc.i++
			return sc.b[start : sc.i-1], escaped, nil
		}
	}
	return nil, false, errMalformed
}

// key reads an object's key and its colon. A key with escapes is
// unescaped, as encoding/json does before matching it (`"\u0073pec"` is
// spec): the scan's only allocation, for such keys only.
func (sc *scanner) key() ([]byte, error) {
	sc.ws()
	if sc.eof() || sc.b[sc.i] != '"' {
		return nil, errMalformed
	}
	start := sc.i
	k, escaped, err := sc.str()
	if err != nil {
		return nil, err
	}
	if escaped {
		var u string
		if json.Unmarshal(sc.b[start:sc.i], &u) != nil {
			return nil, errMalformed
		}
		k = []byte(u)
	}
	sc.ws()
	if sc.eof() || sc.b[sc.i] != ':' {
		return nil, errMalformed
	}
	sc.i++
	return k, nil
}
