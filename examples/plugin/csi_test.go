package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/wasmhost/wasmhost/internal/registration/registrar"
	"github.com/wasmhost/wasmhost/internal/registration/registrationtest"
	"github.com/wasmhost/wasmhost/internal/state"
)

// decodeNodeGetInfo decodes a NodeGetInfoResponse field by field, independently of the
// encoder in csi.go, and fails on anything it does not expect.
func decodeNodeGetInfo(b []byte) (csiNode, error) {
	var n csiNode
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return n, protowire.ParseError(l)
		}
		b = b[l:]
		switch {
		case num == fieldNodeID && typ == protowire.BytesType:
			n.nodeID, l = protowire.ConsumeString(b)
		case num == fieldMaxVolumes && typ == protowire.VarintType:
			var v uint64
			v, l = protowire.ConsumeVarint(b)
			n.maxVolumes = int64(v)
		case num == fieldTopology && typ == protowire.BytesType:
			var topo []byte
			topo, l = protowire.ConsumeBytes(b)
			if l >= 0 {
				var err error
				if n.topology, err = decodeTopology(topo); err != nil {
					return n, err
				}
			}
		default:
			return n, fmt.Errorf("unexpected field %d of wire type %d", num, typ)
		}
		if l < 0 {
			return n, protowire.ParseError(l)
		}
		b = b[l:]
	}
	return n, nil
}

func decodeTopology(b []byte) (map[string]string, error) {
	topo := make(map[string]string)
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 || num != fieldSegments || typ != protowire.BytesType {
			return nil, fmt.Errorf("topology: unexpected field %d of wire type %d", num, typ)
		}
		b = b[l:]
		entry, l := protowire.ConsumeBytes(b)
		if l < 0 {
			return nil, protowire.ParseError(l)
		}
		b = b[l:]
		var k, v string
		for len(entry) > 0 {
			num, typ, l := protowire.ConsumeTag(entry)
			if l < 0 || typ != protowire.BytesType || (num != fieldSegmentKey && num != fieldSegmentValue) {
				return nil, fmt.Errorf("segment: unexpected field %d of wire type %d", num, typ)
			}
			entry = entry[l:]
			s, l := protowire.ConsumeString(entry)
			if l < 0 {
				return nil, protowire.ParseError(l)
			}
			entry = entry[l:]
			if num == fieldSegmentKey {
				k = s
			} else {
				v = s
			}
		}
		topo[k] = v
	}
	return topo, nil
}

func sameNode(a, b csiNode) bool {
	return a.nodeID == b.nodeID && a.maxVolumes == b.maxVolumes && maps.Equal(a.topology, b.topology)
}

// TestCSINodeGetInfo calls NodeGetInfo on the running plugin the way the daemon does (through
// the registrar's PluginCaller, which the plugin_call host function uses) and decodes the
// answer.
func TestCSINodeGetInfo(t *testing.T) {
	for _, node := range []csiNode{
		{nodeID: "node-1"},
		{nodeID: "node-2", maxVolumes: 16},
		{nodeID: "n3", maxVolumes: 1 << 40, topology: map[string]string{"topology.example.com/zone": "z1", "topology.example.com/rack": "r7", "empty": ""}},
	} {
		t.Run(node.nodeID, func(t *testing.T) {
			dir := registrationtest.SocketDir(t)
			socket, _ := startPlugin(t, config{socketDir: dir, pluginTyp: "CSIPlugin", name: "csi.example.com", versions: []string{"1.5.0"}, csi: &node})
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			resp, err := registrar.PluginCaller{}.Call(ctx, socket, methodNodeGetInfo, nil, 4096)
			if err != nil {
				t.Fatalf("NodeGetInfo: %v", err)
			}
			got, err := decodeNodeGetInfo(resp)
			if err != nil || !sameNode(got, node) {
				t.Fatalf("NodeGetInfo answered %x, decoding to %+v (%v); want %+v", resp, got, err, node)
			}

			// Other CSI calls are not implemented, as on a server without them.
			_, err = registrar.PluginCaller{}.Call(ctx, socket, "/csi.v1.Identity/GetPluginInfo", nil, 4096)
			if status.Code(err) != codes.Unimplemented {
				t.Fatalf("GetPluginInfo: %v, want Unimplemented", err)
			}

			// The registration API is served beside it on the same socket.
			reg, actual := newRegistrar(t, "CSIPlugin", registrationtest.NewRecordingHandler())
			if err := reg.Register(ctx, state.Socket{Path: socket, Seen: time.Now()}); err != nil {
				t.Fatalf("Register: %v", err)
			}
			if p, _ := actual.Get(socket); p.Name != "csi.example.com" || !slices.Equal(p.Versions, []string{"1.5.0"}) {
				t.Fatalf("registered as %+v", p)
			}
		})
	}
}

// TestCSINotServedByDefault: without --csi-node-id the plugin serves only the registration
// API.
func TestCSINotServedByDefault(t *testing.T) {
	socket, _ := startPlugin(t, config{socketDir: registrationtest.SocketDir(t), pluginTyp: "t", name: "p", versions: []string{"v1"}})
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	_, err := registrar.PluginCaller{}.Call(ctx, socket, methodNodeGetInfo, nil, 4096)
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("NodeGetInfo: %v, want Unimplemented", err)
	}
}

func TestParseArgs(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		want    config
		wantErr string
	}{
		{args: nil, want: config{socketDir: "./run/plugins_registry", pluginTyp: "example.wasmhost.dev", name: "demo-1", versions: []string{"v1"}}},
		{
			args: []string{"--socket-dir", "/s", "--type", "CSIPlugin", "--name", "csi.example.com", "--versions", "1.5.0, 1.0.0,",
				"--csi-node-id", "node-1", "--csi-max-volumes", "16", "--csi-topology", "zone=z1, rack=r7"},
			want: config{socketDir: "/s", pluginTyp: "CSIPlugin", name: "csi.example.com", versions: []string{"1.5.0", "1.0.0"},
				csi: &csiNode{nodeID: "node-1", maxVolumes: 16, topology: map[string]string{"zone": "z1", "rack": "r7"}}},
		},
		{args: []string{"--csi-node-id", "n"}, want: config{socketDir: "./run/plugins_registry", pluginTyp: "example.wasmhost.dev", name: "demo-1", versions: []string{"v1"}, csi: &csiNode{nodeID: "n"}}},
		{args: []string{"--csi-max-volumes", "3"}, wantErr: "need --csi-node-id"},
		{args: []string{"--csi-topology", "a=b"}, wantErr: "need --csi-node-id"},
		{args: []string{"--csi-node-id", "n", "--csi-max-volumes", "-1"}, wantErr: "invalid --csi-max-volumes -1"},
		{args: []string{"--csi-node-id", "n", "--csi-topology", "a=b,c"}, wantErr: `"c" is not key=value`},
		{args: []string{"--csi-node-id", "n", "--csi-topology", "=b"}, wantErr: `"=b" is not key=value`},
		{args: []string{"--csi-node-id", "n", "--csi-topology", "a=b,a=c"}, wantErr: `key "a" given twice`},
		{args: []string{"extra"}, wantErr: "unexpected arguments"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			got, err := parseArgs(tc.args)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			csiOK := (got.csi == nil) == (tc.want.csi == nil) && (got.csi == nil || sameNode(*got.csi, *tc.want.csi))
			got.csi, tc.want.csi = nil, nil
			if !csiOK || fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("config %+v, want %+v", got, tc.want)
			}
		})
	}
}
