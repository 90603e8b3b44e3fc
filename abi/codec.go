package abi

import (
	"errors"
	"strconv"
	"unicode/utf8"
)

// PluginRequest is the request of ExportValidate, ExportRegister and ExportDeregister, encoded
// in the protocol buffers wire format:
//
//	message PluginRequest {
//	  string socket = 1;            // registration socket path
//	  string type = 2;              // plugin type, e.g. CSIPlugin
//	  string name = 3;              // plugin name
//	  string endpoint = 4;          // plugin endpoint (the socket when the plugin gave none)
//	  repeated string versions = 5; // supported versions, as the plugin sent them
//	}
type PluginRequest struct {
	Socket   string
	Type     string
	Name     string
	Endpoint string
	Versions []string
}

// Manifest is what ExportManifest returns, encoded in the protocol buffers wire format:
//
//	message Manifest {
//	  repeated string plugin_types = 1; // the plugin types this module handles (at least one)
//	  string name = 2;                  // a human name for the handler (optional)
//	  string version = 3;               // the handler's own version (optional)
//	}
type Manifest struct {
	PluginTypes []string
	Name        string
	Version     string
}

// ErrMalformed is returned for bytes that are not a valid encoding.
var ErrMalformed = errors.New("abi: malformed message")

// The codec writes and reads the protocol buffers wire format itself rather than with
// google.golang.org/protobuf/encoding/protowire: that package's initialization links fmt, os and
// reflect into every Go guest (about 0.4 MB of a 2.8 MB module). The tests check it against
// protowire.

// AppendPluginRequest appends the encoding of r to b.
func AppendPluginRequest(b []byte, r PluginRequest) []byte {
	b = appendString(b, 1, r.Socket)
	b = appendString(b, 2, r.Type)
	b = appendString(b, 3, r.Name)
	b = appendString(b, 4, r.Endpoint)
	for _, v := range r.Versions {
		b = appendField(b, 5, v)
	}
	return b
}

// DecodePluginRequest decodes b. Unknown fields are skipped, so later ABI minor revisions may
// add fields.
func DecodePluginRequest(b []byte) (PluginRequest, error) {
	var r PluginRequest
	err := decodeStrings(b, 5, func(num uint64, s string) {
		switch num {
		case 1:
			r.Socket = s
		case 2:
			r.Type = s
		case 3:
			r.Name = s
		case 4:
			r.Endpoint = s
		case 5:
			r.Versions = append(r.Versions, s)
		}
	})
	return r, err
}

// AppendManifest appends the encoding of m to b.
func AppendManifest(b []byte, m Manifest) []byte {
	for _, t := range m.PluginTypes {
		b = appendField(b, 1, t)
	}
	b = appendString(b, 2, m.Name)
	b = appendString(b, 3, m.Version)
	return b
}

// DecodeManifest decodes b. Unknown fields are skipped.
func DecodeManifest(b []byte) (Manifest, error) {
	var m Manifest
	err := decodeStrings(b, 3, func(num uint64, s string) {
		switch num {
		case 1:
			m.PluginTypes = append(m.PluginTypes, s)
		case 2:
			m.Name = s
		case 3:
			m.Version = s
		}
	})
	return m, err
}

// Wire types of the protocol buffers encoding.
const (
	wireVarint  = 0
	wireFixed64 = 1
	wireBytes   = 2
	wireFixed32 = 5
)

func appendVarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

// appendField appends a length-delimited field.
func appendField(b []byte, num uint64, s string) []byte {
	b = appendVarint(b, num<<3|wireBytes)
	b = appendVarint(b, uint64(len(s)))
	return append(b, s...)
}

// appendString appends a string field unless it is empty (proto3 omits default values).
func appendString(b []byte, num uint64, s string) []byte {
	if s == "" {
		return b
	}
	return appendField(b, num, s)
}

// consumeVarint returns the varint at the start of b and its length, or a length of -1 when b
// does not start with a varint of at most 64 bits.
func consumeVarint(b []byte) (uint64, int) {
	var v uint64
	for i := 0; i < len(b) && i < 10; i++ {
		c := b[i]
		if i == 9 && c > 1 {
			return 0, -1 // over 64 bits
		}
		v |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			return v, i + 1
		}
	}
	return 0, -1
}

// decodeStrings walks a message whose known fields, numbered 1 to maxKnown, are all strings,
// calling fn for each. Fields of other numbers or wire types are skipped; groups (wire types 3
// and 4, deprecated) and reserved wire types are malformed. Known strings must be valid UTF-8.
func decodeStrings(b []byte, maxKnown uint64, fn func(num uint64, s string)) error {
	for len(b) > 0 {
		tag, n := consumeVarint(b)
		num := tag >> 3
		if n < 0 || num == 0 || num > 1<<31-1 {
			return malformed("bad field tag", 0)
		}
		b = b[n:]
		switch tag & 7 {
		case wireVarint:
			_, n = consumeVarint(b)
		case wireFixed64:
			n = 8
		case wireFixed32:
			n = 4
		case wireBytes:
			size, m := consumeVarint(b)
			if m < 0 || size > uint64(len(b)-m) {
				return malformed("truncated", num)
			}
			v := b[m : m+int(size)]
			if num <= maxKnown {
				if !utf8.Valid(v) {
					return malformed("not valid UTF-8", num)
				}
				fn(num, string(v))
			}
			n = m + int(size)
		default:
			return malformed("unsupported wire type "+strconv.Itoa(int(tag&7)), num)
		}
		if n < 0 || n > len(b) {
			return malformed("truncated", num)
		}
		b = b[n:]
	}
	return nil
}

// malformedError is an ErrMalformed that says where.
type malformedError struct {
	what  string
	field uint64
}

func (e *malformedError) Error() string {
	if e.field == 0 {
		return ErrMalformed.Error() + ": " + e.what
	}
	return ErrMalformed.Error() + ": field " + strconv.FormatUint(e.field, 10) + ": " + e.what
}

func (e *malformedError) Unwrap() error { return ErrMalformed }

func malformed(what string, field uint64) error { return &malformedError{what: what, field: field} }
