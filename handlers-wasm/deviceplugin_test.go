//go:build !wasip1

package handlers

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/conformance"
	"github.com/wasmhost/wasmhost/internal/guestbuild"
	"github.com/wasmhost/wasmhost/internal/harness"
	"github.com/wasmhost/wasmhost/internal/host"
	"github.com/wasmhost/wasmhost/internal/host/sandbox"
)

// The deviceplugin handler (handlers-wasm/deviceplugin/deviceplugin.c), built and run in the
// daemon's host: the kubelet's device manager checks, what it publishes and keeps, and what
// it makes of GetDevicePluginOptions answers.

const (
	dpType      = "DevicePlugin"
	dpOptions   = "/v1beta1.DevicePlugin/GetDevicePluginOptions"
	dpRule      = "an extended resource name is domain/resource, such as example.com/gpu, with the domain a lowercase DNS subdomain outside kubernetes.io"
	dpMaxAnswer = 4096 // MAX_OPTIONS_BYTES
	dpMaxDomain = 244  // MAX_DOMAIN_BYTES: 253 with "requests." before it
)

// dpOptionsBytes is DevicePluginOptions{pre_start_required: true,
// get_preferred_allocation_available: true}, encoded by hand.
var dpOptionsBytes = []byte{0x08, 0x01, 0x10, 0x01}

// dpCaller answers GetDevicePluginOptions with its answer function's result, and counts the
// calls.
type dpCaller struct {
	t      *testing.T
	answer func() ([]byte, error)
	calls  int
}

func (c *dpCaller) Call(_ context.Context, _, method string, req []byte, _ int) ([]byte, error) {
	c.calls++
	if method != dpOptions || len(req) != 0 {
		c.t.Errorf("plugin call %s with %d bytes, want %s with an empty request", method, len(req), dpOptions)
	}
	return c.answer()
}

func dpRig(t *testing.T) (*rig, *dpCaller) {
	c := &dpCaller{t: t, answer: func() ([]byte, error) { return dpOptionsBytes, nil }}
	return newRig(t, "deviceplugin", dpType, c), c
}

// resource is the record of a resource in the store: socket, endpoint.
func (r *rig) resource(name string) ([]string, bool) { return r.record("resource/"+name, 2) }

// kubeletAccepts is the kubelet's v1helper.IsExtendedResourceName (k8s.io/kubernetes
// pkg/apis/core/v1/helper, v1.37), transcribed: not native (a '/' and no "kubernetes.io/",
// v1.ResourceDefaultNamespacePrefix), not "requests."-prefixed (v1.DefaultResourceRequestsPrefix),
// and "requests." + name a qualified name, by apimachinery's own check.
func kubeletAccepts(name string) bool {
	if !strings.Contains(name, "/") || strings.Contains(name, "kubernetes.io/") || strings.HasPrefix(name, "requests.") {
		return false
	}
	return len(validation.IsQualifiedName("requests."+name)) == 0
}

func TestDevicePluginVersions(t *testing.T) {
	r, _ := dpRig(t)
	for _, versions := range [][]string{{"v1beta1"}, {"v1alpha1", "v1beta1"}, {"v1beta1", "garbage"}} {
		r.ok(harness.Validate, r.plugin("example.com/gpu", "/r/gpu.sock", "/r/gpu.sock", versions...))
	}
	for _, tc := range []struct {
		versions []string
		shown    string
	}{
		{nil, "[]"},
		{[]string{"v1alpha1"}, `["v1alpha1"]`},
		{[]string{"v1", "v1beta2", "V1BETA1", " v1beta1"}, `["v1", "v1beta2", "V1BETA1", " v1beta1"]`},
		{[]string{"1.0.0", "a\"b\n"}, `["1.0.0", "a\"b\x0a"]`},
	} {
		p := r.plugin("example.com/gpu", "/r/gpu.sock", "/r/gpu.sock", tc.versions...)
		want := `device plugin "example.com/gpu" at socket /r/gpu.sock: its versions ` + tc.shown +
			" do not include v1beta1, the device plugin API version the kubelet speaks"
		if got := r.rejected(harness.Validate, p); got != want {
			t.Errorf("Validate(%q):\n got %q\nwant %q", tc.versions, got, want)
		}
		// Register checks again, for a host that calls it without Validate.
		if got := r.rejected(harness.Register, p); got != want {
			t.Errorf("Register(%q): %q", tc.versions, got)
		}
	}
	if len(r.store()) != 0 {
		t.Errorf("store after refusals: %v", r.store())
	}
}

// TestDevicePluginNames: the handler refuses a name as the kubelet does, with a reason that
// says which rule it breaks.
func TestDevicePluginNames(t *testing.T) {
	r, _ := dpRig(t)
	long := func(n int) string { return strings.Repeat("a", n) }
	const prefix = `device plugin "%s" at socket /r/x.sock: its name is not an extended resource name: it `
	for _, tc := range []struct {
		name, why string // why "" to accept
	}{
		{"example.com/gpu", ""},
		{"nvidia.com/gpu", ""},
		{"intel.com/sriov_netdevice", ""},
		{"rdma/hca_shared_devices_a", ""},
		{"a/B", ""},
		{"requests/gpu", ""},
		{"my-domain.example.com/Gpu.v2-x_y", ""},
		{"0.example.com/9", ""},
		{long(dpMaxDomain) + "/" + long(63), ""},
		{"foo", "has no domain (no '/')"},
		{"", "has no domain (no '/')"},
		{"kubernetes.io/foo", `is in the kubernetes.io domain, Kubernetes' own: its domain "kubernetes.io" ends in kubernetes.io`},
		{"gpu.kubernetes.io/foo", `is in the kubernetes.io domain, Kubernetes' own: its domain "gpu.kubernetes.io" ends in kubernetes.io`},
		{"notkubernetes.io/foo", `is in the kubernetes.io domain, Kubernetes' own: its domain "notkubernetes.io" ends in kubernetes.io`},
		{"example.com/a/b", "has more than one '/'"},
		{"requests.example.com/gpu", "starts with requests., the prefix of resource quota names"},
		{"/gpu", "has an empty domain"},
		{"Example.com/gpu", `has a domain "Example.com" that is not a DNS subdomain: it has a character other than a lowercase letter, a digit, '-' or '.'`},
		{"exa_mple.com/gpu", `has a domain "exa_mple.com" that is not a DNS subdomain: it has a character other than a lowercase letter, a digit, '-' or '.'`},
		{"-example.com/gpu", `has a domain "-example.com" that is not a DNS subdomain: it has a label that starts with '-'`},
		{"example-.com/gpu", `has a domain "example-.com" that is not a DNS subdomain: it has a label that is empty or ends with '-'`},
		{"example..com/gpu", `has a domain "example..com" that is not a DNS subdomain: it has a label that is empty or ends with '-'`},
		{"example.com./gpu", `has a domain "example.com." that is not a DNS subdomain: it has a label that is empty or ends with '-'`},
		{long(245) + "/gpu", "has a domain of 245 bytes; at most " + strconv.Itoa(dpMaxDomain)},
		{"example.com/", `has a resource part "" that is empty`},
		{"example.com/" + long(64), `has a resource part "` + long(64) + `" that is longer than 63 characters`},
		{"example.com/g@pu", `has a resource part "g@pu" that has a character other than a letter, a digit, '-', '_' or '.'`},
		{"example.com/gpu\n", `has a resource part "gpu\x0a" that has a character other than a letter, a digit, '-', '_' or '.'`},
		{"example.com/gpü", `has a resource part "gpü" that has a character other than a letter, a digit, '-', '_' or '.'`},
		{"example.com/-gpu", `has a resource part "-gpu" that does not start and end with a letter or a digit`},
		{"example.com/gpu.", `has a resource part "gpu." that does not start and end with a letter or a digit`},
	} {
		if accept := tc.why == ""; accept != kubeletAccepts(tc.name) {
			t.Errorf("%q: the test expects accept=%v, the kubelet's rule says %v", tc.name, accept, !accept)
		}
		p := r.plugin(tc.name, "/r/x.sock", "/r/x.sock", "v1beta1")
		if tc.why == "" {
			r.register(p)
			continue
		}
		shown := strings.ReplaceAll(strings.Trim(strconv.Quote(tc.name), `"`), `\n`, `\x0a`)
		want := strings.Replace(prefix, "%s", shown, 1) + tc.why + "; " + dpRule
		if got := r.rejected(harness.Validate, p); got != want {
			t.Errorf("Validate(%q):\n got %q\nwant %q", tc.name, got, want)
		}
	}
}

// TestDevicePluginNamesAsKubelet: on names made of the characters that matter, the handler
// accepts exactly what the kubelet's rule accepts.
func TestDevicePluginNamesAsKubelet(t *testing.T) {
	r, _ := dpRig(t)
	rng := rand.New(rand.NewPCG(1, 2))
	parts := []string{"a", "z", "0", "A", "-", "_", ".", "/", "kubernetes.io", "requests.", "é", "example.com", "io/", strings.Repeat("b", 60)}
	accepted := 0
	for i := 0; i < 1500; i++ {
		var b strings.Builder
		for n := 1 + rng.IntN(6); n > 0; n-- {
			b.WriteString(parts[rng.IntN(len(parts))])
		}
		name := b.String()
		st := r.do(harness.Validate, r.plugin(name, "/r/x.sock", "/r/x.sock", "v1beta1"))
		if got, want := st.Outcome == harness.OK, kubeletAccepts(name); got != want {
			t.Errorf("%q: handler accepts=%v (%s), the kubelet's rule %v", name, got, st.Reason, want)
		}
		if st.Outcome == harness.OK {
			accepted++
		}
	}
	if accepted == 0 {
		t.Error("no generated name was accepted: the test checks only refusals")
	}
}

func TestDevicePluginRegisterPublishes(t *testing.T) {
	r, c := dpRig(t)
	p := r.plugin("example.com/gpu", "/r/gpu-reg.sock", "/var/lib/kubelet/device-plugins/gpu.sock", "v1beta1")
	st := r.register(p)
	if c.calls != 1 {
		t.Errorf("%d GetDevicePluginOptions calls, want 1", c.calls)
	}
	want := map[string]string{
		"resource":                           "example.com/gpu",
		"endpoint":                           p.Endpoint,
		"pre_start_required":                 "true",
		"get_preferred_allocation_available": "true",
	}
	if !maps.Equal(st.Published, want) {
		t.Errorf("published %v, want %v", st.Published, want)
	}
	if rec, ok := r.resource(p.Name); !ok || !slices.Equal(rec, []string{p.Socket, p.Endpoint}) {
		t.Errorf("record %q, %v", rec, ok)
	}
	if !hasLog(st, "INFO registered device plugin for resource example.com/gpu at endpoint "+p.Endpoint+
		", pre_start_required true, get_preferred_allocation_available true") {
		t.Errorf("logs %v", st.Logs)
	}
}

// TestDevicePluginOptions: what the handler makes of GetDevicePluginOptions answers of every
// shape, and of the call failing: a failure (the daemon retries with backoff), never a trap,
// and the store as it was.
func TestDevicePluginOptions(t *testing.T) {
	r, c := dpRig(t)
	for _, tc := range []struct {
		resp      []byte
		pre, pref string
	}{
		{nil, "false", "false"},
		{[]byte{0x08, 0x01}, "true", "false"},
		{[]byte{0x10, 0x05}, "false", "true"},
		{[]byte{0x08, 0x01, 0x08, 0x00}, "false", "false"}, // the last one wins
		// Unknown fields of every wire type, as a later API may add.
		{[]byte{0x18, 0x07, 0x22, 0x01, 'x', 0x2d, 1, 2, 3, 4, 0x31, 1, 2, 3, 4, 5, 6, 7, 8, 0x10, 0x01}, "false", "true"},
	} {
		c.answer = func() ([]byte, error) { return tc.resp, nil }
		st := r.register(r.plugin("example.com/gpu", "/r/gpu.sock", "/r/gpu.sock", "v1beta1"))
		if st.Published["pre_start_required"] != tc.pre || st.Published["get_preferred_allocation_available"] != tc.pref {
			t.Errorf("answer %x: published %v", tc.resp, st.Published)
		}
	}
	// Hand encoding agrees with protowire's.
	if b := protowire.AppendVarint(protowire.AppendTag(protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 1), 2, protowire.VarintType), 1); !bytes.Equal(b, dpOptionsBytes) {
		t.Fatalf("hand encoding %x, protowire %x", dpOptionsBytes, b)
	}

	before := maps.Clone(r.store())
	const prefix = `device plugin "example.com/x" at socket /r/x.sock: GetDevicePluginOptions at endpoint /r/x-dp.sock `
	for name, tc := range map[string]struct {
		resp []byte
		err  error
		want string
	}{
		"call fails":   {nil, errors.New("connection refused"), "failed: plugincall: " + dpOptions + ": guest: failed: "},
		"truncated":    {[]byte{0x08, 0x01, 0x22, 0x05, 'x'}, nil, "answered a malformed DevicePluginOptions: malformed protobuf message: field 4: truncated"},
		"cut varint":   {[]byte{0x08}, nil, "answered a malformed DevicePluginOptions: malformed protobuf message: field 1: bad varint"},
		"bool as text": {[]byte{0x0a, 0x01, 'x'}, nil, "answered a malformed DevicePluginOptions: malformed protobuf message: field 1: unexpected wire type 2"},
		"fixed32":      {[]byte{0x15, 1, 0, 0, 0}, nil, "answered a malformed DevicePluginOptions: malformed protobuf message: field 2: unexpected wire type 5"},
		"group":        {[]byte{0x0b}, nil, "answered a malformed DevicePluginOptions: malformed protobuf message: field 1: unsupported wire type 3"},
		"field 0":      {[]byte{0x02, 0x00}, nil, "answered a malformed DevicePluginOptions: malformed protobuf message: bad field tag"},
		"bad varint":   {[]byte{0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, nil, "answered a malformed DevicePluginOptions: malformed protobuf message: field 1: bad varint"},
		"long":         {bytes.Repeat([]byte{0x18, 0x01}, dpMaxAnswer/2+1), nil, "answered " + strconv.Itoa(dpMaxAnswer+2) + " bytes; this handler reads answers of up to 4096 (DevicePluginOptions is two bools)"},
		"huge":         {make([]byte, 2<<20), nil, "failed: plugincall: " + dpOptions + ": guest: too large: response of 2097152 bytes over the limit of "},
	} {
		c.answer = func() ([]byte, error) { return tc.resp, tc.err }
		got := r.failed(harness.Register, r.plugin("example.com/x", "/r/x.sock", "/r/x-dp.sock", "v1beta1"))
		if !strings.Contains(got, prefix+tc.want) {
			t.Errorf("%s:\n got %q\nwant it to contain %q", name, got, prefix+tc.want)
		}
		if tc.err != nil && !strings.Contains(got, tc.err.Error()) {
			t.Errorf("%s: %q does not say the caller's error", name, got)
		}
	}
	if after := r.store(); !maps.EqualFunc(before, after, bytes.Equal) {
		t.Errorf("failed registrations changed the store:\n%v\n%v", before, after)
	}
}

// TestDevicePluginFailedRegisterKeepsEarlier: a newcomer whose GetDevicePluginOptions fails
// leaves the registration it would have replaced in place.
func TestDevicePluginFailedRegisterKeepsEarlier(t *testing.T) {
	r, c := dpRig(t)
	old := r.plugin("example.com/gpu", "/r/old.sock", "/r/old.sock", "v1beta1")
	r.register(old)
	c.answer = func() ([]byte, error) { return nil, errors.New("Unimplemented") }
	r.failed(harness.Register, r.plugin("example.com/gpu", "/r/new.sock", "/r/new.sock", "v1beta1"))
	if rec, _ := r.resource("example.com/gpu"); rec[0] != old.Socket {
		t.Errorf("record %q, want the earlier registration's", rec)
	}
}

// TestDevicePluginNewerWins: one registration per resource name; a newer one from another
// socket replaces the record (as a new endpoint replaces the old one in the kubelet), and the
// older socket's deregistration leaves it alone.
func TestDevicePluginNewerWins(t *testing.T) {
	r, _ := dpRig(t)
	old := r.plugin("example.com/gpu", "/r/gpu-old.sock", "/r/gpu-old.sock", "v1beta1")
	newer := r.plugin("example.com/gpu", "/r/gpu-new.sock", "/r/gpu-new.sock", "v1beta1")
	r.register(old)
	st := r.register(newer)
	if !hasLog(st, "INFO registered device plugin for resource example.com/gpu at endpoint /r/gpu-new.sock, pre_start_required true, get_preferred_allocation_available true; it replaces the registration from socket /r/gpu-old.sock") {
		t.Errorf("logs %v", st.Logs)
	}
	if rec, _ := r.resource("example.com/gpu"); rec[0] != newer.Socket {
		t.Fatalf("record %q, want the newer registration's", rec)
	}
	st = r.ok(harness.Deregister, old)
	if rec, ok := r.resource("example.com/gpu"); !ok || rec[0] != newer.Socket {
		t.Fatalf("after the old socket's deregistration: record %q, %v", rec, ok)
	}
	if !hasLog(st, "INFO deregistering device plugin for resource example.com/gpu from socket /r/gpu-old.sock; keeping the newer registration from socket /r/gpu-new.sock (endpoint /r/gpu-new.sock)") {
		t.Errorf("logs %v", st.Logs)
	}
	// The same socket with another endpoint is not this record either.
	r.ok(harness.Deregister, r.plugin("example.com/gpu", newer.Socket, "/r/other.sock", "v1beta1"))
	if _, ok := r.resource("example.com/gpu"); !ok {
		t.Fatal("a deregistration with another endpoint erased the record")
	}
	if st := r.ok(harness.Deregister, newer); !hasLog(st, "INFO deregistered device plugin for resource example.com/gpu (endpoint /r/gpu-new.sock)") {
		t.Errorf("logs %v", st.Logs)
	}
	if st := r.ok(harness.Deregister, newer); !hasLog(st, "WARN deregistering device plugin for resource example.com/gpu from socket /r/gpu-new.sock, of which there is no record") {
		t.Errorf("logs %v", st.Logs)
	}
	if n := len(r.store()); n != 0 {
		t.Errorf("%d keys left in the store", n)
	}
	// An unreadable record is deleted by its resource's deregistration.
	r.set("resource/example.com/gpu", []byte{0x0b})
	if st := r.ok(harness.Deregister, newer); !hasLog(st, "WARN deregistering device plugin for resource example.com/gpu from socket /r/gpu-new.sock: deleting an unreadable record: malformed protobuf message: field 1: unsupported wire type 3") {
		t.Errorf("logs %v", st.Logs)
	}
	if n := len(r.store()); n != 0 {
		t.Errorf("%d keys left in the store", n)
	}
}

// TestDevicePluginModule: what the module imports, and that it loads only with plugin_call
// granted.
func TestDevicePluginModule(t *testing.T) {
	conformance.CheckShape(t, guestbuild.ShippedBytes(t, "deviceplugin"), []string{abi.ImportErrorRead, abi.ImportKVCompareAndSet,
		abi.ImportKVGet, abi.ImportKVSet, abi.ImportLog, abi.ImportPluginCall, abi.ImportPublish, abi.ImportRequestRead, abi.ImportResultSet})
	hs, err := harness.New(t.Context(), host.Config{AllowInsecure: true})
	if err != nil {
		t.Fatal(err)
	}
	defer hs.Close(context.Background())
	if _, _, err := hs.Load(t.Context(), guestbuild.Shipped(t, "deviceplugin")); !errors.Is(err, sandbox.ErrNotGranted) {
		t.Errorf("load without the plugin_call grant: %v, want ErrNotGranted", err)
	}
}
