package main

import (
	"slices"
	"strings"

	"github.com/wasmhost/wasmhost/abi/wire"
)

// This file reads and writes the few protocol buffers messages the handler needs with package
// abi/wire: a protobuf library (or encoding/json) would add far more to the module than the
// handler itself.

// errMalformed is matched by every decoding error (wire.ErrMalformed).
var errMalformed = wire.ErrMalformed

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
	b := wire.AppendNonEmpty(nil, 1, r.endpoint)
	b = wire.AppendNonEmpty(b, 2, r.version)
	return wire.AppendNonEmpty(b, 3, r.socket)
}

func decodeRecord(b []byte) (record, error) {
	var r record
	err := wire.Walk(b, func(f wire.Field) error {
		if f.Num > 3 {
			return nil
		}
		s, err := f.Text()
		switch f.Num {
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
	err := wire.Walk(b, func(f wire.Field) error {
		var err error
		switch {
		case f.Num == 1:
			ni.nodeID, err = f.Text()
		case f.Num == 2 && f.Type == wire.VarintType:
			ni.maxVolumes = int64(f.Varint)
		case f.Num == 2:
			err = f.WrongType()
		case f.Num == 3:
			if f.Type != wire.BytesType {
				return f.WrongType()
			}
			// A message field that occurs twice is merged: the segments add up.
			err = wire.Walk(f.Data, func(f wire.Field) error {
				if f.Num != 1 {
					return nil
				}
				if f.Type != wire.BytesType {
					return f.WrongType()
				}
				return decodeSegment(f.Data, &ni.segments)
			})
		}
		return err
	})
	return ni, err
}

// decodeSegment decodes one map entry of Topology.segments into *m.
func decodeSegment(b []byte, m *map[string]string) error {
	var key, value string
	err := wire.Walk(b, func(f wire.Field) error {
		var err error
		switch f.Num {
		case 1:
			key, err = f.Text()
		case 2:
			value, err = f.Text()
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
