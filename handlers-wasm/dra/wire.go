package main

import (
	"errors"
	"strings"
	"unicode/utf8"
)

// This file writes and reads the handler's store record in the protocol buffers wire format,
// by hand: a protobuf library (or encoding/json) would add far more to the module than the
// handler itself.

var errMalformed = errors.New("malformed protobuf message")

// record is what the handler keeps in the store about one registration socket:
//
//	message Record {
//	  string name = 1;     // the driver's name
//	  string endpoint = 2; // its DRA endpoint
//	  string service = 3;  // the DRAPlugin service to use, e.g. v1.DRAPlugin
//	  string health = 4;   // the DRAResourceHealth service offered; empty when none
//	}
type record struct {
	name, endpoint, service, health string
}

func (r record) encode() []byte {
	var b []byte
	for i, s := range [...]string{r.name, r.endpoint, r.service, r.health} {
		if s == "" {
			continue // proto3 leaves out empty strings
		}
		b = appendVarint(b, uint64(i+1)<<3|2) // field i+1, length-delimited
		b = appendVarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	return b
}

// decodeRecord decodes a record. Fields it does not know are skipped, of any wire type but the
// deprecated groups.
func decodeRecord(b []byte) (record, error) {
	var r record
	fields := [...]*string{&r.name, &r.endpoint, &r.service, &r.health}
	for len(b) > 0 {
		tag, n := consumeVarint(b)
		num := tag >> 3
		if n < 0 || num == 0 || num > 1<<29-1 {
			return record{}, errMalformed
		}
		b = b[n:]
		switch tag & 7 {
		case 0: // varint
			_, n = consumeVarint(b)
		case 1: // fixed64
			n = 8
		case 5: // fixed32
			n = 4
		case 2: // length-delimited
			size, m := consumeVarint(b)
			if m < 0 || size > uint64(len(b)-m) {
				return record{}, errMalformed
			}
			if num <= uint64(len(fields)) {
				v := b[m : m+int(size)]
				if !utf8.Valid(v) {
					return record{}, errMalformed
				}
				*fields[num-1] = string(v)
			}
			n = m + int(size)
		default:
			return record{}, errMalformed
		}
		if n < 0 || n > len(b) {
			return record{}, errMalformed
		}
		if tag&7 != 2 && num <= uint64(len(fields)) {
			return record{}, errMalformed // a known field of another wire type
		}
		b = b[n:]
	}
	return r, nil
}

func appendVarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
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
// that odd service names stay visible. It does what strconv.Quote does for the cases that matter
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
