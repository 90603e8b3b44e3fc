//go:build !wasip1

package handlers

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/conformance"
	"github.com/wasmhost/wasmhost/internal/guestbuild"
	"github.com/wasmhost/wasmhost/internal/harness"
	"github.com/wasmhost/wasmhost/internal/host"
	"github.com/wasmhost/wasmhost/internal/host/sandbox"
)

// The csi handler (handlers-wasm/csi/csi.c), built and run in the daemon's host: what it
// accepts and refuses, with which reasons, what it publishes and keeps in its store.

const (
	csiType          = "CSIPlugin"
	nodeGetInfo      = "/csi.v1.Node/NodeGetInfo"
	csiSupportedText = "a semantic version with major 1, such as 1.0.0, 1.2 or v1.5.0"
	maxCSIName       = abi.MaxKeyBytes - len("driver/")
)

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

// csiCaller answers NodeGetInfo with its answer function's result, and counts the calls.
type csiCaller struct {
	t      testing.TB
	answer func() ([]byte, error)
	calls  int
}

func (c *csiCaller) Call(_ context.Context, _, method string, req []byte, _ int) ([]byte, error) {
	c.calls++
	if method != nodeGetInfo || len(req) != 0 {
		c.t.Errorf("plugin call %s with %d bytes, want %s with an empty request", method, len(req), nodeGetInfo)
	}
	return c.answer()
}

// csiRig loads the csi handler with NodeGetInfo answered by nodeInfoBytes (change c.answer).
func csiRig(t testing.TB) (*rig, *csiCaller) {
	c := &csiCaller{t: t, answer: func() ([]byte, error) { return nodeInfoBytes, nil }}
	return newRig(t, "csi", csiType, c), c
}

// driver is a driver's record in the store: endpoint, version, socket.
func (r *rig) driver(name string) ([]string, bool) { return r.record("driver/"+name, 3) }

func TestCSIVersions(t *testing.T) {
	r, _ := csiRig(t)
	for i, tc := range []struct {
		versions []string
		reason   string // "" to accept
	}{
		{[]string{"1.0.0"}, ""},
		{[]string{"1.2"}, ""},
		{[]string{"v1.5.0"}, ""},
		{[]string{"V1.5.1"}, ""},
		{[]string{"1.10.20"}, ""},
		{[]string{"1.0.0-rc.1"}, ""},
		{[]string{"1.0.0+build.5"}, ""},
		{[]string{"1.0.0-alpha-1+001"}, ""},
		{[]string{"0.3.0", "1.0.0"}, ""},
		{[]string{"1.0.0", "2.0.0"}, ""},
		{[]string{"garbage", "v1.0.0"}, ""},
		{nil, "sent no versions"},
		{[]string{"0.3.0", "2.0.0"}, `sent versions ["0.3.0", "2.0.0"], none of them supported`},
		{[]string{"v1beta1", "v1beta2"}, `sent versions ["v1beta1", "v1beta2"], none of them supported`},
		{[]string{"1", " 1.0.0", "1.0.0.0"}, `sent versions ["1", " 1.0.0", "1.0.0.0"], none of them supported`},
		{[]string{"18446744073709551615.0", "18446744073709551616.0"}, `sent versions ["18446744073709551615.0", "18446744073709551616.0"], none of them supported`},
		{[]string{"1.0", "a\"b\\c\n\x7fé"}, ""},
		{[]string{"0.1", "a\"b\\c\n\x7fé"}, `sent versions ["0.1", "a\"b\\c\x0a\x7fé"], none of them supported`},
	} {
		p := r.plugin(fmt.Sprintf("d%d", i), "/r/d-reg.sock", "/e", tc.versions...)
		if tc.reason == "" {
			r.ok(harness.Validate, p)
			continue
		}
		want := "CSI driver " + p.Name + " at endpoint /e " + tc.reason + "; supported: " + csiSupportedText
		if got := r.rejected(harness.Validate, p); got != want {
			t.Errorf("Validate(%q):\n got %q\nwant %q", tc.versions, got, want)
		}
	}
	// Versions that do not parse, each alone: a driver with major 1 is refused for them.
	for _, v := range []string{"", "1", "v1", "vv1.0.0", "1.0.0.0", "01.0.0", "1.00.0", " 1.0.0", "1.0.0 ", "1.0.", "1..0",
		"+1.0.0", "1.-1.0", "1.0.0-", "1.0.0-rc..1", "1.0.0-01", "1.0.0+", "1.0.0-rc_1", "1.x", "v1beta1"} {
		r.rejected(harness.Validate, r.plugin("bad", "/r/bad-reg.sock", "/e", v))
	}
}

// TestCSIVersionOrder: a driver registered at one version refuses another of the same name at a
// lower one, and gives way to one at the same or a higher one, in semantic version order.
func TestCSIVersionOrder(t *testing.T) {
	r, _ := csiRig(t)
	// In increasing precedence; equal neighbours are in the same string, separated by spaces.
	order := []string{
		"1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta", "1.0.0-beta.2", "1.0.0-beta.11",
		"1.0.0-rc.1", "1.0.0 1.0 v1.0.0 1.0.0+build", "1.0.1", "1.2 1.2.0", "1.10.0",
	}
	var groups [][]string
	for _, g := range order {
		groups = append(groups, strings.Fields(g))
	}
	n := 0
	for i, gi := range groups {
		for j, gj := range groups {
			for _, a := range gi {
				for _, b := range gj {
					n++
					name := "d" + strconv.Itoa(n)
					r.register(r.plugin(name, "/r/a-reg.sock", "/a.sock", a))
					second := r.plugin(name, "/r/b-reg.sock", "/b.sock", b)
					st := r.do(harness.Validate, second)
					if refuse := i > j; refuse != (st.Outcome == harness.Rejected) {
						t.Errorf("%s registered, then %s: %s %s", a, b, st.Outcome, st.Reason)
					}
				}
			}
		}
	}
}

func TestCSIName(t *testing.T) {
	r, _ := csiRig(t)
	if got := r.rejected(harness.Validate, r.plugin("", "/r/x-reg.sock", "/e", "1.0.0")); got != "CSI driver at socket /r/x-reg.sock has no name" {
		t.Errorf("empty name: %q", got)
	}
	long := strings.Repeat("n", maxCSIName+1)
	want := `CSI driver name "` + long[:32] + `..." is ` + strconv.Itoa(len(long)) + " bytes long; this handler takes names of up to " + strconv.Itoa(maxCSIName)
	if got := r.rejected(harness.Validate, r.plugin(long, "/r/x-reg.sock", "/e", "1.0.0")); got != want {
		t.Errorf("long name:\n got %q\nwant %q", got, want)
	}
	r.ok(harness.Validate, r.plugin(long[1:], "/r/x-reg.sock", "/e", "1.0.0"))
	// Every name the daemon lets through (up to 256 bytes) registers: its key fits.
	r.register(r.plugin(long[:256], "/r/x-reg.sock", "/e", "1.0.0"))
}

func TestCSIRegisterPublishesNodeInfo(t *testing.T) {
	r, c := csiRig(t)
	p := r.plugin("csi.example.com", "/r/csi.example.com-reg.sock", "/var/lib/kubelet/plugins/csi.example.com/csi.sock",
		"0.3.0", "v1.5.0", "1.2")
	st := r.register(p)
	if c.calls != 1 {
		t.Errorf("%d NodeGetInfo calls, want 1", c.calls)
	}
	want := map[string]string{
		"version":              "v1.5.0",
		"endpoint":             p.Endpoint,
		"node_id":              "node-1",
		"max_volumes_per_node": "16",
		"topology":             "region=r1,zone=z1",
	}
	if !maps.Equal(st.Published, want) {
		t.Errorf("published %v, want %v", st.Published, want)
	}
	if rec, ok := r.driver(p.Name); !ok || !slices.Equal(rec, []string{p.Endpoint, "v1.5.0", p.Socket}) {
		t.Errorf("record %q, %v", rec, ok)
	}
	if !hasLog(st, "INFO registered CSI driver csi.example.com version v1.5.0 at endpoint "+p.Endpoint+", node ID node-1") {
		t.Errorf("logs %v", st.Logs)
	}
	// The record is what the Go handler wrote: a daemon that kept its store across the change
	// of language reads it.
	if got := r.store()["driver/"+p.Name]; string(got) != string(encodeRecord(p.Endpoint, "v1.5.0", p.Socket)) {
		t.Errorf("record bytes %x", got)
	}
}

// TestCSINodeInfo: what the handler makes of NodeGetInfo answers of every shape.
func TestCSINodeInfo(t *testing.T) {
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
	// Unknown fields of every wire type, a second topology (merged), a repeated key (the last
	// wins) and an entry without a value.
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

	r, c := csiRig(t)
	c.answer = func() ([]byte, error) { return b, nil }
	st := r.register(r.plugin("d", "/r/d-reg.sock", "/d.sock", "1.0.0"))
	if st.Published["topology"] != "rack=,region=r1,zone=z2" || st.Published["max_volumes_per_node"] != "16" || st.Published["node_id"] != "node-1" {
		t.Errorf("published %v", st.Published)
	}
	// No limit given: 0.
	c.answer = func() ([]byte, error) { return []byte{0x0a, 0x01, 'n'}, nil }
	if st := r.register(r.plugin("d2", "/r/d2-reg.sock", "/d2.sock", "1.0.0")); st.Published["max_volumes_per_node"] != "0" || st.Published["topology"] != "" {
		t.Errorf("published %v", st.Published)
	}

	const prefix = "NodeGetInfo of CSI driver x at endpoint /x.sock "
	for name, tc := range map[string]struct {
		resp []byte
		want string
	}{
		"truncated":        {nodeInfoBytes[:len(nodeInfoBytes)-1], "answered a malformed response: malformed protobuf message: field 3: truncated"},
		"field 0":          {[]byte{0x02, 0x00}, "answered a malformed response: malformed protobuf message: bad field tag"},
		"group":            {[]byte{0x0b}, "answered a malformed response: malformed protobuf message: field 1: unsupported wire type 3"},
		"node_id varint":   {[]byte{0x08, 0x01}, "answered a malformed response: malformed protobuf message: field 1: unexpected wire type 0"},
		"max volumes text": {[]byte{0x12, 0x01, 'x'}, "answered a malformed response: malformed protobuf message: field 2: unexpected wire type 2"},
		"bad UTF-8":        {[]byte{0x0a, 0x01, 0xff}, "answered a malformed response: malformed protobuf message: field 1: not valid UTF-8"},
		"topology varint":  {[]byte{0x18, 0x01}, "answered a malformed response: malformed protobuf message: field 3: unexpected wire type 0"},
		"segment key int":  {[]byte{0x1a, 0x04, 0x0a, 0x02, 0x08, 0x01}, "answered a malformed response: malformed protobuf message: field 1: unexpected wire type 0"},
		"bad varint":       {[]byte{0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, "answered a malformed response: malformed protobuf message: field 2: bad varint"},
		"no node id":       {[]byte{0x10, 0x01}, "answered an empty node_id"},
		"negative limit":   {[]byte{0x0a, 0x01, 'n', 0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, "answered a negative max_volumes_per_node -1"},
	} {
		c.answer = func() ([]byte, error) { return tc.resp, nil }
		if got := r.failed(harness.Register, r.plugin("x", "/r/x-reg.sock", "/x.sock", "1.0.0")); got != "host: handler failed: "+prefix+tc.want && !strings.HasSuffix(got, prefix+tc.want) {
			t.Errorf("%s:\n got %q\nwant %q", name, got, prefix+tc.want)
		}
	}
}

// TestCSIRegisterFailures: a NodeGetInfo that fails, or answers what cannot be used, fails the
// registration (not a refusal: the daemon retries) and leaves the store as it was.
func TestCSIRegisterFailures(t *testing.T) {
	r, c := csiRig(t)
	old := r.plugin("csi.example.com", "/r/old-reg.sock", "/old.sock", "1.0.0")
	r.register(old)
	p := r.plugin("csi.example.com", "/r/csi.example.com-reg.sock", "/var/lib/kubelet/plugins/x/csi.sock", "1.0.0")
	c.answer = func() ([]byte, error) { return nil, errors.New("connection refused") }
	got := r.failed(harness.Register, p)
	if want := "NodeGetInfo of CSI driver csi.example.com at endpoint /var/lib/kubelet/plugins/x/csi.sock failed: plugincall: /csi.v1.Node/NodeGetInfo: guest: failed: "; !strings.Contains(got, want) || !strings.Contains(got, "connection refused") {
		t.Errorf("Register with NodeGetInfo failing: %q, want it to contain %q and the caller's error", got, want)
	}
	if rec, _ := r.driver(p.Name); rec[2] != old.Socket {
		t.Errorf("record after a failed Register: %q, want the old one", rec)
	}
	// An answer over pluginCallResponseSize: the reason names the limit's key.
	c.answer = func() ([]byte, error) { return make([]byte, 2<<20), nil }
	got = r.failed(harness.Register, p)
	if want := "failed: plugincall: /csi.v1.Node/NodeGetInfo: guest: too large: response of 2097152 bytes over the limit of 1048576 (handlers.limits.pluginCallResponseSize)"; !strings.Contains(got, want) {
		t.Errorf("Register with NodeGetInfo answering 2 MiB: %q, want it to contain %q", got, want)
	}
}

func TestCSIDuplicates(t *testing.T) {
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
		r, _ := csiRig(t)
		r.register(r.plugin("csi.example.com", "/r/a-reg.sock", "/a.sock", "1.0.0", "v1.5.0"))
		second := r.plugin("csi.example.com", "/r/b-reg.sock", "/b.sock", tc.versions...)
		if tc.reason != "" {
			if got := r.rejected(harness.Validate, second); got != tc.reason {
				t.Errorf("Validate(%q): %q, want %q", tc.versions, got, tc.reason)
			}
			continue
		}
		r.register(second)
		if rec, _ := r.driver(second.Name); rec[2] != second.Socket || rec[0] != "/b.sock" {
			t.Errorf("after %q replaced the driver: record %q", tc.versions, rec)
		}
	}
}

// TestCSIRegisterRechecks: a driver that registers with a higher version between another's
// Validate and Register wins, as in the kubelet, which checks the versions again in Register.
func TestCSIRegisterRechecks(t *testing.T) {
	r, _ := csiRig(t)
	low := r.plugin("d", "/r/low-reg.sock", "/low.sock", "1.0.0")
	r.ok(harness.Validate, low)
	r.register(r.plugin("d", "/r/high-reg.sock", "/high.sock", "1.3.0"))
	if got := r.rejected(harness.Register, low); got != "driver d already registered at version 1.3.0 (endpoint /high.sock); refusing 1.0.0" {
		t.Errorf("reason %q", got)
	}
	if rec, _ := r.driver("d"); rec[2] != "/r/high-reg.sock" {
		t.Errorf("record %q", rec)
	}
}

// TestCSIRegisterSameInstant: two drivers of one name register at once (two instances): the
// newer one writes its record while the older one waits for its NodeGetInfo, after the older
// one's check passed. The older one's write finds the record changed, checks again and is
// refused; the newer record stays.
func TestCSIRegisterSameInstant(t *testing.T) {
	r, c := csiRig(t)
	high := encodeRecord("/high.sock", "1.3.0", "/r/high-reg.sock")
	c.answer = func() ([]byte, error) {
		if _, ok := r.store()["driver/d"]; !ok {
			r.set("driver/d", high) // the other instance's register
		}
		return nodeInfoBytes, nil
	}
	if got := r.rejected(harness.Register, r.plugin("d", "/r/low-reg.sock", "/low.sock", "1.0.0")); got != "driver d already registered at version 1.3.0 (endpoint /high.sock); refusing 1.0.0" {
		t.Errorf("reason %q", got)
	}
	if got := r.store()["driver/d"]; string(got) != string(high) {
		t.Errorf("record %x, want the newer driver's", got)
	}

	// The other way round: an older record written meanwhile is replaced by the newer driver.
	r, c = csiRig(t)
	c.answer = func() ([]byte, error) {
		if _, ok := r.store()["driver/d"]; !ok {
			r.set("driver/d", encodeRecord("/low.sock", "1.0.0", "/r/low-reg.sock"))
		}
		return nodeInfoBytes, nil
	}
	r.ok(harness.Register, r.plugin("d", "/r/high-reg.sock", "/high.sock", "1.3.0"))
	if rec, _ := r.driver("d"); rec[2] != "/r/high-reg.sock" {
		t.Errorf("record %q, want the newer driver's", rec)
	}
}

// TestCSIStaleRecordSameSocket: a record left by the same socket (the host deregisters a plugin
// before registering another at the same path, so it is stale) does not block the newcomer.
func TestCSIStaleRecordSameSocket(t *testing.T) {
	r, _ := csiRig(t)
	r.register(r.plugin("d", "/r/d-reg.sock", "/d.sock", "1.9.0"))
	r.register(r.plugin("d", "/r/d-reg.sock", "/d2.sock", "1.0.0"))
	if rec, _ := r.driver("d"); rec[1] != "1.0.0" || rec[0] != "/d2.sock" {
		t.Errorf("record %q", rec)
	}
}

func TestCSICorruptRecord(t *testing.T) {
	r, _ := csiRig(t)
	r.set("driver/d", []byte{0x0b})
	p := r.plugin("d", "/r/d-reg.sock", "/d.sock", "1.0.0")
	st := r.ok(harness.Validate, p)
	if !hasLog(st, "WARN ignoring the stored record of CSI driver d: malformed protobuf message: field 1: unsupported wire type 3") {
		t.Errorf("logs %v", st.Logs)
	}
	r.ok(harness.Register, p)
	if rec, ok := r.driver("d"); !ok || rec[2] != "/r/d-reg.sock" {
		t.Errorf("record %q", rec)
	}
}

func TestCSIDeregister(t *testing.T) {
	r, _ := csiRig(t)
	old := r.plugin("d", "/r/old-reg.sock", "/d.sock", "1.0.0")
	newer := r.plugin("d", "/r/new-reg.sock", "/d.sock", "1.0.0")
	r.register(old)
	r.register(newer)

	// The old socket goes away after the newer registration replaced its record: the record stays.
	st := r.ok(harness.Deregister, old)
	if rec, ok := r.driver("d"); !ok || rec[2] != newer.Socket {
		t.Fatalf("after the old socket's deregistration: record %q, %v; want the newer one", rec, ok)
	}
	if !hasLog(st, "INFO deregistering CSI driver d from socket /r/old-reg.sock; keeping the newer registration from socket /r/new-reg.sock (endpoint /d.sock)") {
		t.Errorf("logs %v", st.Logs)
	}
	// The same socket with another endpoint is not this record either.
	r.ok(harness.Deregister, r.plugin("d", newer.Socket, "/other.sock", "1.0.0"))
	if _, ok := r.driver("d"); !ok {
		t.Fatal("a deregistration with another endpoint erased the record")
	}
	if st := r.ok(harness.Deregister, newer); !hasLog(st, "INFO deregistered CSI driver d (endpoint /d.sock)") {
		t.Errorf("logs %v", st.Logs)
	}
	if _, ok := r.driver("d"); ok {
		t.Error("the record survived its own deregistration")
	}
	// Nothing left: a deregistration is not an error.
	if st := r.ok(harness.Deregister, newer); !hasLog(st, "WARN deregistering CSI driver d from socket /r/new-reg.sock, of which there is no record") {
		t.Errorf("logs %v", st.Logs)
	}
	if n := len(r.store()); n != 0 {
		t.Errorf("%d keys left in the store", n)
	}
}

// TestCSIModule: what the module imports, and that it loads only with plugin_call granted.
func TestCSIModule(t *testing.T) {
	conformance.CheckShape(t, guestbuild.ShippedBytes(t, "csi"), []string{abi.ImportErrorRead, abi.ImportKVCompareAndSet,
		abi.ImportKVGet, abi.ImportLog, abi.ImportPluginCall, abi.ImportPublish, abi.ImportRequestRead, abi.ImportResultSet})
	hs, err := harness.New(t.Context(), host.Config{AllowInsecure: true})
	if err != nil {
		t.Fatal(err)
	}
	defer hs.Close(context.Background())
	if _, _, err := hs.Load(t.Context(), guestbuild.Shipped(t, "csi")); !errors.Is(err, sandbox.ErrNotGranted) {
		t.Errorf("load without the plugin_call grant: %v, want ErrNotGranted", err)
	}
}
