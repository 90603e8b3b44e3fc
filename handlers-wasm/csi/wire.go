package main

import (
	"errors"
	"slices"
	"strings"
	"unicode/utf8"
)

// This file reads and writes the few protocol buffers messages the handler needs, in the wire
// format, by hand: a protobuf library (or encoding/json) would add far more to the module than
// the handler itself.

// Wire types of the protocol buffers encoding.
const (
	wireVarint  = 0
	wireFixed64 = 1
	wireBytes   = 2
	wireFixed32 = 5
)

var errMalformed = errors.New("malformed protobuf message")

func appendVarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

// appendString appends a string field, leaving it out when empty as proto3 does.
func appendString(b []byte, num uint64, s string) []byte {
	if s == "" {
		return b
	}
	b = appendVarint(b, num<<3|wireBytes)
	b = appendVarint(b, uint64(len(s)))
	return append(b, s...)
}

func consumeVarint(b []byte) (uint64, int) {
	var v uint64
	for i := 0; i < len(b) && i < 10; i++ {
		c := b[i]
		if i == 9 && c > 1 {
			return 0, -1
		}
		v |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			return v, i + 1
		}
	}
	return 0, -1
}

// field is one field of a message: its number and wire type, and its value (varint) or its
// bytes (length-delimited).
type field struct {
	num   uint64
	typ   uint64
	value uint64
	data  []byte
}

// walk calls fn for each field of the message b. Fixed-size fields are skipped; groups, bad tags
// and truncated fields make the message malformed.
func walk(b []byte, fn func(f field) error) error {
	for len(b) > 0 {
		tag, n := consumeVarint(b)
		if n < 0 || tag>>3 == 0 || tag>>3 > 1<<29-1 {
			return errMalformed
		}
		b = b[n:]
		f := field{num: tag >> 3, typ: tag & 7}
		switch f.typ {
		case wireVarint:
			f.value, n = consumeVarint(b)
		case wireFixed64:
			n = 8
		case wireFixed32:
			n = 4
		case wireBytes:
			size, m := consumeVarint(b)
			if m < 0 || size > uint64(len(b)-m) {
				return errMalformed
			}
			f.data = b[m : m+int(size)]
			n = m + int(size)
		default:
			return errMalformed
		}
		if n < 0 || n > len(b) {
			return errMalformed
		}
		b = b[n:]
		if f.typ == wireFixed32 || f.typ == wireFixed64 {
			continue
		}
		if err := fn(f); err != nil {
			return err
		}
	}
	return nil
}

// str returns a length-delimited field as a string; it must be valid UTF-8.
func (f field) str() (string, error) {
	if f.typ != wireBytes || !utf8.Valid(f.data) {
		return "", errMalformed
	}
	return string(f.data), nil
}

// record is what the handler keeps in the store about a registered driver:
//
//	message Record {
//	  string endpoint = 1;
//	  string version = 2; // the highest supported version, as the driver sent it
//	  string socket = 3;  // the registration socket
//	}
type record struct {
	endpoint, version, socket string
}

func (r record) encode() []byte {
	b := appendString(nil, 1, r.endpoint)
	b = appendString(b, 2, r.version)
	return appendString(b, 3, r.socket)
}

func decodeRecord(b []byte) (record, error) {
	var r record
	err := walk(b, func(f field) error {
		if f.num > 3 {
			return nil
		}
		s, err := f.str()
		switch f.num {
		case 1:
			r.endpoint = s
		case 2:
			r.version = s
		case 3:
			r.socket = s
		}
		return err
	})
	return r, err
}

// nodeInfo is the part of a CSI NodeGetInfoResponse the handler publishes:
//
//	message NodeGetInfoResponse {
//	  string node_id = 1;
//	  int64 max_volumes_per_node = 2;
//	  Topology accessible_topology = 3;
//	}
//	message Topology { map<string, string> segments = 1; }
//
// A map field is a repeated message of key = 1 and value = 2.
type nodeInfo struct {
	nodeID     string
	maxVolumes int64
	segments   map[string]string
}

func decodeNodeInfo(b []byte) (nodeInfo, error) {
	var ni nodeInfo
	err := walk(b, func(f field) error {
		var err error
		switch {
		case f.num == 1:
			ni.nodeID, err = f.str()
		case f.num == 2 && f.typ == wireVarint:
			ni.maxVolumes = int64(f.value)
		case f.num == 2:
			err = errMalformed
		case f.num == 3:
			if f.typ != wireBytes {
				return errMalformed
			}
			// A message field that occurs twice is merged: the segments add up.
			err = walk(f.data, func(f field) error {
				if f.num != 1 {
					return nil
				}
				if f.typ != wireBytes {
					return errMalformed
				}
				return decodeSegment(f.data, &ni.segments)
			})
		}
		return err
	})
	return ni, err
}

// decodeSegment decodes one map entry of Topology.segments into *m.
func decodeSegment(b []byte, m *map[string]string) error {
	var key, value string
	err := walk(b, func(f field) error {
		var err error
		switch f.num {
		case 1:
			key, err = f.str()
		case 2:
			value, err = f.str()
		}
		return err
	})
	if err != nil {
		return err
	}
	if *m == nil {
		*m = map[string]string{}
	}
	(*m)[key] = value // a key that occurs again replaces the value, as in a map
	return nil
}

// topology renders segments as "k=v,k=v", sorted by key.
func topology(segments map[string]string) string {
	keys := make([]string, 0, len(segments))
	for k := range segments {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var sb strings.Builder
	for i, k := range keys {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(k)
		sb.WriteByte('=')
		sb.WriteString(segments[k])
	}
	return sb.String()
}

// quoteList renders strings as a list of quoted strings, for reasons.
func quoteList(ss []string) string {
	var sb strings.Builder
	sb.WriteByte('[')
	for i, s := range ss {
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString(quote(s))
	}
	sb.WriteByte(']')
	return sb.String()
}

// quote puts s in double quotes, escaping quotes, backslashes and ASCII control characters so
// that odd versions stay visible. It does what strconv.Quote does for the cases that matter
// here without linking strconv's Unicode tables (about 20 KB) into the module.
func quote(s string) string {
	const hex = "0123456789abcdef"
	b := make([]byte, 0, len(s)+2)
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c == 0x7f:
			b = append(b, '\\', 'x', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return string(append(b, '"'))
}
