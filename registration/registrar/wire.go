package registrar

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	regapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/wasmhost/wasmhost/registration"
)

// GetInfo's answer is decoded by hand rather than by the generated PluginInfo type: protobuf-go
// refuses a proto3 string that is not valid UTF-8 while unmarshalling, and gRPC reports that as
// an Internal error indistinguishable from a broken connection. Decoding the four fields here
// lets a malformed answer be refused as ErrInvalidInfo with the field named, and told to the
// plugin.

// rawCodec sends proto messages as usual and receives into *rawMessage without decoding. Its
// name is "proto" so that the content type on the wire is the one plugins expect.
type rawCodec struct{}

var _ encoding.CodecV2 = rawCodec{}

type rawMessage struct{ b []byte }

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("raw codec: cannot marshal %T", v)
	}
	b, err := proto.Marshal(m)
	if err != nil {
		return nil, err
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(*rawMessage)
	if !ok {
		return fmt.Errorf("raw codec: cannot unmarshal into %T", v)
	}
	m.b = data.Materialize()
	return nil
}

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

// getInfoRequest is the (empty) GetInfo request, sent as is on every call.
var getInfoRequest = &regapi.InfoRequest{}
