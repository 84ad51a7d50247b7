package webhook

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// maxReviewBytes bounds a request body; kube-apiserver's own limit on an
// object is 3 MiB, and the review carries it once (CREATE has no oldObject).
const maxReviewBytes = 8 << 20

// Mutator decides on one pod. Config satisfies it; Patch must be safe for
// concurrent use and must not modify its argument. Its operations address
// the pod's JSON as the request carries it, and touch only what changes:
// the pod is decoded into this build's k8s.io/api types to decide, and
// whatever those types do not know (newer fields, volume sources) is kept
// only because the patch never writes back a decoded container or volume.
type Mutator interface {
	Patch(pod *corev1.Pod, scope Scope) ([]PatchOp, Decision)
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

// NewHandler returns the admission handler; a nil log discards its lines.
func NewHandler(m Mutator, metrics *Metrics, log *slog.Logger) *Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Handler{mutator: m, metrics: metrics, log: log}
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST an admission.k8s.io/v1 AdmissionReview", http.StatusMethodNotAllowed)
		return
	}
	scope, ok := ScopeOfPath(r.URL.Path)
	if !ok {
		http.Error(w, "unknown path: POST to /mutate, /mutate/namespace or /mutate/hosted", http.StatusNotFound)
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
	resp := h.Review(review.Request, scope)
	out := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Response: resp,
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

// Review decides on one admission request that scope opted in.
func (h *Handler) Review(req *admissionv1.AdmissionRequest, scope Scope) *admissionv1.AdmissionResponse {
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
	ops, d := h.mutator.Patch(&pod, scope)
	h.metrics.observe(d)
	if d.Warning != "" {
		resp.Warnings = []string{d.Warning}
	}
	name := pod.Name
	if name == "" {
		name = pod.GenerateName + "*"
	}
	if len(ops) == 0 {
		if d.Warning != "" {
			h.log.Info("pod not injected", "namespace", req.Namespace, "pod", name, "reason", d.Reason, "detail", d.Warning)
		}
		return resp
	}
	patch, err := json.Marshal(ops)
	if err != nil {
		h.metrics.observe(Decision{Reason: ReasonInvalid})
		resp.Warnings = []string{"fanout-injector could not encode its patch and left the pod unmutated: " + err.Error()}
		return resp
	}
	pt := admissionv1.PatchTypeJSONPatch
	resp.Patch, resp.PatchType = patch, &pt
	if d.Removed {
		h.log.Info("fanout removed from a pod made hostNetwork after injection", "namespace", req.Namespace, "pod", name, "clients", d.Clients)
		return resp
	}
	h.log.Info("pod injected", "namespace", req.Namespace, "pod", name, "scope", scope, "clients", d.Clients, "inCluster", d.InCluster)
	return resp
}
