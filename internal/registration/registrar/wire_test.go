package registrar

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	regapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/wasmhost/wasmhost/internal/registration"
)

func TestDecodeInfoMatchesProtobuf(t *testing.T) {
	msg := &regapi.PluginInfo{Type: "DRAPlugin", Name: "gpu.example.com", Endpoint: "/p/dra.sock",
		SupportedVersions: []string{"v1.DRAPlugin", "v1beta1.DRAPlugin"}}
	b, err := proto.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	b = protowire.AppendTag(b, 99, protowire.VarintType) // an unknown field is skipped
	b = protowire.AppendVarint(b, 7)
	got, err := decodeInfo("/s", b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Type != msg.Type || got.Name != msg.Name || got.Endpoint != msg.Endpoint || !slices.Equal(got.Versions, msg.SupportedVersions) {
		t.Fatalf("decodeInfo = %+v, want %v", got, msg)
	}
}

// FuzzDecodeInfo feeds arbitrary GetInfo answers through what Register does with them: it
// must never panic, refuse only with ErrInvalidInfo, and agree with protobuf on every answer
// both accept.
func FuzzDecodeInfo(f *testing.F) {
	for _, m := range []*regapi.PluginInfo{
		{Type: "CSIPlugin", Name: "csi.example.com", SupportedVersions: []string{"1.0.0"}},
		{Type: "DRAPlugin", Name: "gpu", Endpoint: "/var/lib/kubelet/plugins/gpu/dra.sock", SupportedVersions: []string{"v1.DRAPlugin", "v1beta1.DRAPlugin"}},
	} {
		b, _ := proto.Marshal(m)
		f.Add(b)
	}
	f.Add([]byte{0x0a, 0x02, 0xff, 0xfe, 0x12, 0x01, 'x'})
	f.Add([]byte{0x0a, 0x10, 'a'})
	f.Fuzz(func(t *testing.T, b []byte) {
		raw, err := decodeInfo("/s.sock", b)
		var info registration.PluginInfo
		if err == nil {
			info, err = registration.ValidateInfo("/s.sock", raw)
		}
		if err != nil {
			if !errors.Is(err, registration.ErrInvalidInfo) || !strings.Contains(err.Error(), "/s.sock") {
				t.Fatalf("error %q does not wrap ErrInvalidInfo or name the socket", err)
			}
			return
		}
		var m regapi.PluginInfo
		if perr := proto.Unmarshal(b, &m); perr != nil {
			return // not comparable: protobuf refuses it
		}
		endpoint := m.Endpoint
		if endpoint == "" {
			endpoint = "/s.sock"
		}
		if info.Type != m.Type || info.Name != m.Name || info.Endpoint != endpoint || !slices.Equal(info.Versions, m.SupportedVersions) {
			t.Fatalf("accepted %+v, protobuf decodes %v", info, &m)
		}
	})
}
