package injector

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"reflect"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// maxReviewBytes bounds a request body; kube-apiserver's own limit on an
// object is 3 MiB, and the review carries it once (CREATE has no oldObject).
const maxReviewBytes = 8 << 20

// Mutator decides on one pod. Config satisfies it; Mutate must be safe for
// concurrent use and must not modify its argument.
type Mutator interface {
	Mutate(pod *corev1.Pod) (*corev1.Pod, Decision)
}

var _ Mutator = Config{}

// Handler answers admission.k8s.io/v1 AdmissionReviews for pods. It always
// allows the pod: it patches it or leaves it, with a warning when the pod
// asked for injection and could not get it.
type Handler struct {
	mutator Mutator
	metrics *Metrics
	log     *slog.Logger
}

// NewHandler returns the admission handler.
func NewHandler(m Mutator, metrics *Metrics, log *slog.Logger) *Handler {
	if log == nil {
		log = slog.Default()
	}
	return &Handler{mutator: m, metrics: metrics, log: log}
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST an admission.k8s.io/v1 AdmissionReview", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxReviewBytes+1))
	if err != nil || len(body) > maxReviewBytes {
		http.Error(w, "reading the AdmissionReview failed or it exceeds 8 MiB", http.StatusBadRequest)
		return
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
		http.Error(w, fmt.Sprintf("expected an admission.k8s.io/v1 AdmissionReview with a request: %v", err), http.StatusBadRequest)
		return
	}
	resp := h.Review(review.Request)
	out := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Response: resp,
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

// Review decides on one admission request.
func (h *Handler) Review(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	if req.Kind.Kind != "Pod" || req.Kind.Group != "" || req.SubResource != "" || req.Operation != admissionv1.Create {
		// The webhook configuration sends pod CREATEs only; anything
		// else passes untouched and uncounted.
		return resp
	}
	var pod corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		h.metrics.observe(Decision{Reason: ReasonInvalid})
		resp.Warnings = []string{"fanout-injector could not decode the pod and left it unmutated: " + err.Error()}
		return resp
	}
	out, d := h.mutator.Mutate(&pod)
	h.metrics.observe(d)
	if d.Warning != "" {
		resp.Warnings = []string{d.Warning}
	}
	name := pod.Name
	if name == "" {
		name = pod.GenerateName + "*"
	}
	if !d.Mutated {
		if d.Warning != "" {
			h.log.Info("pod not injected", "namespace", req.Namespace, "pod", name, "reason", d.Reason, "detail", d.Warning)
		}
		return resp
	}
	patch, err := jsonPatch(&pod, out)
	if err != nil {
		h.metrics.observe(Decision{Reason: ReasonInvalid})
		resp.Warnings = []string{"fanout-injector could not encode its patch and left the pod unmutated: " + err.Error()}
		return resp
	}
	pt := admissionv1.PatchTypeJSONPatch
	resp.Patch, resp.PatchType = patch, &pt
	h.log.Info("pod injected", "namespace", req.Namespace, "pod", name, "clients", d.Clients, "inCluster", d.InCluster)
	return resp
}

// patchOp is one RFC 6902 operation.
type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// jsonPatch replaces, as whole values, the parts of the pod Mutate changes.
// "add" replaces a member that exists and creates one that does not, so
// the patch applies whether or not the pod had init containers, volumes or
// annotations.
func jsonPatch(in, out *corev1.Pod) ([]byte, error) {
	var ops []patchOp
	add := func(p string, a, b any) {
		if !reflect.DeepEqual(a, b) {
			ops = append(ops, patchOp{Op: "add", Path: p, Value: b})
		}
	}
	add("/metadata/annotations", in.Annotations, out.Annotations)
	add("/spec/initContainers", in.Spec.InitContainers, out.Spec.InitContainers)
	add("/spec/containers", in.Spec.Containers, out.Spec.Containers)
	add("/spec/volumes", in.Spec.Volumes, out.Spec.Volumes)
	return json.Marshal(ops)
}
