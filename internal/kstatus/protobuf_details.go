package kstatus

import (
	"bytes"

	"google.golang.org/protobuf/encoding/protowire"
)

// StatusFields is what a client-side proxy reads of a Status to tell
// kube-apiserver's answers apart: the code, reason and message, and
// whether its details name an object (name, group or kind) or carry
// causes.
type StatusFields struct {
	Code          int32
	Reason        Reason
	Message       string
	NamesAnObject bool
	Causes        int
}

// ProtobufStatusFields reads a protobuf-encoded metav1.Status, magic
// included, as ProtobufStatus does; ok is false for anything else.
func ProtobufStatusFields(b []byte) (f StatusFields, ok bool) {
	reason, code, ok := ProtobufStatus(b)
	if !ok {
		return StatusFields{}, false
	}
	f.Reason, f.Code = reason, code
	unknown, _ := bytes.CutPrefix(b, protobufMagic)
	var status []byte
	protoFields(unknown, func(num protowire.Number, v []byte) {
		if num == 2 {
			status = v
		}
	})
	var details [][]byte // an embedded message given twice is merged
	protoFields(status, func(num protowire.Number, v []byte) {
		switch num {
		case 3:
			f.Message = string(v)
		case 5:
			details = append(details, v)
		}
	})
	var name, group, kind []byte
	for _, d := range details {
		protoFields(d, func(num protowire.Number, v []byte) {
			switch num {
			case 1:
				name = v
			case 2:
				group = v
			case 3:
				kind = v
			case 4:
				f.Causes++
			}
		})
	}
	f.NamesAnObject = len(name) > 0 || len(group) > 0 || len(kind) > 0
	return f, true
}

// ReasonNotFound is metav1.StatusReasonNotFound.
const ReasonNotFound Reason = "NotFound"
