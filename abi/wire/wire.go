// Package wire reads and writes the protocol buffers binary wire format
// (https://protobuf.dev/programming-guides/encoding/) for the few small messages of wasmhost's
// ABI and its handlers: varints, tags, length-delimited (string, bytes, message) fields, and
// skipping fields a decoder does not know.
//
// It exists so that a Go handler module does not link google.golang.org/protobuf: that
// package's initialization pulls fmt, os and reflect into every guest (about 0.4 MB of a 2 MB
// module). This package uses neither fmt, reflect nor strconv, allocates only when a caller
// appends, and is checked against protowire by its tests.
//
// It is part of the ABI's Go form (package abi uses it for PluginRequest and Manifest) and is
// meant for handler authors too; like abi, it has no dependency on the daemon.
//
// Decoding follows the rules of abi/README.md: fields of any number and wire type can be
// skipped, except the deprecated groups (wire types 3 and 4); a field number of 0 or over
// MaxFieldNumber, a varint over 64 bits and a field that runs past the end of the message are
// malformed.
package wire

import (
	"errors"
	"unicode/utf8"
)

// Type is a wire type: how a field's value is encoded.
type Type uint8

// Wire types.
const (
	VarintType     Type = 0 // int32, int64, uint32, uint64, sint*, bool, enum
	Fixed64Type    Type = 1 // fixed64, sfixed64, double
	BytesType      Type = 2 // string, bytes, embedded messages, packed repeated fields
	StartGroupType Type = 3 // deprecated; malformed here
	EndGroupType   Type = 4 // deprecated; malformed here
	Fixed32Type    Type = 5 // fixed32, sfixed32, float
)

// MaxFieldNumber is the largest field number a decoder accepts. It is what protowire accepts
// when it parses; protobuf's schema language itself stops at 1<<29 - 1.
const MaxFieldNumber = 1<<31 - 1

// ErrMalformed is matched (with errors.Is) by every decoding error of this package.
var ErrMalformed = errors.New("malformed protobuf message")

// Error is a decoding error: what is wrong, and in which field when it is known.
type Error struct {
	Field uint32 // the field's number; 0 when the tag itself could not be read
	What  string // "truncated", "not valid UTF-8", ...
}

func (e *Error) Error() string {
	if e.Field == 0 {
		return ErrMalformed.Error() + ": " + e.What
	}
	return ErrMalformed.Error() + ": field " + itoa(uint64(e.Field)) + ": " + e.What
}

// Unwrap makes an *Error match ErrMalformed.
func (e *Error) Unwrap() error { return ErrMalformed }

// malformed makes an *Error. It is not inlined: one call is smaller than an allocation at
// every place a message can be malformed.
//
//go:noinline
func malformed(field uint32, what string) error { return &Error{Field: field, What: what} }

// AppendVarint appends v as a base-128 varint.
func AppendVarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

// ConsumeVarint returns the varint at the start of b and its length in bytes, or a length of
// -1 when b does not start with a varint of at most 64 bits (at most 10 bytes).
func ConsumeVarint(b []byte) (uint64, int) {
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

// AppendTag appends the tag of field num of wire type t.
func AppendTag(b []byte, num uint32, t Type) []byte {
	return AppendVarint(b, uint64(num)<<3|uint64(t&7))
}

// AppendString appends a length-delimited field holding s, even when s is empty (as each
// element of a repeated string field is written).
func AppendString(b []byte, num uint32, s string) []byte {
	b = AppendTag(b, num, BytesType)
	b = AppendVarint(b, uint64(len(s)))
	return append(b, s...)
}

// AppendNonEmpty appends a string field unless s is empty: proto3 leaves out a singular field
// that has its default value.
func AppendNonEmpty(b []byte, num uint32, s string) []byte {
	if s == "" {
		return b
	}
	return AppendString(b, num, s)
}

// AppendBytes appends a length-delimited field holding v: bytes, or an embedded message
// encoded beforehand.
func AppendBytes(b []byte, num uint32, v []byte) []byte {
	b = AppendTag(b, num, BytesType)
	b = AppendVarint(b, uint64(len(v)))
	return append(b, v...)
}

// AppendUint appends a varint field holding v (a uint64; an int64 or int32 is converted with
// uint64(v), so a negative one takes ten bytes, as protobuf writes it).
func AppendUint(b []byte, num uint32, v uint64) []byte {
	return AppendVarint(AppendTag(b, num, VarintType), v)
}

// Field is one field of a message, as Walk decodes it.
type Field struct {
	Num  uint32 // its number, 1 to MaxFieldNumber
	Type Type   // its wire type: VarintType, Fixed64Type, BytesType or Fixed32Type
	// Varint is the value of a VarintType field.
	Varint uint64
	// Data is the content of a BytesType field, or the 8 or 4 little-endian bytes of a
	// fixed-size one. It is a view of the message, not a copy.
	Data []byte
}

// Text returns a length-delimited field as a string, which must be valid UTF-8 (as a proto3
// string field must be). Another wire type or invalid UTF-8 is an *Error.
func (f Field) Text() (string, error) {
	if f.Type != BytesType {
		return "", f.WrongType()
	}
	if !utf8.Valid(f.Data) {
		return "", malformed(f.Num, "not valid UTF-8")
	}
	return string(f.Data), nil
}

// WrongType returns the *Error for a field of a known number that has an unexpected wire type,
// for decoders that check what they know.
func (f Field) WrongType() error {
	return malformed(f.Num, wrongTypes[f.Type&7])
}

// The messages of wire type errors, by wire type: constants, so that making an error costs no
// formatting code in a guest.
var (
	wrongTypes = [8]string{
		"unexpected wire type 0", "unexpected wire type 1", "unexpected wire type 2", "unexpected wire type 3",
		"unexpected wire type 4", "unexpected wire type 5", "unexpected wire type 6", "unexpected wire type 7",
	}
	unsupportedTypes = [8]string{
		"unsupported wire type 0", "unsupported wire type 1", "unsupported wire type 2", "unsupported wire type 3",
		"unsupported wire type 4", "unsupported wire type 5", "unsupported wire type 6", "unsupported wire type 7",
	}
)

// Walk calls fn for each field of the message b, in order, and stops at the first error (of
// decoding, or returned by fn). Skipping a field is returning nil for it.
func Walk(b []byte, fn func(Field) error) error {
	for len(b) > 0 {
		tag, n := ConsumeVarint(b)
		num := tag >> 3
		if n < 0 || num == 0 || num > MaxFieldNumber {
			return malformed(0, "bad field tag")
		}
		f := Field{Num: uint32(num), Type: Type(tag & 7)}
		b = b[n:]
		switch f.Type {
		case VarintType:
			if f.Varint, n = ConsumeVarint(b); n < 0 {
				return malformed(f.Num, "bad varint")
			}
		case Fixed64Type:
			n = 8
		case Fixed32Type:
			n = 4
		case BytesType:
			size, m := ConsumeVarint(b)
			if m < 0 || size > uint64(len(b)-m) {
				return malformed(f.Num, "truncated")
			}
			b = b[m:]
			n = int(size)
		default:
			return malformed(f.Num, unsupportedTypes[f.Type])
		}
		if n > len(b) {
			return malformed(f.Num, "truncated")
		}
		if f.Type != VarintType {
			f.Data = b[:n]
		}
		b = b[n:]
		if err := fn(f); err != nil {
			return err
		}
	}
	return nil
}

// itoa formats v in decimal, without strconv.
func itoa(v uint64) string {
	var buf [20]byte
	i := len(buf)
	for {
		i--
		buf[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			return string(buf[i:])
		}
	}
}
