//go:build !wasip1

package main

import (
	"errors"
	"maps"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/wasmhost/wasmhost/abi/guest"
	"github.com/wasmhost/wasmhost/abi/guest/guesttest"
)

func plugin(name, socket, endpoint string, versions ...string) guest.Plugin {
	return guest.Plugin{Socket: socket, Type: PluginType, Name: name, Endpoint: endpoint, Versions: versions}
}

// rejection returns the reason of a rejection, and fails the test for any other outcome.
func rejection(t *testing.T, err error) string {
	t.Helper()
	var rej *guest.RejectError
	if !errors.As(err, &rej) {
		t.Fatalf("got %v, want a rejection", err)
	}
	return rej.Reason
}

// nodeInfoBytes is a NodeGetInfoResponse{node_id: "node-1", max_volumes_per_node: 16,
// accessible_topology: {segments: {zone: z1, region: r1}}}, encoded by hand.
var nodeInfoBytes = []byte{
	0x0a, 0x06, 'n', 'o', 'd', 'e', '-', '1', // 1: node_id
	0x10, 0x10, // 2: max_volumes_per_node = 16
	0x1a, 0x1a, // 3: accessible_topology, 26 bytes
	0x0a, 0x0a, // segments entry, 10 bytes
	0x0a, 0x04, 'z', 'o', 'n', 'e', 0x12, 0x02, 'z', '1',
	0x0a, 0x0c, // segments entry, 12 bytes
	0x0a, 0x06, 'r', 'e', 'g', 'i', 'o', 'n', 0x12, 0x02, 'r', '1',
}

// answer makes the fake's plugin_call answer NodeGetInfo with resp, and counts the calls.
func answer(t *testing.T, f *guest.FakeHost, resp []byte, err error) *int {
	t.Helper()
	calls := new(int)
	f.SetPluginCall(func(method string, req []byte) ([]byte, error) {
		*calls++
		if method != methodNodeGetInfo || len(req) != 0 {
			t.Errorf("plugin call %s with %d bytes, want %s with an empty request", method, len(req), methodNodeGetInfo)
		}
		return resp, err
	})
	return calls
}

func TestParseVersion(t *testing.T) {
	for _, tc := range []struct {
		in                  string
		ok                  bool
		major, minor, patch uint64
	}{
		{"1.0.0", true, 1, 0, 0},
		{"1.2", true, 1, 2, 0},
		{"v1.5.0", true, 1, 5, 0},
		{"V1.5.1", true, 1, 5, 1},
		{"0.3.0", true, 0, 3, 0},
		{"2.0.0", true, 2, 0, 0},
		{"1.10.20", true, 1, 10, 20},
		{"1.0.0-rc.1", true, 1, 0, 0},
		{"1.0.0+build.5", true, 1, 0, 0},
		{"1.0.0-alpha-1+001", true, 1, 0, 0},
		{"18446744073709551615.0", true, 1<<64 - 1, 0, 0},

		{"", false, 0, 0, 0},
		{"1", false, 0, 0, 0},
		{"v1", false, 0, 0, 0},
		{"vv1.0.0", false, 0, 0, 0},
		{"1.0.0.0", false, 0, 0, 0},
		{"01.0.0", false, 0, 0, 0},
		{"1.00.0", false, 0, 0, 0},
		{" 1.0.0", false, 0, 0, 0},
		{"1.0.0 ", false, 0, 0, 0},
		{"1.0.", false, 0, 0, 0},
		{"1..0", false, 0, 0, 0},
		{"+1.0.0", false, 0, 0, 0},
		{"1.-1.0", false, 0, 0, 0},
		{"1.0.0-", false, 0, 0, 0},
		{"1.0.0-rc..1", false, 0, 0, 0},
		{"1.0.0-01", false, 0, 0, 0},
		{"1.0.0+", false, 0, 0, 0},
		{"1.0.0-rc_1", false, 0, 0, 0},
		{"1.x", false, 0, 0, 0},
		{"v1beta1", false, 0, 0, 0},
		{"18446744073709551616.0", false, 0, 0, 0},
	} {
		v, ok := parseVersion(tc.in)
		if ok != tc.ok || ok && (v.major != tc.major || v.minor != tc.minor || v.patch != tc.patch || v.raw != tc.in) {
			t.Errorf("parseVersion(%q) = %+v, %v; want %d.%d.%d, %v", tc.in, v, ok, tc.major, tc.minor, tc.patch, tc.ok)
		}
	}
}

func TestCompare(t *testing.T) {
	// In increasing precedence; equal neighbours are listed in the same string, separated by spaces.
	order := []string{
		"1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta", "1.0.0-beta.2", "1.0.0-beta.11",
		"1.0.0-rc.1", "1.0.0 1.0 v1.0.0 1.0.0+build", "1.0.1", "1.2 1.2.0", "1.10.0", "2.0.0",
	}
	var groups [][]version
	for _, g := range order {
		var vs []version
		for _, s := range strings.Fields(g) {
			v, ok := parseVersion(s)
			if !ok {
				t.Fatalf("parseVersion(%q) failed", s)
			}
			vs = append(vs, v)
		}
		groups = append(groups, vs)
	}
	for i, gi := range groups {
		for j, gj := range groups {
			want := cmpUint(uint64(i), uint64(j))
			for _, a := range gi {
				for _, b := range gj {
					if got := compare(a, b); got != want {
						t.Errorf("compare(%s, %s) = %d, want %d", a.raw, b.raw, got, want)
					}
				}
			}
		}
	}
}

func TestValidateVersions(t *testing.T) {
	guesttest.Fake(t)
	for _, tc := range []struct {
		versions []string
		reason   string // "" to accept
	}{
		{[]string{"1.0.0"}, ""},
		{[]string{"1.2"}, ""},
		{[]string{"v1.5.0"}, ""},
		{[]string{"0.3.0", "1.0.0"}, ""},
		{[]string{"1.0.0", "2.0.0"}, ""},
		{[]string{"garbage", "v1.0.0"}, ""},
		{nil, `CSI driver d at endpoint /e sent no versions; supported: ` + supportedText},
		{[]string{"0.3.0", "2.0.0"}, `CSI driver d at endpoint /e sent versions ["0.3.0", "2.0.0"], none of them supported; supported: ` + supportedText},
		{[]string{"v1beta1", "v1beta2"}, `CSI driver d at endpoint /e sent versions ["v1beta1", "v1beta2"], none of them supported; supported: ` + supportedText},
		{[]string{"1", " 1.0.0", "1.0.0.0"}, `CSI driver d at endpoint /e sent versions ["1", " 1.0.0", "1.0.0.0"], none of them supported; supported: ` + supportedText},
	} {
		err := handler{}.Validate(plugin("d", "/r/d-reg.sock", "/e", tc.versions...))
		if tc.reason == "" {
			if err != nil {
				t.Errorf("Validate(%q): %v, want accepted", tc.versions, err)
			}
			continue
		}
		var rej *guest.RejectError
		if !errors.As(err, &rej) || rej.Reason != tc.reason {
			t.Errorf("Validate(%q):\n got %v\nwant rejection %q", tc.versions, err, tc.reason)
		}
	}
}

func TestValidateName(t *testing.T) {
	guesttest.Fake(t)
	if r := rejection(t, handler{}.Validate(plugin("", "/r/x-reg.sock", "/e", "1.0.0"))); !strings.Contains(r, "/r/x-reg.sock has no name") {
		t.Errorf("empty name: %q", r)
	}
	long := strings.Repeat("n", maxNameBytes+1)
	if r := rejection(t, handler{}.Validate(plugin(long, "/r/x-reg.sock", "/e", "1.0.0"))); !strings.Contains(r, strconv.Itoa(len(long))+" bytes long") {
		t.Errorf("long name: %q", r)
	}
	if err := (handler{}).Validate(plugin(long[1:], "/r/x-reg.sock", "/e", "1.0.0")); err != nil {
		t.Errorf("name of %d bytes: %v", maxNameBytes, err)
	}
	// Every name the daemon lets through (up to 256 bytes) registers: its key fits.
	answer(t, guesttest.Fake(t), nodeInfoBytes, nil)
	if err := (handler{}).Register(plugin(long[:256], "/r/x-reg.sock", "/e", "1.0.0")); err != nil {
		t.Errorf("Register of a 256-byte name: %v", err)
	}
}

// register registers p with the fake answering NodeGetInfo, and fails the test if it fails.
func register(t *testing.T, f *guest.FakeHost, p guest.Plugin) {
	t.Helper()
	answer(t, f, nodeInfoBytes, nil)
	if err := (handler{}).Validate(p); err != nil {
		t.Fatalf("Validate(%s at %s): %v", p.Name, p.Socket, err)
	}
	if err := (handler{}).Register(p); err != nil {
		t.Fatalf("Register(%s at %s): %v", p.Name, p.Socket, err)
	}
}

func storedRecord(t *testing.T, f *guest.FakeHost, name string) (record, bool) {
	t.Helper()
	b, ok := f.KV()[driverKey(name)]
	if !ok {
		return record{}, false
	}
	r, err := decodeRecord([]byte(b))
	if err != nil {
		t.Fatalf("stored record of %s: %v", name, err)
	}
	return r, true
}

func TestRegisterPublishesNodeInfo(t *testing.T) {
	f := guesttest.Fake(t)
	p := plugin("csi.example.com", "/r/csi.example.com-reg.sock", "/var/lib/kubelet/plugins/csi.example.com/csi.sock",
		"0.3.0", "v1.5.0", "1.2")
	calls := answer(t, f, nodeInfoBytes, nil)
	if err := (handler{}).Register(p); err != nil {
		t.Fatal(err)
	}
	if *calls != 1 {
		t.Errorf("%d NodeGetInfo calls, want 1", *calls)
	}
	want := map[string]string{
		"version":              "v1.5.0",
		"endpoint":             p.Endpoint,
		"node_id":              "node-1",
		"max_volumes_per_node": "16",
		"topology":             "region=r1,zone=z1",
	}
	if got := f.Published(); !maps.Equal(got, want) {
		t.Errorf("published %v, want %v", got, want)
	}
	if r, ok := storedRecord(t, f, p.Name); !ok || r != (record{endpoint: p.Endpoint, version: "v1.5.0", socket: p.Socket}) {
		t.Errorf("record %+v, %v", r, ok)
	}
}

// TestNodeInfoBytes checks the hand-encoded response against protowire, and the decoder against
// the shapes protowire writes that the hand encoding does not use.
func TestNodeInfoBytes(t *testing.T) {
	entry := func(k, v string) []byte {
		b := protowire.AppendTag(nil, 1, protowire.BytesType)
		b = protowire.AppendString(b, k)
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		return protowire.AppendString(b, v)
	}
	var topo []byte
	for _, kv := range [][2]string{{"zone", "z1"}, {"region", "r1"}} {
		topo = protowire.AppendTag(topo, 1, protowire.BytesType)
		topo = protowire.AppendBytes(topo, entry(kv[0], kv[1]))
	}
	b := protowire.AppendTag(nil, 1, protowire.BytesType)
	b = protowire.AppendString(b, "node-1")
	b = protowire.AppendTag(b, 2, protowire.VarintType)
	b = protowire.AppendVarint(b, 16)
	b = protowire.AppendTag(b, 3, protowire.BytesType)
	b = protowire.AppendBytes(b, topo)
	if string(b) != string(nodeInfoBytes) {
		t.Fatalf("hand encoding differs from protowire's:\n%x\n%x", nodeInfoBytes, b)
	}

	// Unknown fields of every wire type, a negative int64, a second topology (merged), a repeated
	// key (the last wins) and an entry without a value.
	b = protowire.AppendTag(b, 9, protowire.Fixed32Type)
	b = protowire.AppendFixed32(b, 7)
	b = protowire.AppendTag(b, 10, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, 7)
	b = protowire.AppendTag(b, 11, protowire.VarintType)
	b = protowire.AppendVarint(b, 7)
	b = protowire.AppendTag(b, 3, protowire.BytesType)
	more := protowire.AppendTag(nil, 1, protowire.BytesType)
	more = protowire.AppendBytes(more, entry("zone", "z2"))
	more = protowire.AppendTag(more, 1, protowire.BytesType)
	more = protowire.AppendBytes(more, protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "rack"))
	b = protowire.AppendBytes(b, more)
	ni, err := decodeNodeInfo(b)
	if err != nil {
		t.Fatal(err)
	}
	if ni.nodeID != "node-1" || ni.maxVolumes != 16 || topology(ni.segments) != "rack=,region=r1,zone=z2" {
		t.Errorf("decoded %+v (topology %q)", ni, topology(ni.segments))
	}
	neg := protowire.AppendVarint(protowire.AppendTag(nil, 2, protowire.VarintType), ^uint64(0)) // -1 as int64
	if ni, err := decodeNodeInfo(neg); err != nil || ni.maxVolumes != -1 {
		t.Errorf("max_volumes_per_node -1: %+v, %v", ni, err)
	}

	for name, bad := range map[string][]byte{
		"truncated":        nodeInfoBytes[:len(nodeInfoBytes)-1],
		"field 0":          {0x02, 0x00},
		"group":            {0x0b},
		"node_id varint":   {0x08, 0x01},
		"max volumes text": {0x12, 0x01, 'x'},
		"bad UTF-8":        {0x0a, 0x01, 0xff},
		"topology varint":  {0x18, 0x01},
		"bad varint":       {0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f},
	} {
		if _, err := decodeNodeInfo(bad); !errors.Is(err, errMalformed) {
			t.Errorf("%s: %v, want errMalformed", name, err)
		}
	}
}

func TestRegisterNodeInfoFailure(t *testing.T) {
	old := plugin("csi.example.com", "/r/old-reg.sock", "/old.sock", "1.0.0")
	p := plugin("csi.example.com", "/r/csi.example.com-reg.sock", "/var/lib/kubelet/plugins/x/csi.sock", "1.0.0")
	for _, tc := range []struct {
		name string
		resp []byte
		err  error
		want string
	}{
		{"call fails", nil, errors.New("connection refused"), "NodeGetInfo of CSI driver csi.example.com at endpoint /var/lib/kubelet/plugins/x/csi.sock failed: plugincall: /csi.v1.Node/NodeGetInfo: guest: failed: connection refused"},
		{"malformed", []byte{0x0a, 0x09}, nil, "at endpoint /var/lib/kubelet/plugins/x/csi.sock answered a malformed response"},
		{"no node id", []byte{0x10, 0x01}, nil, "at endpoint /var/lib/kubelet/plugins/x/csi.sock answered an empty node_id"},
		{"negative limit", []byte{0x0a, 0x01, 'n', 0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, nil, "answered a negative max_volumes_per_node -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := guesttest.Fake(t)
			register(t, f, old)
			answer(t, f, tc.resp, tc.err)
			err := handler{}.Register(p)
			var rej *guest.RejectError
			if err == nil || errors.As(err, &rej) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Register: %v, want a failure (not a rejection) containing %q", err, tc.want)
			}
			// The earlier registration is untouched.
			if r, _ := storedRecord(t, f, p.Name); r.socket != old.Socket {
				t.Errorf("record after a failed Register: %+v, want the old one", r)
			}
		})
	}
	t.Run("no grant", func(t *testing.T) {
		guesttest.Fake(t) // no plugin call function: plugin_call answers denied
		err := handler{}.Register(p)
		if !errors.Is(err, guest.ErrDenied) || !strings.Contains(err.Error(), "at endpoint "+p.Endpoint+" failed") {
			t.Errorf("Register without plugin_call: %v", err)
		}
	})
}

func TestDuplicates(t *testing.T) {
	const name = "csi.example.com"
	first := plugin(name, "/r/a-reg.sock", "/a.sock", "1.0.0", "v1.5.0")
	for _, tc := range []struct {
		versions []string
		reason   string // "" to accept
	}{
		{[]string{"1.0.0"}, "driver csi.example.com already registered at version v1.5.0 (endpoint /a.sock); refusing 1.0.0"},
		{[]string{"1.5.0-rc.1"}, "driver csi.example.com already registered at version v1.5.0 (endpoint /a.sock); refusing 1.5.0-rc.1"},
		{[]string{"1.5"}, ""},
		{[]string{"1.5.0"}, ""},
		{[]string{"1.0.0", "1.6.0"}, ""},
	} {
		f := guesttest.Fake(t)
		register(t, f, first)
		second := plugin(name, "/r/b-reg.sock", "/b.sock", tc.versions...)
		if tc.reason != "" {
			if r := rejection(t, handler{}.Validate(second)); r != tc.reason {
				t.Errorf("Validate(%q): %q, want %q", tc.versions, r, tc.reason)
			}
			continue
		}
		register(t, f, second)
		if r, _ := storedRecord(t, f, name); r.socket != second.Socket || r.endpoint != "/b.sock" {
			t.Errorf("after %q replaced the driver: record %+v", tc.versions, r)
		}
	}
}

// TestRegisterRechecks: a driver that registers with a higher version between another's Validate
// and Register wins, as in the kubelet, which checks the versions again in Register.
func TestRegisterRechecks(t *testing.T) {
	f := guesttest.Fake(t)
	low := plugin("d", "/r/low-reg.sock", "/low.sock", "1.0.0")
	if err := (handler{}).Validate(low); err != nil {
		t.Fatal(err)
	}
	register(t, f, plugin("d", "/r/high-reg.sock", "/high.sock", "1.3.0"))
	if r := rejection(t, handler{}.Register(low)); r != "driver d already registered at version 1.3.0 (endpoint /high.sock); refusing 1.0.0" {
		t.Errorf("reason %q", r)
	}
	if r, _ := storedRecord(t, f, "d"); r.socket != "/r/high-reg.sock" {
		t.Errorf("record %+v", r)
	}
}

// TestRegisterSameInstant: two drivers of one name register at once (two instances): the
// newer one writes its record while the older one waits for its NodeGetInfo, after the older
// one's check passed. The older one's write finds the record changed, checks again and is
// refused; the newer record stays. With a plain get and set, both were registered and the
// older one's record won.
func TestRegisterSameInstant(t *testing.T) {
	f := guesttest.Fake(t)
	high := record{endpoint: "/high.sock", version: "1.3.0", socket: "/r/high-reg.sock"}
	f.SetPluginCall(func(string, []byte) ([]byte, error) {
		if _, ok, _ := guest.KV.Get(driverKey("d")); !ok {
			if err := guest.KV.Set(driverKey("d"), high.encode()); err != nil { // the other instance's Register
				t.Error(err)
			}
		}
		return nodeInfoBytes, nil
	})
	low := plugin("d", "/r/low-reg.sock", "/low.sock", "1.0.0")
	if r := rejection(t, handler{}.Register(low)); r != "driver d already registered at version 1.3.0 (endpoint /high.sock); refusing 1.0.0" {
		t.Errorf("reason %q", r)
	}
	if r, _ := storedRecord(t, f, "d"); r != high {
		t.Errorf("record %+v, want the newer driver's %+v", r, high)
	}

	// The other way round: an older record written meanwhile is replaced by the newer driver.
	f = guesttest.Fake(t)
	older := record{endpoint: "/low.sock", version: "1.0.0", socket: "/r/low-reg.sock"}
	f.SetPluginCall(func(string, []byte) ([]byte, error) {
		if _, ok, _ := guest.KV.Get(driverKey("d")); !ok {
			guest.KV.Set(driverKey("d"), older.encode())
		}
		return nodeInfoBytes, nil
	})
	if err := (handler{}).Register(plugin("d", "/r/high-reg.sock", "/high.sock", "1.3.0")); err != nil {
		t.Fatal(err)
	}
	if r, _ := storedRecord(t, f, "d"); r.socket != "/r/high-reg.sock" {
		t.Errorf("record %+v, want the newer driver's", r)
	}
}

// TestStaleRecordSameSocket: a record left by the same socket (the host deregisters a plugin
// before registering another at the same path, so it is stale) does not block the newcomer.
func TestStaleRecordSameSocket(t *testing.T) {
	f := guesttest.Fake(t)
	register(t, f, plugin("d", "/r/d-reg.sock", "/d.sock", "1.9.0"))
	register(t, f, plugin("d", "/r/d-reg.sock", "/d2.sock", "1.0.0"))
	if r, _ := storedRecord(t, f, "d"); r.version != "1.0.0" || r.endpoint != "/d2.sock" {
		t.Errorf("record %+v", r)
	}
}

func TestCorruptRecord(t *testing.T) {
	f := guesttest.Fake(t)
	if err := guest.KV.Set(driverKey("d"), []byte{0x0b}); err != nil {
		t.Fatal(err)
	}
	register(t, f, plugin("d", "/r/d-reg.sock", "/d.sock", "1.0.0"))
	if r, ok := storedRecord(t, f, "d"); !ok || r.socket != "/r/d-reg.sock" {
		t.Errorf("record %+v", r)
	}
	if logs := f.Logs(); len(logs) == 0 || !strings.HasPrefix(logs[0], "WARN ignoring the stored record of CSI driver d") {
		t.Errorf("logs %q", logs)
	}
}

func TestDeregister(t *testing.T) {
	f := guesttest.Fake(t)
	old := plugin("d", "/r/old-reg.sock", "/d.sock", "1.0.0")
	newer := plugin("d", "/r/new-reg.sock", "/d.sock", "1.0.0")
	register(t, f, old)
	register(t, f, newer)

	// The old socket goes away after the newer registration replaced its record: the record stays.
	if err := (handler{}).Deregister(old); err != nil {
		t.Fatal(err)
	}
	if r, ok := storedRecord(t, f, "d"); !ok || r.socket != newer.Socket {
		t.Fatalf("after the old socket's deregistration: record %+v, %v; want the newer one", r, ok)
	}
	// The same socket with another endpoint is not this record either.
	if err := (handler{}).Deregister(plugin("d", newer.Socket, "/other.sock", "1.0.0")); err != nil {
		t.Fatal(err)
	}
	if _, ok := storedRecord(t, f, "d"); !ok {
		t.Fatal("a deregistration with another endpoint erased the record")
	}
	if err := (handler{}).Deregister(newer); err != nil {
		t.Fatal(err)
	}
	if _, ok := storedRecord(t, f, "d"); ok {
		t.Error("the record survived its own deregistration")
	}
	// Nothing left: a deregistration is not an error.
	if err := (handler{}).Deregister(newer); err != nil {
		t.Error(err)
	}
	if got := len(f.KV()); got != 0 {
		t.Errorf("%d keys left in the store", got)
	}
}

func TestQuote(t *testing.T) {
	if got, want := guest.QuoteList([]string{"1.0", "a\"b\\c\n\x7fé"}), `["1.0", "a\"b\\c\x0a\x7fé"]`; got != want {
		t.Errorf("quoteList = %s, want %s", got, want)
	}
	if got := guest.QuoteList(nil); got != "[]" {
		t.Errorf("guest.QuoteList(nil) = %s", got)
	}
}
