package registration

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func TestValidateInfo(t *testing.T) {
	const sock = "/run/plugins/a.sock"
	good := PluginInfo{Type: "CSIPlugin", Name: "csi.example.com", Endpoint: "/run/csi.sock", Versions: []string{"1.0.0"}}
	with := func(fn func(*PluginInfo)) PluginInfo {
		p := good
		p.Versions = slices.Clone(good.Versions)
		fn(&p)
		return p
	}
	tests := []struct {
		name  string
		in    PluginInfo
		field string // "" means valid
	}{
		{"good", good, ""},
		{"no versions", with(func(p *PluginInfo) { p.Versions = nil }), ""},
		{"unicode name", with(func(p *PluginInfo) { p.Name = "pilote-é-ü" }), ""},
		{"max sizes", with(func(p *PluginInfo) {
			p.Type = strings.Repeat("t", MaxTypeLen)
			p.Name = strings.Repeat("n", MaxNameLen)
			p.Endpoint = strings.Repeat("e", MaxEndpointLen)
			p.Versions = slices.Repeat([]string{strings.Repeat("v", MaxVersionLen)}, MaxVersions)
		}), ""},
		{"empty type", with(func(p *PluginInfo) { p.Type = "" }), "field type: is empty"},
		{"long type", with(func(p *PluginInfo) { p.Type = strings.Repeat("t", MaxTypeLen+1) }), "field type: 257 bytes"},
		{"control in type", with(func(p *PluginInfo) { p.Type = "CSI\nPlugin" }), "field type: control character U+000A"},
		{"empty name", with(func(p *PluginInfo) { p.Name = "" }), "field name: is empty"},
		{"long name", with(func(p *PluginInfo) { p.Name = strings.Repeat("n", 300) }), "field name: 300 bytes"},
		{"bad utf8 name", with(func(p *PluginInfo) { p.Name = "ab\xffcd" }), "field name: not valid UTF-8 at byte 2"},
		{"escape in name", with(func(p *PluginInfo) { p.Name = "a\x1b[31m" }), "field name: control character U+001B"},
		{"C1 control in name", with(func(p *PluginInfo) { p.Name = "a\u0085" }), "field name: control character U+0085"},
		{"bidi override in name", with(func(p *PluginInfo) { p.Name = "driver\u202egpj.exe" }), "field name: bidirectional control character U+202E at byte 6"},
		{"bidi isolate in version", with(func(p *PluginInfo) { p.Versions = []string{"1.0\u2066"} }), "field supported_versions[0]: bidirectional control character U+2066"},
		{"long endpoint", with(func(p *PluginInfo) { p.Endpoint = strings.Repeat("e", MaxEndpointLen+1) }), "field endpoint: 4097 bytes"},
		{"NUL in endpoint", with(func(p *PluginInfo) { p.Endpoint = "/run/a\x00b" }), "field endpoint: control character U+0000"},
		{"too many versions", with(func(p *PluginInfo) { p.Versions = make([]string, MaxVersions+1) }), "field supported_versions: 65 entries"},
		{"empty version", with(func(p *PluginInfo) { p.Versions = []string{"v1", ""} }), "field supported_versions[1]: is empty"},
		{"long version", with(func(p *PluginInfo) { p.Versions = []string{strings.Repeat("v", 257)} }), "field supported_versions[0]: 257 bytes"},
		{"bad utf8 version", with(func(p *PluginInfo) { p.Versions = []string{"v1", "v\xc3"} }), "field supported_versions[1]: not valid UTF-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := ValidateInfo(sock, tt.in)
			if tt.field == "" {
				if err != nil {
					t.Fatalf("ValidateInfo: %v", err)
				}
				if out.Socket != sock || out.Type != tt.in.Type || out.Name != tt.in.Name || !slices.Equal(out.Versions, tt.in.Versions) {
					t.Fatalf("ValidateInfo = %+v, want the input with socket %s", out, sock)
				}
				return
			}
			if !errors.Is(err, ErrInvalidInfo) {
				t.Fatalf("ValidateInfo error = %v, want ErrInvalidInfo", err)
			}
			if !strings.Contains(err.Error(), tt.field) || !strings.Contains(err.Error(), sock) {
				t.Fatalf("ValidateInfo error = %q, want it to name the socket and %q", err, tt.field)
			}
		})
	}
}

func TestValidateInfoDefaultsEndpoint(t *testing.T) {
	in := PluginInfo{Type: "DRAPlugin", Name: "gpu", Versions: []string{"v1.DRAPlugin"}}
	out, err := ValidateInfo("/p/gpu-reg.sock", in)
	if err != nil {
		t.Fatal(err)
	}
	if out.Endpoint != "/p/gpu-reg.sock" {
		t.Fatalf("Endpoint = %q, want the socket path", out.Endpoint)
	}
	in.Versions[0] = "changed"
	if out.Versions[0] != "v1.DRAPlugin" {
		t.Fatal("ValidateInfo returned Versions sharing the input's backing array")
	}
}

// FuzzValidateInfo feeds arbitrary fields (as a plugin could send them) and checks that an
// accepted answer respects every limit and that a refused one says which field is wrong.
func FuzzValidateInfo(f *testing.F) {
	f.Add("CSIPlugin", "csi.example.com", "", "1.0.0", uint8(1))
	f.Add("DRAPlugin", "gpu.example.com", "/var/lib/kubelet/plugins/gpu/dra.sock", "v1.DRAPlugin", uint8(4))
	f.Add("", "x", "y", "z", uint8(0))
	f.Add("a\xffb", "\x00", "\u0085", "\u2028", uint8(70))
	f.Fuzz(func(t *testing.T, typ, name, endpoint, version string, nVersions uint8) {
		in := PluginInfo{Type: typ, Name: name, Endpoint: endpoint, Versions: slices.Repeat([]string{version}, int(nVersions))}
		out, err := ValidateInfo("/s.sock", in)
		if err != nil {
			if !errors.Is(err, ErrInvalidInfo) || !strings.Contains(err.Error(), "field ") {
				t.Fatalf("error %q does not wrap ErrInvalidInfo or name a field", err)
			}
			return
		}
		fields := append([]string{out.Type, out.Name, out.Endpoint}, out.Versions...)
		for _, s := range fields {
			if !utf8.ValidString(s) || strings.ContainsFunc(s, unicode.IsControl) {
				t.Fatalf("accepted field %q", s)
			}
		}
		if out.Type == "" || out.Name == "" || out.Endpoint == "" ||
			len(out.Type) > MaxTypeLen || len(out.Name) > MaxNameLen || len(out.Endpoint) > MaxEndpointLen ||
			len(out.Versions) > MaxVersions {
			t.Fatalf("accepted %+v", out)
		}
		for _, v := range out.Versions {
			if v == "" || len(v) > MaxVersionLen {
				t.Fatalf("accepted version %q", v)
			}
		}
	})
}
