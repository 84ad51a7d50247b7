package harness

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// AuditEvent is the part of an audit.k8s.io/v1 Event the harness reads.
type AuditEvent struct {
	AuditID    string `json:"auditID"`
	Stage      string `json:"stage"`
	Verb       string `json:"verb"`
	RequestURI string `json:"requestURI"`
	User       struct {
		Username string   `json:"username"`
		Groups   []string `json:"groups"`
	} `json:"user"`
	// SourceIPs are the client's addresses: X-Forwarded-For's, then the
	// connection's (a pod's IP for a sidecar on the real node).
	SourceIPs      []string `json:"sourceIPs"`
	UserAgent      string   `json:"userAgent"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	// RequestReceivedTimestamp is when the apiserver received the request.
	RequestReceivedTimestamp time.Time `json:"requestReceivedTimestamp"`
	// StageTimestamp is when the apiserver reached Stage.
	StageTimestamp time.Time `json:"stageTimestamp"`
	// ObjectRef is what a resource request is about; nil for others.
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		APIGroup    string `json:"apiGroup"`
		Namespace   string `json:"namespace"`
	} `json:"objectRef"`
}

// Served reports whether e marks one request served, counting each request
// once: at ResponseComplete, except for watches, which are counted when the
// response starts because a running watch has no ResponseComplete yet.
func (e *AuditEvent) Served() bool {
	if e.Verb == "watch" {
		return e.Stage == "ResponseStarted"
	}
	return e.Stage == "ResponseComplete"
}

// ReadAuditLog parses a JSON-lines audit log. A torn last line (the
// apiserver writing as we read) is ignored.
func ReadAuditLog(path string) ([]AuditEvent, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, err
	}
	var out []AuditEvent
	t := AuditTail{Path: path}
	_, err := t.Next(func(e *AuditEvent) { out = append(out, *e) })
	return out, err
}

// AuditTail reads an apiserver's audit log incrementally: each Next reads
// only what was written since the last. A live view redrawn every few
// seconds for as long as a demo runs would otherwise reread the whole log
// each time, at a cost that grows by the minute.
type AuditTail struct {
	Path    string
	off     int64
	partial []byte
}

// Next calls fn for each complete event written since the last call; a
// line the apiserver is still writing waits for the next call. A log not
// written yet reads as empty. When the file shrank (a new file at the same
// path) Next reads nothing and reports reset: the next call reads from the
// beginning.
func (t *AuditTail) Next(fn func(*AuditEvent)) (reset bool, err error) {
	f, err := os.Open(t.Path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return false, err
	}
	if fi.Size() < t.off {
		t.off, t.partial = 0, nil
		return true, nil
	}
	if _, err := f.Seek(t.off, io.SeekStart); err != nil {
		return false, err
	}
	// Up to the size just seen: what is appended meanwhile waits for the
	// next call, so one call ends even on a busy log.
	r := bufio.NewReaderSize(io.LimitReader(f, fi.Size()-t.off), 256<<10)
	for {
		line, err := r.ReadBytes('\n')
		t.off += int64(len(line))
		if len(t.partial) > 0 {
			line = append(t.partial, line...)
			t.partial = nil
		}
		if err == io.EOF {
			t.partial = line
			return false, nil
		}
		if err != nil {
			return false, err
		}
		var e AuditEvent
		if json.Unmarshal(line, &e) == nil {
			fn(&e)
		}
	}
}

// CountServed counts the requests in the audit log at path that were served
// for users matching match.
func CountServed(path string, match func(username string) bool) (int, error) {
	events, err := ReadAuditLog(path)
	if err != nil {
		return 0, err
	}
	n := 0
	for i := range events {
		if events[i].Served() && match(events[i].User.Username) {
			n++
		}
	}
	return n, nil
}

// UserIs matches exactly the given user names.
func UserIs(names ...string) func(string) bool {
	return func(u string) bool {
		for _, n := range names {
			if u == n {
				return true
			}
		}
		return false
	}
}

// ControllerManagerUsers matches kube-controller-manager's own identity and
// the per-controller service accounts it uses with
// --use-service-account-credentials.
func ControllerManagerUsers(u string) bool {
	return u == "system:kube-controller-manager" || strings.HasPrefix(u, "system:serviceaccount:kube-system:")
}

// ServedPerAPIServer counts, for each apiserver in order, the requests it
// served for users matching match, health probes excluded. It rereads the logs until two reads half
// a second apart agree (for at most five seconds), because an apiserver
// writes a request's final audit event just after sending the response.
func (cp *ControlPlane) ServedPerAPIServer(match func(username string) bool) ([]int, error) {
	return cp.ServedPerAPIServerWhere(func(e *AuditEvent) bool { return match(e.User.Username) })
}

// ServedPerAPIServerWhere is ServedPerAPIServer for any condition on the
// audit event, such as a user and a time window.
func (cp *ControlPlane) ServedPerAPIServerWhere(match func(*AuditEvent) bool) ([]int, error) {
	var prev []int
	for try := 0; try < 10; try++ {
		cur, err := cp.ServedPerAPIServerNow(match)
		if err != nil {
			return nil, err
		}
		if prev != nil && equalInts(prev, cur) {
			return cur, nil
		}
		prev = cur
		time.Sleep(500 * time.Millisecond)
	}
	// Still moving: the client is busy. What we have is as good as any.
	return prev, nil
}

// IsHealthProbe reports whether e is one of fanout's own requests to each
// endpoint, made with its client's identity: a /readyz, /livez or /healthz
// probe, or a read of the endpoint's discovery (User-Agent
// fanout-discovery: /api, /apis, /version). Both go to every endpoint
// alike by design, so counting them as the client's requests would
// flatter the shares.
func (e *AuditEvent) IsHealthProbe() bool {
	if e.UserAgent == "fanout-discovery" {
		return true
	}
	path, _, _ := strings.Cut(e.RequestURI, "?")
	for _, p := range []string{"/readyz", "/livez", "/healthz"} {
		if path == p || strings.HasPrefix(path, p+"/") {
			return true
		}
	}
	return false
}

// ServedPerAPIServerNow counts in one pass over the audit logs, without
// waiting for them to settle: for live views while a workload runs, where
// ServedPerAPIServer would wait in vain.
func (cp *ControlPlane) ServedPerAPIServerNow(match func(*AuditEvent) bool) ([]int, error) {
	cur := make([]int, len(cp.APIServers))
	for i, a := range cp.APIServers {
		events, err := ReadAuditLog(a.AuditLog)
		if err != nil {
			return nil, fmt.Errorf("reading the audit log of apiserver %d: %w", i+1, err)
		}
		for j := range events {
			if events[j].Served() && !events[j].IsHealthProbe() && match(&events[j]) {
				cur[i]++
			}
		}
	}
	return cur, nil
}

// Shares turns counts into fractions of their sum (all zero for no counts).
func Shares(counts []int) []float64 {
	total := 0
	for _, c := range counts {
		total += c
	}
	out := make([]float64, len(counts))
	if total == 0 {
		return out
	}
	for i, c := range counts {
		out[i] = float64(c) / float64(total)
	}
	return out
}

// FormatShares renders counts and shares as "1021 (34.0%), 990 (33.0%), …".
func FormatShares(counts []int) string {
	shares := Shares(counts)
	parts := make([]string, len(counts))
	for i := range counts {
		parts[i] = fmt.Sprintf("apiserver %d: %d (%.1f%%)", i+1, counts[i], 100*shares[i])
	}
	return strings.Join(parts, ", ")
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
