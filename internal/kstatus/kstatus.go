// Package kstatus writes fanout's error answers as Kubernetes Status
// objects (metav1.Status), which client-go decodes into typed errors. The
// proxy's failures and the listener's refusals both end here.
package kstatus

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// ClientClosedRequest is what the proxy records when the client went
// away before an answer existed (nginx's and Caddy's 499). Nobody reads the
// response; the code keeps such requests apart from real 5xx in metrics.
const ClientClosedRequest = 499

// Reason is metav1.StatusReason: the machine-readable cause of a
// failure, which client-go's errors.ReasonForError and IsXxx helpers read.
type Reason string

// The reasons fanout answers with, spelled as metav1's StatusReason
// constants.
const (
	ReasonUnknown            Reason = ""
	ReasonBadRequest         Reason = "BadRequest"
	ReasonForbidden          Reason = "Forbidden"
	ReasonMethodNotAllowed   Reason = "MethodNotAllowed"
	ReasonTooManyRequests    Reason = "TooManyRequests"
	ReasonServiceUnavailable Reason = "ServiceUnavailable"
	ReasonTimeout            Reason = "Timeout"
	ReasonInternalError      Reason = "InternalError"
)

// status is the part of metav1.Status that fanout writes, with its JSON
// field names and order, so the body is byte for byte what json.Marshal
// makes of a metav1.Status (TestStatusMatchesMetav1). It is its own type
// because apimachinery's meta/v1 links the runtime scheme and its
// dependencies into the sidecar (docs/footprint.md).
type status struct {
	Kind       string `json:"kind"`
	APIVersion string `json:"apiVersion"`
	// Metadata is metav1.ListMeta, empty; encoding/json writes an empty
	// struct despite omitempty, and so does this.
	Metadata struct{} `json:"metadata"`
	Status   string   `json:"status,omitempty"`
	Message  string   `json:"message,omitempty"`
	Reason   Reason   `json:"reason,omitempty"`
	Code     int32    `json:"code,omitempty"`
}

// Write answers with a metav1.Status, the body client-go decodes into
// a typed *errors.StatusError, so callers see a reason (ServiceUnavailable,
// Timeout, ...) and the message instead of "unknown error".
func Write(w http.ResponseWriter, code int, reason Reason, message string) {
	body, err := json.Marshal(status{
		Kind:       "Status",
		APIVersion: "v1",
		Status:     "Failure",
		Message:    message,
		Reason:     reason,
		Code:       int32(code),
	})
	if err != nil { // a Status of strings and ints always marshals
		body = []byte(`{"kind":"Status","apiVersion":"v1","status":"Failure"}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Length", strconv.Itoa(len(body)+1))
	if code == http.StatusServiceUnavailable {
		// client-go retries 5xx answers that carry Retry-After (up to 10
		// times), which rides out a startup without endpoints or a restart.
		h.Set("Retry-After", "1")
	}
	w.WriteHeader(code)
	_, _ = w.Write(append(body, '\n'))
}
