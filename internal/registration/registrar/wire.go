package registrar

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/wasmhost/wasmhost/internal/registration"
)

// GetInfo's answer is decoded by hand rather than by the generated PluginInfo type: protobuf-go
// refuses a proto3 string that is not valid UTF-8 while unmarshalling, which would make a
// malformed answer look like a broken connection. Decoding the four fields here lets it be
// refused as ErrInvalidInfo with the field named, and told to the plugin.

// Field numbers of pluginregistration.PluginInfo (api.proto).
const (
	fieldType     = 1
	fieldName     = 2
	fieldEndpoint = 3
	fieldVersions = 4
)

// decodeInfo decodes a PluginInfo message without judging the values (ValidateInfo does). As
// protobuf does, the last of a repeated singular field wins and unknown fields are skipped. A
// known field with the wrong wire type, or a truncated message, is refused. The message is at
// most registration.MaxInfoMessageSize bytes (the gRPC receive limit), which bounds the work.
func decodeInfo(socket string, b []byte) (registration.PluginInfo, error) {
	var p registration.PluginInfo
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: socket %s: GetInfo answer: %s", registration.ErrInvalidInfo, socket, fmt.Sprintf(format, args...))
	}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return p, bad("malformed tag: %v", protowire.ParseError(n))
		}
		b = b[n:]
		if num < fieldType || num > fieldVersions {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return p, bad("malformed field %d: %v", num, protowire.ParseError(n))
			}
			b = b[n:]
			continue
		}
		if typ != protowire.BytesType {
			return p, bad("field %d has wire type %d, want %d (length-delimited)", num, typ, protowire.BytesType)
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return p, bad("malformed field %d: %v", num, protowire.ParseError(n))
		}
		b = b[n:]
		switch num {
		case fieldType:
			p.Type = string(v)
		case fieldName:
			p.Name = string(v)
		case fieldEndpoint:
			p.Endpoint = string(v)
		case fieldVersions:
			p.Versions = append(p.Versions, string(v))
		}
	}
	return p, nil
}

// encodeStatus encodes a RegistrationStatus message (plugin_registered = 1, error = 2). The
// reason must be valid UTF-8 (see reasonFor).
func encodeStatus(registered bool, reason string) []byte {
	var b []byte
	if registered {
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, 1)
	}
	if reason != "" {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendString(b, reason)
	}
	return b
}
