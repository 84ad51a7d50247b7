package webhook

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utiljson "k8s.io/apimachinery/pkg/util/json"
)

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

// Limits bound the reviews the handler works on at once.
type Limits struct {
	// MaxConcurrentReviews is how many reviews are read, decoded and
	// decided at once (--max-concurrent-reviews); at least 1.
	MaxConcurrentReviews int
	// QueueWait is how long a review waits for a slot before it is
	// answered 429 with Retry-After: 1. A review whose request says
	// ?timeout= (kube-apiserver sends the webhook's timeoutSeconds) waits
	// at most a third of it, so that the apiserver's retry fits.
	QueueWait time.Duration
}

// DefaultLimits: four reviews at once, each at most a few MiB of heap
// (shape.go), and a second's wait. A review takes well under a
// millisecond of CPU, so four slots on two CPUs serve hundreds of pod
// creations a second, and a burst waits rather than being refused.
func DefaultLimits() Limits { return Limits{MaxConcurrentReviews: 4, QueueWait: time.Second} }

// Handler answers admission.k8s.io/v1 AdmissionReviews for pods. It always
// allows the pod: it patches it or leaves it, with a warning when the pod
// asked for injection and could not get it. Requests beyond its bounds
// (MaxReviewBytes, Limits) get an HTTP error instead, which kube-apiserver
// treats as the webhook failing: with failurePolicy Ignore, the pod is
// admitted unmutated.
type Handler struct {
	mutator Mutator
	metrics *Metrics
	log     *slog.Logger
	slots   chan struct{} // one per review in flight
	wait    time.Duration
}

// NewHandler returns the admission handler; a nil log discards its lines.
func NewHandler(m Mutator, metrics *Metrics, log *slog.Logger, l Limits) *Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Handler{mutator: m, metrics: metrics, log: log, slots: make(chan struct{}, max(l.MaxConcurrentReviews, 1)), wait: l.QueueWait}
}

// ServeHTTP checks the request in order of cost: method and path, a slot,
// the body's size, its shape (scanShape: counted, not decoded), and only
// then decodes the review and, in Review, the pod.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		h.metrics.reject(RejectMalformed)
		http.Error(w, "POST an admission.k8s.io/v1 AdmissionReview", http.StatusMethodNotAllowed)
		return
	}
	scope, ok := ScopeOfPath(r.URL.Path)
	if !ok {
		h.metrics.reject(RejectMalformed)
		http.Error(w, "unknown path: POST to /mutate, /mutate/namespace or /mutate/hosted", http.StatusNotFound)
		return
	}
	// The slot is taken before the body is read, so that bodies held in
	// memory are bounded by the slots too.
	release, ok := h.acquire(r)
	if !ok {
		h.metrics.reject(RejectBusy)
		// client-go's REST client, which kube-apiserver calls webhooks
		// with, retries a 429 carrying Retry-After within the webhook's
		// timeoutSeconds.
		w.Header().Set("Retry-After", "1")
		http.Error(w, "fanout-injector is reviewing --max-concurrent-reviews pods already; retry", http.StatusTooManyRequests)
		return
	}
	defer release()
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxReviewBytes))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			h.metrics.reject(RejectTooLarge)
			http.Error(w, fmt.Sprintf("the AdmissionReview exceeds %d bytes (3 MiB, kube-apiserver's own limit on a request body)", MaxReviewBytes), http.StatusRequestEntityTooLarge)
			return
		}
		h.metrics.reject(RejectMalformed)
		http.Error(w, "reading the AdmissionReview failed: "+err.Error(), http.StatusBadRequest)
		return
	}
	shape, err := scanShape(body, MaxReviewValues)
	if err != nil {
		h.metrics.reject(RejectMalformed)
		http.Error(w, "expected an admission.k8s.io/v1 AdmissionReview: the body is not valid JSON", http.StatusBadRequest)
		return
	}
	if msg := shape.tooComplex(); msg != "" {
		// Only the uid is decoded, to answer with the pod allowed and a
		// warning that says why it was not looked at: a real pod this
		// large is rare, and its owner should learn why it has no fanout.
		var head struct {
			Request *struct {
				UID types.UID `json:"uid"`
			} `json:"request"`
		}
		if err := json.Unmarshal(body, &head); err != nil || head.Request == nil {
			h.metrics.reject(RejectMalformed)
			http.Error(w, "expected an admission.k8s.io/v1 AdmissionReview with a request", http.StatusBadRequest)
			return
		}
		h.metrics.reject(RejectTooComplex)
		h.log.Info("review too complex to decode; pod admitted unmutated", "detail", msg, "bytes", len(body))
		writeReview(w, &admissionv1.AdmissionResponse{UID: head.Request.UID, Allowed: true, Warnings: []string{
			"fanout-injector left the pod unmutated without reading it: its admission review has " + msg + ", beyond the injector's bounds (docs/injector.md, Bounds)",
		}})
		return
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
		h.metrics.reject(RejectMalformed)
		http.Error(w, fmt.Sprintf("expected an admission.k8s.io/v1 AdmissionReview with a request: %v", err), http.StatusBadRequest)
		return
	}
	writeReview(w, h.Review(review.Request, scope))
}

// acquire takes a review slot, waiting up to the queue wait; release
// gives it back.
func (h *Handler) acquire(r *http.Request) (release func(), ok bool) {
	select {
	case h.slots <- struct{}{}:
	default:
		wait := h.wait
		if t, err := time.ParseDuration(r.URL.Query().Get("timeout")); err == nil && t/3 < wait {
			wait = t / 3
		}
		h.metrics.Queued.Inc()
		timer := time.NewTimer(wait)
		select {
		case h.slots <- struct{}{}:
			ok = true
		case <-timer.C:
		case <-r.Context().Done():
		}
		timer.Stop()
		h.metrics.Queued.Dec()
		if !ok {
			return nil, false
		}
	}
	h.metrics.InFlight.Inc()
	return func() {
		h.metrics.InFlight.Dec()
		<-h.slots
	}, true
}

func writeReview(w http.ResponseWriter, resp *admissionv1.AdmissionResponse) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Response: resp,
	})
}

// podHead is what early needs of a pod: decoding it allocates only the
// label and annotation maps, which the caller has bounded.
type podHead struct {
	Metadata *struct {
		Labels      map[string]string `json:"labels"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		HostNetwork bool `json:"hostNetwork"`
	} `json:"spec"`
}

// Review decides on one admission request that scope opted in. It reads
// the pod's labels, annotations and hostNetwork first, and decodes the
// rest only when those leave the pod in question (early).
func (h *Handler) Review(req *admissionv1.AdmissionRequest, scope Scope) *admissionv1.AdmissionResponse {
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	if req.Kind.Kind != "Pod" || req.Kind.Group != "" || req.SubResource != "" || req.Operation != admissionv1.Create {
		// The webhook configuration sends pod CREATEs only; anything
		// else passes untouched and uncounted.
		return resp
	}
	// The pod is decoded as kube-apiserver decodes it, with keys matched
	// case-sensitively: encoding/json would take "Spec" for spec, and the
	// patch's paths, which name spec, would then not apply to the JSON
	// (FuzzHandler found it).
	var head podHead
	if utiljson.Unmarshal(req.Object.Raw, &head) == nil {
		if head.Metadata == nil {
			// kube-apiserver always sends it (the namespace at least);
			// the patch's operations on labels and annotations need it.
			h.metrics.observe(Decision{Reason: ReasonInvalid})
			resp.Warnings = []string{"fanout-injector left the pod unmutated: it has no metadata"}
			return resp
		}
		p := &corev1.Pod{}
		p.Labels, p.Annotations, p.Spec.HostNetwork = head.Metadata.Labels, head.Metadata.Annotations, head.Spec.HostNetwork
		if d, ok := early(p, scope); ok {
			h.metrics.observe(d)
			return resp
		}
	}
	// A head that does not decode leaves the error to the full decode.
	var pod corev1.Pod
	if err := utiljson.Unmarshal(req.Object.Raw, &pod); err != nil {
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
