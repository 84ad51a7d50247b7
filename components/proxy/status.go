package proxy

import (
	"encoding/json"
	"net/http"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// statusClientClosedRequest is what the proxy records when the client went
// away before an answer existed (nginx's and Caddy's 499). Nobody reads the
// response; the code keeps such requests apart from real 5xx in metrics.
const statusClientClosedRequest = 499

// writeStatus answers with a metav1.Status, the body client-go decodes into
// a typed *errors.StatusError, so callers see a reason (ServiceUnavailable,
// Timeout, ...) and the message instead of "unknown error".
func writeStatus(w http.ResponseWriter, code int, reason metav1.StatusReason, message string) {
	body, err := json.Marshal(metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure,
		Message:  message,
		Reason:   reason,
		Code:     int32(code),
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
