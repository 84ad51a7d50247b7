package kstatus

import (
	"bytes"

	"google.golang.org/protobuf/encoding/protowire"
)

// Reading kube-apiserver's Status in protobuf, the form a client that asks
// for application/vnd.kubernetes.protobuf gets: "k8s\x00" and a
// runtime.Unknown holding a metav1.Status, alone or as the object of a
// watch ERROR event.
//
// The fields are read as the generated (gogo) Unmarshal methods of those
// types read them, without linking them (docs/footprint.md): a message
// that does not parse, or gives a known field in the wrong wire type, is
// nothing; a field given twice counts with its last value, and an embedded
// message given twice is merged. The watch package's
// FuzzIsGoneProtobufEventMatchesGogo compares the two.

// protobufMagic starts every protobuf-encoded Kubernetes object.
var protobufMagic = []byte("k8s\x00")

// ProtobufWatchEvent reads one metav1.WatchEvent (a protobuf watch frame
// without its length prefix): its type and its object's raw bytes.
func ProtobufWatchEvent(ev []byte) (typ string, object []byte, ok bool) {
	if !protoValid(ev, watchEventSchema) {
		return "", nil, false
	}
	protoFields(ev, func(num protowire.Number, v []byte) {
		switch num {
		case 1:
			typ = string(v)
		case 2:
			// RawExtension occurrences merge: the last raw wins.
			protoFields(v, func(num protowire.Number, v []byte) {
				if num == 1 {
					object = v
				}
			})
		}
	})
	return typ, object, true
}

// ProtobufStatus reads the reason and code of a protobuf-encoded
// metav1.Status, magic included; ok is false for anything else.
func ProtobufStatus(b []byte) (reason Reason, code int32, ok bool) {
	unknown, ok := bytes.CutPrefix(b, protobufMagic)
	if !ok || !protoValid(unknown, unknownSchema) {
		return "", 0, false
	}
	var kind, status []byte
	protoFields(unknown, func(num protowire.Number, v []byte) {
		switch num {
		case 1:
			protoFields(v, func(num protowire.Number, v []byte) {
				if num == 2 {
					kind = v
				}
			})
		case 2:
			status = v
		}
	})
	if string(kind) != "Status" || !protoValid(status, statusSchema) {
		return "", 0, false
	}
	protoFields(status, func(num protowire.Number, v []byte) {
		if num == 4 {
			reason = Reason(v)
		}
	})
	protoVarints(status, func(num protowire.Number, v uint64) {
		if num == 6 {
			code = int32(v)
		}
	})
	return reason, code, true
}

// IsProtobuf reports whether b is a protobuf-encoded Kubernetes object.
func IsProtobuf(b []byte) bool { return bytes.HasPrefix(b, protobufMagic) }

// protoSchema is the fields of a message that its generated Unmarshal
// knows: their wire type, and the schema of an embedded message. Other
// fields are skipped.
type protoSchema map[protowire.Number]protoSchemaField

type protoSchemaField struct {
	typ protowire.Type
	msg protoSchema // an embedded message's fields, parsed too
}

var (
	bytesField  = protoSchemaField{typ: protowire.BytesType}
	varintField = protoSchemaField{typ: protowire.VarintType}

	// metav1.WatchEvent: type, object (runtime.RawExtension: raw).
	watchEventSchema = protoSchema{1: bytesField, 2: {protowire.BytesType, protoSchema{1: bytesField}}}
	// runtime.Unknown: typeMeta (apiVersion, kind), raw, contentEncoding,
	// contentType.
	unknownSchema = protoSchema{1: {protowire.BytesType, protoSchema{1: bytesField, 2: bytesField}},
		2: bytesField, 3: bytesField, 4: bytesField}
	// metav1.Status: metadata (ListMeta: selfLink, resourceVersion,
	// continue, remainingItemCount), status, message, reason, details
	// (StatusDetails: name, group, kind, causes (type, message, field),
	// retryAfterSeconds, uid), code.
	statusSchema = protoSchema{
		1: {protowire.BytesType, protoSchema{1: bytesField, 2: bytesField, 3: bytesField, 4: varintField}},
		2: bytesField, 3: bytesField, 4: bytesField,
		5: {protowire.BytesType, protoSchema{1: bytesField, 2: bytesField, 3: bytesField,
			4: {protowire.BytesType, protoSchema{1: bytesField, 2: bytesField, 3: bytesField}},
			5: varintField, 6: bytesField}},
		6: varintField,
	}
)

// protoValid reports whether b parses as the message schema describes.
func protoValid(b []byte, schema protoSchema) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ == protowire.EndGroupType {
			return false
		}
		b = b[n:]
		f, known := schema[num]
		if known && f.typ != typ {
			return false
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return false
		}
		if known && f.msg != nil {
			v, _ := protowire.ConsumeBytes(b)
			if !protoValid(v, f.msg) {
				return false
			}
		}
		b = b[n:]
	}
	return true
}

// protoFields calls field for each length-delimited field of b, a message
// protoValid accepted, in order.
func protoFields(b []byte, field func(num protowire.Number, v []byte)) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		b = b[n:]
		if typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(b)
			field(num, v)
		}
		b = b[protowire.ConsumeFieldValue(num, typ, b):]
	}
}

// protoVarints calls field for each varint field of b, a message
// protoValid accepted, in order.
func protoVarints(b []byte, field func(num protowire.Number, v uint64)) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		b = b[n:]
		if typ == protowire.VarintType {
			v, _ := protowire.ConsumeVarint(b)
			field(num, v)
		}
		b = b[protowire.ConsumeFieldValue(num, typ, b):]
	}
}
