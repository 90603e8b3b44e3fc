//go:build !wasip1

package handlers

import (
	"strconv"
	"strings"
	"testing"

	"github.com/wasmhost/wasmhost/internal/harness"
)

// The example handler (handlers-wasm/example/example.c), built and run in the daemon's host.

func TestExample(t *testing.T) {
	r := newRig(t, "example", "example.wasmhost.dev", nil)
	if got, want := r.rejected(harness.Validate, r.plugin("old", "/r/old-reg.sock", "/old.sock", "v0", "v2")),
		"plugin old supports versions [v0, v2]; this handler needs v1"; got != want {
		t.Errorf("reason %q, want %q", got, want)
	}
	if got, want := r.rejected(harness.Validate, r.plugin("none", "/r/none-reg.sock", "/none.sock")),
		"plugin none supports versions []; this handler needs v1"; got != want {
		t.Errorf("reason %q, want %q", got, want)
	}
	p := r.plugin("demo", "/r/demo-reg.sock", "/run/demo.sock", "v1")
	st := r.register(p)
	if st.Published["endpoint"] != "/run/demo.sock" || len(st.Published) != 1 {
		t.Errorf("published %v", st.Published)
	}
	if string(r.store()["plugin/demo"]) != "/run/demo.sock" || !hasLog(st, "INFO registering demo at /run/demo.sock") {
		t.Errorf("store %q, logs %v", r.store(), st.Logs)
	}
	if st := r.ok(harness.Deregister, p); !hasLog(st, "INFO deregistering demo, registered at /run/demo.sock") || len(r.store()) != 0 {
		t.Errorf("store %q, logs %v", r.store(), st.Logs)
	}
	if st := r.ok(harness.Deregister, p); !hasLog(st, "WARN deregistering demo, which this handler has no record of") {
		t.Errorf("logs %v", st.Logs)
	}
	// The longest name the daemon lets through, and more plugins than the store held before
	// ABI v1.2 (4,096 keys).
	r.register(r.plugin(strings.Repeat("n", 256), "/r/long-reg.sock", "/long.sock", "v1"))
	if testing.Short() {
		return
	}
	for i := range 4100 {
		r.ok(harness.Register, r.plugin("p"+strconv.Itoa(i), "/r/p-reg.sock", "/p.sock", "v1"))
	}
	if n := len(r.store()); n != 4101 {
		t.Errorf("%d keys in the store, want 4101", n)
	}
}
