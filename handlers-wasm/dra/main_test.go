//go:build !wasip1

package main

import (
	"errors"
	"maps"
	"strconv"
	"strings"
	"testing"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/abi/guest"
	"github.com/wasmhost/wasmhost/abi/guest/guesttest"
)

func plugin(name, socket, endpoint string, versions ...string) guest.Plugin {
	return guest.Plugin{Socket: socket, Type: PluginType, Name: name, Endpoint: endpoint, Versions: versions}
}

func storedRecord(t *testing.T, f *guest.FakeHost, socket string) (record, bool) {
	t.Helper()
	b, ok := f.KV()[socketKey(socket)]
	if !ok {
		return record{}, false
	}
	r, err := decodeRecord([]byte(b))
	if err != nil {
		t.Fatalf("stored record of %s: %v", socket, err)
	}
	return r, true
}

func TestServiceChoice(t *testing.T) {
	for _, tc := range []struct {
		versions        []string
		service, health string
	}{
		{[]string{"v1.DRAPlugin", "v1beta1.DRAPlugin", "v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth"}, "v1.DRAPlugin", "v1.DRAResourceHealth"},
		{[]string{"v1beta1.DRAPlugin", "v1.DRAPlugin"}, "v1.DRAPlugin", "none"},
		{[]string{"v1beta1.DRAPlugin"}, "v1beta1.DRAPlugin", "none"},
		{[]string{"v1beta1.DRAPlugin", "v1alpha1.DRAResourceHealth"}, "v1beta1.DRAPlugin", "v1alpha1.DRAResourceHealth"},
		{[]string{"v1alpha1.DRAResourceHealth", "v1.DRAPlugin", "v1.DRAResourceHealth"}, "v1.DRAPlugin", "v1.DRAResourceHealth"},
		{[]string{"v1.DRAPlugin", "v2.DRAResourceHealth", "v1alpha1.DRAResourceHealthX"}, "v1.DRAPlugin", "none"},
		{[]string{"1.0.0", "v1.DRAPlugin", "v1alpha3.DRAPlugin"}, "v1.DRAPlugin", "none"},
	} {
		f := guesttest.Fake(t)
		p := plugin("gpu.example.com", "/r/gpu.example.com-reg.sock", "/var/lib/kubelet/plugins/gpu.example.com/dra.sock", tc.versions...)
		if err := (handler{}).Validate(p); err != nil {
			t.Errorf("Validate(%q): %v", tc.versions, err)
			continue
		}
		if err := (handler{}).Register(p); err != nil {
			t.Errorf("Register(%q): %v", tc.versions, err)
			continue
		}
		want := map[string]string{"service": tc.service, "health": tc.health, "endpoint": p.Endpoint}
		if got := f.Published(); !maps.Equal(got, want) {
			t.Errorf("Register(%q) published %v, want %v", tc.versions, got, want)
		}
		health := tc.health
		if health == "none" {
			health = ""
		}
		wantRec := record{name: p.Name, endpoint: p.Endpoint, service: tc.service, health: health}
		if r, ok := storedRecord(t, f, p.Socket); !ok || r != wantRec {
			t.Errorf("Register(%q) stored %+v, %v; want %+v", tc.versions, r, ok, wantRec)
		}
	}
}

func TestRefusals(t *testing.T) {
	maxSocket := abi.MaxKeyBytes - len(socketPrefix) // the longest socket path whose store key fits
	guesttest.Fake(t)
	const supported = "; supported: v1.DRAPlugin, v1beta1.DRAPlugin"
	for _, tc := range []struct {
		p      guest.Plugin
		reason string
	}{
		{plugin("d", "/r/d-reg.sock", "/d.sock"), "DRA driver d at endpoint /d.sock offers no services" + supported},
		{plugin("d", "/r/d-reg.sock", "/d.sock", "1.0.0"), `DRA driver d at endpoint /d.sock offers services ["1.0.0"], none of them a supported DRAPlugin service` + supported},
		{plugin("d", "/r/d-reg.sock", "/d.sock", "v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth"),
			`DRA driver d at endpoint /d.sock offers services ["v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth"], none of them a supported DRAPlugin service` + supported},
		{plugin("d", "/r/d-reg.sock", "/d.sock", "v2.DRAPlugin", "V1.DRAPlugin", " v1.DRAPlugin", "v1alpha3.DRAPlugin"),
			`DRA driver d at endpoint /d.sock offers services ["v2.DRAPlugin", "V1.DRAPlugin", " v1.DRAPlugin", "v1alpha3.DRAPlugin"], none of them a supported DRAPlugin service` + supported},
		{plugin("", "/r/x-reg.sock", "/d.sock", "v1.DRAPlugin"), "DRA driver at socket /r/x-reg.sock has no name"},
		{plugin("d", "", "/d.sock", "v1.DRAPlugin"), "DRA driver d has no registration socket"},
		{plugin("d", "/"+strings.Repeat("s", maxSocket), "/d.sock", "v1.DRAPlugin"), "DRA driver d: the registration socket path is " +
			strconv.Itoa(maxSocket+1) + " bytes long; this handler takes paths of up to " + strconv.Itoa(maxSocket)},
	} {
		for _, call := range []func(guest.Plugin) error{handler{}.Validate, handler{}.Register} {
			var rej *guest.RejectError
			if err := call(tc.p); !errors.As(err, &rej) || rej.Reason != tc.reason {
				t.Errorf("%q %q:\n got %v\nwant rejection %q", tc.p.Name, tc.p.Versions, err, tc.reason)
			}
		}
	}
	if err := (handler{}).Validate(plugin("d", "/"+strings.Repeat("s", maxSocket-1), "/d.sock", "v1.DRAPlugin")); err != nil {
		t.Errorf("a socket path of %d bytes: %v", maxSocket, err)
	}
	if got := len(guest.Fake().KV()); got != 0 {
		t.Errorf("refusals left %d keys in the store", got)
	}
}

// TestRollingUpdate: two registration sockets of one driver (a DaemonSet's rolling update) each
// have a record; deregistering one leaves the other.
func TestRollingUpdate(t *testing.T) {
	f := guesttest.Fake(t)
	const ep = "/var/lib/kubelet/plugins/gpu.example.com/dra.sock"
	old := plugin("gpu.example.com", "/r/gpu.example.com-1111-reg.sock", ep, "v1beta1.DRAPlugin")
	newer := plugin("gpu.example.com", "/r/gpu.example.com-2222-reg.sock", ep, "v1.DRAPlugin", "v1beta1.DRAPlugin", "v1alpha1.DRAResourceHealth")
	for _, p := range []guest.Plugin{old, newer} {
		if err := (handler{}).Validate(p); err != nil {
			t.Fatal(err)
		}
		if err := (handler{}).Register(p); err != nil {
			t.Fatal(err)
		}
	}
	if r, ok := storedRecord(t, f, old.Socket); !ok || r.service != "v1beta1.DRAPlugin" {
		t.Errorf("old socket's record %+v, %v", r, ok)
	}
	if r, ok := storedRecord(t, f, newer.Socket); !ok || r.service != "v1.DRAPlugin" || r.health != "v1alpha1.DRAResourceHealth" {
		t.Errorf("new socket's record %+v, %v", r, ok)
	}
	if err := (handler{}).Deregister(old); err != nil {
		t.Fatal(err)
	}
	if _, ok := storedRecord(t, f, old.Socket); ok {
		t.Error("the old socket's record survived its deregistration")
	}
	if _, ok := storedRecord(t, f, newer.Socket); !ok {
		t.Error("deregistering the old socket erased the new socket's record")
	}
	if err := (handler{}).Deregister(newer); err != nil {
		t.Fatal(err)
	}
	if got := len(f.KV()); got != 0 {
		t.Errorf("%d keys left in the store", got)
	}
	// Deregistering what has no record is not an error (it is logged).
	if err := (handler{}).Deregister(newer); err != nil {
		t.Error(err)
	}
	if logs := f.Logs(); !strings.HasPrefix(logs[len(logs)-1], "WARN deregistering DRA driver gpu.example.com from socket /r/gpu.example.com-2222-reg.sock, of which there is no record") {
		t.Errorf("last log line %q", logs[len(logs)-1])
	}
}

func TestDeregisterOtherRecord(t *testing.T) {
	f := guesttest.Fake(t)
	later := plugin("b", "/r/x-reg.sock", "/b.sock", "v1.DRAPlugin")
	if err := (handler{}).Register(later); err != nil {
		t.Fatal(err)
	}
	for _, p := range []guest.Plugin{
		plugin("a", "/r/x-reg.sock", "/b.sock", "v1.DRAPlugin"), // another driver
		plugin("b", "/r/x-reg.sock", "/a.sock", "v1.DRAPlugin"), // another endpoint
	} {
		if err := (handler{}).Deregister(p); err != nil {
			t.Fatal(err)
		}
		if _, ok := storedRecord(t, f, later.Socket); !ok {
			t.Fatalf("deregistering %s at %s erased the record of %s at %s", p.Name, p.Endpoint, later.Name, later.Endpoint)
		}
	}
	// An unreadable record is deleted.
	if err := guest.KV.Set(socketKey(later.Socket), []byte{0x0b}); err != nil {
		t.Fatal(err)
	}
	if err := (handler{}).Deregister(later); err != nil {
		t.Fatal(err)
	}
	if got := len(f.KV()); got != 0 {
		t.Errorf("%d keys left in the store", got)
	}
}

func TestRecord(t *testing.T) {
	for _, r := range []record{
		{},
		{name: "a", endpoint: "/e", service: "v1.DRAPlugin"},
		{name: "a", endpoint: "/e", service: "v1.DRAPlugin", health: "v1.DRAResourceHealth"},
		{name: strings.Repeat("n", 200), endpoint: "é\x00"},
	} {
		got, err := decodeRecord(r.encode())
		if err != nil || got != r {
			t.Errorf("round trip of %+v: %+v, %v", r, got, err)
		}
	}
	// Unknown fields of every wire type are skipped.
	b := append(record{name: "a"}.encode(), 0x28, 0x01, 0x31, 1, 2, 3, 4, 5, 6, 7, 8, 0x3d, 1, 2, 3, 4, 0x42, 0x01, 'x')
	if r, err := decodeRecord(b); err != nil || r != (record{name: "a"}) {
		t.Errorf("with unknown fields: %+v, %v", r, err)
	}
	for name, bad := range map[string][]byte{
		"truncated":     {0x0a, 0x02, 'a'},
		"field 0":       {0x02, 0x00},
		"group":         {0x0b},
		"known varint":  {0x08, 0x01},
		"bad UTF-8":     {0x0a, 0x01, 0xff},
		"short fixed64": {0x31, 1, 2},
	} {
		if _, err := decodeRecord(bad); !errors.Is(err, errMalformed) {
			t.Errorf("%s: %v, want errMalformed", name, err)
		}
	}
}
