package proxy

import (
	"net/http"

	"github.com/fanout-dev/fanout/internal/kstatus"
)

// The proxy's names for internal/kstatus, which writes every failure as a
// Kubernetes Status (the listener's refusals too).

const statusClientClosedRequest = kstatus.ClientClosedRequest

type statusReason = kstatus.Reason

const (
	statusReasonUnknown            = kstatus.ReasonUnknown
	statusReasonBadRequest         = kstatus.ReasonBadRequest
	statusReasonServiceUnavailable = kstatus.ReasonServiceUnavailable
	statusReasonTimeout            = kstatus.ReasonTimeout
	statusReasonInternalError      = kstatus.ReasonInternalError
	statusReasonTooManyRequests    = kstatus.ReasonTooManyRequests
)

func writeStatus(w http.ResponseWriter, code int, reason statusReason, message string) {
	kstatus.Write(w, code, reason, message)
}
