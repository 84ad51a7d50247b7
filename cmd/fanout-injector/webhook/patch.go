package webhook

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// PatchOp is one RFC 6902 operation. The injector's operations address
// single members and array elements of the pod as kube-apiserver sent it,
// never a whole container or volume list, so that fields this build's
// k8s.io/api types do not know survive the patch.
type PatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// patcher changes a typed copy of the pod and records the same change as
// JSON Patch operations, one place for both, so that Mutate's result and
// the admission patch cannot drift. Array indices in the typed pod are the
// indices in the request's JSON: decoding keeps every element, in order.
type patcher struct {
	pod *corev1.Pod
	ops []PatchOp
}

func (p *patcher) add(path string, v any) {
	p.ops = append(p.ops, PatchOp{Op: "add", Path: path, Value: v})
}

// replace is for array elements: "add" there would insert.
func (p *patcher) replace(path string, v any) {
	p.ops = append(p.ops, PatchOp{Op: "replace", Path: path, Value: v})
}

func (p *patcher) remove(path string) {
	p.ops = append(p.ops, PatchOp{Op: "remove", Path: path})
}

// appendTo appends v to the typed list at JSON pointer base. An empty list
// may be absent or null in the request, so it is set whole ("add" creates
// or replaces a member); a non-empty one gets "-", the end of the array.
func appendTo[T any](p *patcher, list *[]T, base string, v T) {
	if len(*list) == 0 {
		p.add(base, []T{v})
	} else {
		p.add(base+"/-", v)
	}
	*list = append(*list, v)
}

// setAnnotation sets one annotation, creating the map when the pod has
// none.
func (p *patcher) setAnnotation(k, v string) {
	p.setIn(&p.pod.Annotations, "/metadata/annotations", k, v)
}

// setIn sets key k of the map m (at JSON pointer base) to v, creating the
// map when it is empty.
func (p *patcher) setIn(m *map[string]string, base, k, v string) {
	if len(*m) == 0 {
		p.add(base, map[string]string{k: v})
		*m = map[string]string{k: v}
		return
	}
	p.add(base+"/"+escape(k), v)
	(*m)[k] = v
}

func (p *patcher) deleteAnnotation(k string) {
	p.deleteIn(p.pod.Annotations, "/metadata/annotations", k)
}

func (p *patcher) deleteLabel(k string) { p.deleteIn(p.pod.Labels, "/metadata/labels", k) }

// deleteIn removes key k of the map m (at JSON pointer base), if set.
func (p *patcher) deleteIn(m map[string]string, base, k string) {
	if _, ok := m[k]; !ok {
		return
	}
	p.remove(base + "/" + escape(k))
	delete(m, k)
}

// escape makes s one JSON pointer reference token (RFC 6901).
func escape(s string) string { return strings.NewReplacer("~", "~0", "/", "~1").Replace(s) }

func containerPath(init bool, i int) string {
	if init {
		return fmt.Sprintf("/spec/initContainers/%d", i)
	}
	return fmt.Sprintf("/spec/containers/%d", i)
}

// setLabel sets one label, creating the map when the pod has none.
func (p *patcher) setLabel(k, v string) { p.setIn(&p.pod.Labels, "/metadata/labels", k, v) }
