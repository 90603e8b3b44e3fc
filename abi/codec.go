package abi

import (
	"errors"

	"github.com/wasmhost/wasmhost/abi/wire"
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

// The codec writes and reads the protocol buffers wire format with package abi/wire rather than
// with google.golang.org/protobuf/encoding/protowire: that package's initialization links fmt, os
// and reflect into every Go guest (about 0.4 MB of a 2.8 MB module). The tests check it against
// protowire.

// AppendPluginRequest appends the encoding of r to b.
func AppendPluginRequest(b []byte, r PluginRequest) []byte {
	b = wire.AppendNonEmpty(b, 1, r.Socket)
	b = wire.AppendNonEmpty(b, 2, r.Type)
	b = wire.AppendNonEmpty(b, 3, r.Name)
	b = wire.AppendNonEmpty(b, 4, r.Endpoint)
	for _, v := range r.Versions {
		b = wire.AppendString(b, 5, v)
	}
	return b
}

// DecodePluginRequest decodes b. Unknown fields are skipped, so later ABI minor revisions may
// add fields.
func DecodePluginRequest(b []byte) (PluginRequest, error) {
	var r PluginRequest
	err := decodeStrings(b, 5, func(num uint32, s string) {
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
		b = wire.AppendString(b, 1, t)
	}
	b = wire.AppendNonEmpty(b, 2, m.Name)
	b = wire.AppendNonEmpty(b, 3, m.Version)
	return b
}

// DecodeManifest decodes b. Unknown fields are skipped.
func DecodeManifest(b []byte) (Manifest, error) {
	var m Manifest
	err := decodeStrings(b, 3, func(num uint32, s string) {
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

// decodeStrings walks a message whose known fields, numbered 1 to maxKnown, are all strings,
// calling fn for each. Fields of other numbers or wire types are skipped; groups (wire types 3
// and 4, deprecated) and reserved wire types are malformed. Known strings must be valid UTF-8.
func decodeStrings(b []byte, maxKnown uint32, fn func(num uint32, s string)) error {
	err := wire.Walk(b, func(f wire.Field) error {
		if f.Num > maxKnown || f.Type != wire.BytesType {
			return nil
		}
		s, err := f.Text()
		if err == nil {
			fn(f.Num, s)
		}
		return err
	})
	if err != nil {
		return &malformedError{err: err}
	}
	return nil
}

// malformedError is an ErrMalformed that says where: it wraps the *wire.Error, whose message
// starts with wire.ErrMalformed's and goes on with the field and what is wrong.
type malformedError struct{ err error }

func (e *malformedError) Error() string {
	return ErrMalformed.Error() + e.err.Error()[len(wire.ErrMalformed.Error()):]
}

func (e *malformedError) Unwrap() error { return ErrMalformed }
