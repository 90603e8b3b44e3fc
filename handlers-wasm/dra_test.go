//go:build !wasip1

package handlers

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/conformance"
	"github.com/wasmhost/wasmhost/internal/guestbuild"
	"github.com/wasmhost/wasmhost/internal/harness"
	"github.com/wasmhost/wasmhost/internal/registration"
)

// The dra handler (handlers-wasm/dra/dra.c), built and run in the daemon's host.

const draType = "DRAPlugin"

func draRig(t *testing.T) *rig { return newRig(t, "dra", draType, nil) }

// socketRecord is a registration's record in the store: name, endpoint, service, health.
func (r *rig) socketRecord(socket string) ([]string, bool) { return r.record("socket/"+socket, 4) }

func TestDRAServiceChoice(t *testing.T) {
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
		r := draRig(t)
		p := r.plugin("gpu.example.com", "/r/gpu.example.com-reg.sock", "/var/lib/kubelet/plugins/gpu.example.com/dra.sock", tc.versions...)
		st := r.register(p)
		want := map[string]string{"service": tc.service, "health": tc.health, "endpoint": p.Endpoint}
		if !maps.Equal(st.Published, want) {
			t.Errorf("Register(%q) published %v, want %v", tc.versions, st.Published, want)
		}
		health := tc.health
		if health == "none" {
			health = ""
		}
		if rec, ok := r.socketRecord(p.Socket); !ok || !slices.Equal(rec, []string{p.Name, p.Endpoint, tc.service, health}) {
			t.Errorf("Register(%q) stored %q, %v", tc.versions, rec, ok)
		}
		if got := r.store()["socket/"+p.Socket]; string(got) != string(encodeRecord(p.Name, p.Endpoint, tc.service, health)) {
			t.Errorf("record bytes %x", got)
		}
		if !hasLog(st, "INFO registered DRA driver gpu.example.com from socket "+p.Socket+" at endpoint "+p.Endpoint+" using "+tc.service+", health "+tc.health) {
			t.Errorf("logs %v", st.Logs)
		}
	}
}

func TestDRARefusals(t *testing.T) {
	r := draRig(t)
	maxSocket := abi.MaxKeyBytes - len("socket/") // the longest socket path whose store key fits
	const supported = "; supported: v1.DRAPlugin, v1beta1.DRAPlugin"
	for _, tc := range []struct {
		p      registration.PluginInfo
		reason string
	}{
		{r.plugin("d", "/r/d-reg.sock", "/d.sock"), "DRA driver d at endpoint /d.sock offers no services" + supported},
		{r.plugin("d", "/r/d-reg.sock", "/d.sock", "1.0.0"), `DRA driver d at endpoint /d.sock offers services ["1.0.0"], none of them a supported DRAPlugin service` + supported},
		{r.plugin("d", "/r/d-reg.sock", "/d.sock", "v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth"),
			`DRA driver d at endpoint /d.sock offers services ["v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth"], none of them a supported DRAPlugin service` + supported},
		{r.plugin("d", "/r/d-reg.sock", "/d.sock", "v2.DRAPlugin", "V1.DRAPlugin", " v1.DRAPlugin", "v1alpha3.DRAPlugin"),
			`DRA driver d at endpoint /d.sock offers services ["v2.DRAPlugin", "V1.DRAPlugin", " v1.DRAPlugin", "v1alpha3.DRAPlugin"], none of them a supported DRAPlugin service` + supported},
		{r.plugin("d", "/r/d-reg.sock", "/d.sock", "a\"b\\c\n"), `DRA driver d at endpoint /d.sock offers services ["a\"b\\c\x0a"], none of them a supported DRAPlugin service` + supported},
		{r.plugin("", "/r/x-reg.sock", "/d.sock", "v1.DRAPlugin"), "DRA driver at socket /r/x-reg.sock has no name"},
		{r.plugin("d", "", "/d.sock", "v1.DRAPlugin"), "DRA driver d has no registration socket"},
		{r.plugin("d", "/"+strings.Repeat("s", maxSocket), "/d.sock", "v1.DRAPlugin"), "DRA driver d: the registration socket path is " +
			strconv.Itoa(maxSocket+1) + " bytes long; this handler takes paths of up to " + strconv.Itoa(maxSocket)},
	} {
		for _, op := range []harness.Op{harness.Validate, harness.Register} {
			if got := r.rejected(op, tc.p); got != tc.reason {
				t.Errorf("%s %q %q:\n got %q\nwant %q", op, tc.p.Name, tc.p.Versions, got, tc.reason)
			}
		}
	}
	r.ok(harness.Validate, r.plugin("d", "/"+strings.Repeat("s", maxSocket-1), "/d.sock", "v1.DRAPlugin"))
	if n := len(r.store()); n != 0 {
		t.Errorf("refusals left %d keys in the store", n)
	}
}

// TestDRARollingUpdate: two registration sockets of one driver (a DaemonSet's rolling update)
// each have a record; deregistering one leaves the other.
func TestDRARollingUpdate(t *testing.T) {
	r := draRig(t)
	const ep = "/var/lib/kubelet/plugins/gpu.example.com/dra.sock"
	old := r.plugin("gpu.example.com", "/r/gpu.example.com-1111-reg.sock", ep, "v1beta1.DRAPlugin")
	newer := r.plugin("gpu.example.com", "/r/gpu.example.com-2222-reg.sock", ep, "v1.DRAPlugin", "v1beta1.DRAPlugin", "v1alpha1.DRAResourceHealth")
	r.register(old)
	r.register(newer)
	if rec, ok := r.socketRecord(old.Socket); !ok || rec[2] != "v1beta1.DRAPlugin" {
		t.Errorf("old socket's record %q, %v", rec, ok)
	}
	if rec, ok := r.socketRecord(newer.Socket); !ok || rec[2] != "v1.DRAPlugin" || rec[3] != "v1alpha1.DRAResourceHealth" {
		t.Errorf("new socket's record %q, %v", rec, ok)
	}
	if st := r.ok(harness.Deregister, old); !hasLog(st, "INFO deregistered DRA driver gpu.example.com from socket "+old.Socket) {
		t.Errorf("logs %v", st.Logs)
	}
	if _, ok := r.socketRecord(old.Socket); ok {
		t.Error("the old socket's record survived its deregistration")
	}
	if _, ok := r.socketRecord(newer.Socket); !ok {
		t.Error("deregistering the old socket erased the new socket's record")
	}
	r.ok(harness.Deregister, newer)
	if n := len(r.store()); n != 0 {
		t.Errorf("%d keys left in the store", n)
	}
	// Deregistering what has no record is not an error (it is logged).
	if st := r.ok(harness.Deregister, newer); !hasLog(st, "WARN deregistering DRA driver gpu.example.com from socket /r/gpu.example.com-2222-reg.sock, of which there is no record") {
		t.Errorf("logs %v", st.Logs)
	}
}

func TestDRADeregisterOtherRecord(t *testing.T) {
	r := draRig(t)
	later := r.plugin("b", "/r/x-reg.sock", "/b.sock", "v1.DRAPlugin")
	r.ok(harness.Register, later)
	for _, p := range []registration.PluginInfo{
		r.plugin("a", "/r/x-reg.sock", "/b.sock", "v1.DRAPlugin"), // another driver
		r.plugin("b", "/r/x-reg.sock", "/a.sock", "v1.DRAPlugin"), // another endpoint
	} {
		st := r.ok(harness.Deregister, p)
		if _, ok := r.socketRecord(later.Socket); !ok {
			t.Fatalf("deregistering %s at %s erased the record of %s at %s", p.Name, p.Endpoint, later.Name, later.Endpoint)
		}
		if !hasLog(st, "INFO deregistering DRA driver "+p.Name+" from socket /r/x-reg.sock; keeping the record of the later registration there (driver b, endpoint /b.sock)") {
			t.Errorf("logs %v", st.Logs)
		}
	}
	// An unreadable record is deleted; unknown fields of every wire type are skipped.
	for _, tc := range []struct {
		record []byte
		log    string
	}{
		{[]byte{0x0b}, "WARN deregistering DRA driver b from socket /r/x-reg.sock: deleting an unreadable record: malformed protobuf message: field 1: unsupported wire type 3"},
		{[]byte{0x0a, 0x02, 'a'}, "WARN deregistering DRA driver b from socket /r/x-reg.sock: deleting an unreadable record: malformed protobuf message: field 1: truncated"},
		{[]byte{0x08, 0x01}, "WARN deregistering DRA driver b from socket /r/x-reg.sock: deleting an unreadable record: malformed protobuf message: field 1: unexpected wire type 0"},
		{[]byte{0x0a, 0x01, 0xff}, "WARN deregistering DRA driver b from socket /r/x-reg.sock: deleting an unreadable record: malformed protobuf message: field 1: not valid UTF-8"},
		{append(encodeRecord("b", "/b.sock"), 0x28, 0x01, 0x31, 1, 2, 3, 4, 5, 6, 7, 8, 0x3d, 1, 2, 3, 4, 0x42, 0x01, 'x'), "INFO deregistered DRA driver b from socket /r/x-reg.sock"},
	} {
		r.set("socket/"+later.Socket, tc.record)
		if st := r.ok(harness.Deregister, later); !hasLog(st, tc.log) {
			t.Errorf("record %x: logs %v, want %q", tc.record, st.Logs, tc.log)
		}
		if n := len(r.store()); n != 0 {
			t.Errorf("record %x: %d keys left in the store", tc.record, n)
		}
	}
}

// TestDRAModule: what the module imports (no capability).
func TestDRAModule(t *testing.T) {
	conformance.CheckShape(t, guestbuild.ShippedBytes(t, "dra"), []string{abi.ImportKVDelete, abi.ImportKVGet, abi.ImportKVSet,
		abi.ImportLog, abi.ImportPublish, abi.ImportRequestRead, abi.ImportResultSet})
}
