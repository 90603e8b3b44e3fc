package abi

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
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

// AppendPluginRequest appends the encoding of r to b.
func AppendPluginRequest(b []byte, r PluginRequest) []byte {
	b = appendString(b, 1, r.Socket)
	b = appendString(b, 2, r.Type)
	b = appendString(b, 3, r.Name)
	b = appendString(b, 4, r.Endpoint)
	for _, v := range r.Versions {
		b = protowire.AppendTag(b, 5, protowire.BytesType)
		b = protowire.AppendString(b, v)
	}
	return b
}

// DecodePluginRequest decodes b. Unknown fields are skipped, so later ABI minor revisions may
// add fields.
func DecodePluginRequest(b []byte) (PluginRequest, error) {
	var r PluginRequest
	err := decodeStrings(b, func(num protowire.Number, s string) {
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
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, t)
	}
	b = appendString(b, 2, m.Name)
	b = appendString(b, 3, m.Version)
	return b
}

// DecodeManifest decodes b.
func DecodeManifest(b []byte) (Manifest, error) {
	var m Manifest
	err := decodeStrings(b, func(num protowire.Number, s string) {
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

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

// decodeStrings walks a message whose known fields are all strings, calling fn for each; fields
// of other wire types are skipped. Strings must be valid UTF-8.
func decodeStrings(b []byte, fn func(protowire.Number, string)) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("%w: bad tag: %v", ErrMalformed, protowire.ParseError(n))
		}
		b = b[n:]
		if typ != protowire.BytesType {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return fmt.Errorf("%w: field %d: %v", ErrMalformed, num, protowire.ParseError(n))
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return fmt.Errorf("%w: field %d: %v", ErrMalformed, num, protowire.ParseError(n))
		}
		b = b[n:]
		if !utf8.Valid(v) {
			return fmt.Errorf("%w: field %d is not valid UTF-8", ErrMalformed, num)
		}
		fn(num, string(v))
	}
	return nil
}
