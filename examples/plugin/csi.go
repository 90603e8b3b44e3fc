package main

// A CSI driver's node service, reduced to the one call wasmhost's CSI handler makes:
// NodeGetInfo. The handler (handlers-wasm/csi) calls it on the driver's endpoint when it
// registers the driver, as the kubelet does, and publishes what it answers.
//
// A real driver generates its server from the CSI spec (github.com/container-storage-interface/spec)
// and serves it on its own socket. This example answers on its registration socket instead, and
// encodes the answer by hand with protowire, so that the daemon's module needs no CSI
// dependency: the message has three fields, and the encoding below is all there is to it.

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
)

// methodNodeGetInfo is the full gRPC name of CSI's NodeGetInfo. Its request,
// NodeGetInfoRequest, has no fields.
const methodNodeGetInfo = "/csi.v1.Node/NodeGetInfo"

// Field numbers of the CSI spec (csi.proto):
//
//	message NodeGetInfoResponse {
//	  string node_id = 1;
//	  int64 max_volumes_per_node = 2;
//	  Topology accessible_topology = 3;
//	}
//	message Topology { map<string, string> segments = 1; }
//
// A map field is encoded as a repeated message with the key in field 1 and the value in
// field 2.
const (
	fieldNodeID       protowire.Number = 1
	fieldMaxVolumes   protowire.Number = 2
	fieldTopology     protowire.Number = 3
	fieldSegments     protowire.Number = 1 // in Topology
	fieldSegmentKey   protowire.Number = 1 // in a map entry
	fieldSegmentValue protowire.Number = 2 // in a map entry
)

// csiNode is what NodeGetInfo answers.
type csiNode struct {
	nodeID     string            // the node's ID in the storage system; never empty
	maxVolumes int64             // volumes this node can attach; 0 means no limit
	topology   map[string]string // accessible topology segments, e.g. zone=z1; may be empty
}

// nodeGetInfoResponse encodes n as a CSI NodeGetInfoResponse. As proto3 does, fields with
// their zero value are left out; topology segments are written sorted by key, so the bytes
// are the same on every call.
func (n csiNode) nodeGetInfoResponse() []byte {
	var b []byte
	if n.nodeID != "" {
		b = protowire.AppendTag(b, fieldNodeID, protowire.BytesType)
		b = protowire.AppendString(b, n.nodeID)
	}
	if n.maxVolumes != 0 {
		b = protowire.AppendTag(b, fieldMaxVolumes, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(n.maxVolumes))
	}
	if len(n.topology) > 0 {
		var topo []byte
		for _, k := range slices.Sorted(maps.Keys(n.topology)) {
			var entry []byte
			entry = protowire.AppendTag(entry, fieldSegmentKey, protowire.BytesType)
			entry = protowire.AppendString(entry, k)
			entry = protowire.AppendTag(entry, fieldSegmentValue, protowire.BytesType)
			entry = protowire.AppendString(entry, n.topology[k])
			topo = protowire.AppendTag(topo, fieldSegments, protowire.BytesType)
			topo = protowire.AppendBytes(topo, entry)
		}
		b = protowire.AppendTag(b, fieldTopology, protowire.BytesType)
		b = protowire.AppendBytes(b, topo)
	}
	return b
}

// serve answers every call the server has no registered service for (see
// grpc.UnknownServiceHandler): NodeGetInfo with n, anything else with Unimplemented, as a
// server without that method would.
func (n csiNode) serve(_ any, stream grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(stream)
	if method != methodNodeGetInfo {
		return status.Errorf(codes.Unimplemented, "this example plugin serves only %s, not %s", methodNodeGetInfo, method)
	}
	var req rawMessage // NodeGetInfoRequest: empty, nothing to decode
	if err := stream.RecvMsg(&req); err != nil {
		return err
	}
	return stream.SendMsg(&rawMessage{b: n.nodeGetInfoResponse()})
}

// rawMessage is a message already encoded; rawCodec passes it through as it is.
type rawMessage struct{ b []byte }

// rawCodec is the server's codec when it serves CSI: rawMessage as it is (the CSI call),
// everything else (the registration API's generated messages) with grpc's proto codec. It is
// named "proto" because that is the content type clients send, application/grpc+proto.
type rawCodec struct{ proto encoding.CodecV2 }

func newRawCodec() rawCodec { return rawCodec{proto: encoding.GetCodecV2(grpcproto.Name)} }

func (rawCodec) Name() string { return grpcproto.Name }

func (c rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	if m, ok := v.(*rawMessage); ok {
		return mem.BufferSlice{mem.SliceBuffer(m.b)}, nil
	}
	return c.proto.Marshal(v)
}

func (c rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if m, ok := v.(*rawMessage); ok {
		m.b = data.Materialize()
		return nil
	}
	return c.proto.Unmarshal(data, v)
}

// parseTopology parses --csi-topology: key=value pairs separated by commas, such as
// "topology.example.com/zone=z1,topology.example.com/rack=r7". Empty means no topology.
func parseTopology(s string) (map[string]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	topo := make(map[string]string)
	for pair := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("invalid --csi-topology %q: %q is not key=value", s, pair)
		}
		if _, dup := topo[k]; dup {
			return nil, fmt.Errorf("invalid --csi-topology %q: key %q given twice", s, k)
		}
		topo[k] = v
	}
	return topo, nil
}

// formatTopology writes topo as --csi-topology takes it, keys sorted: the way the daemon's CSI
// handler publishes it as "topology".
func formatTopology(topo map[string]string) string {
	var pairs []string
	for _, k := range slices.Sorted(maps.Keys(topo)) {
		pairs = append(pairs, k+"="+topo[k])
	}
	return strings.Join(pairs, ",")
}
