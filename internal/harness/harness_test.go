package harness

import (
	"context"
	"github.com/wasmhost/wasmhost/internal/host"
	"testing"

	"github.com/wasmhost/wasmhost/internal/registration"
)

func TestHandlerHarness(t *testing.T) {
	ctx := context.Background()
	hs, err := New(ctx, host.Config{AllowInsecure: true})
	if err != nil {
		t.Fatal(err)
	}
	defer hs.Close(ctx)
	m, _, err := hs.Load(ctx, "../../conformance/testdata/handler.wasm")
	if err != nil {
		t.Fatal(err)
	}
	p, err := registration.ValidateInfo("/r/p-reg.sock", registration.PluginInfo{Type: "conformance.example", Name: "p", Versions: []string{"v1"}})
	if err != nil {
		t.Fatal(err)
	}
	st := hs.Do(ctx, m, Register, p)
	if st.Outcome != OK || st.Published["k"] != "v" || len(st.Store) != 1 || st.Duration <= 0 {
		t.Errorf("register: %+v", st)
	}
	st = hs.Do(ctx, m, Deregister, p)
	if st.Outcome != OK || len(st.Store) != 0 || st.Store == nil {
		t.Errorf("deregister: %+v", st)
	}
	p.Versions = []string{"v0"}
	if st = hs.Do(ctx, m, Validate, p); st.Outcome != Rejected || st.Reason != "refused" {
		t.Errorf("validate of v0: %+v", st)
	}
	if _, _, err := hs.Load(ctx, "../host/testdata/notwasm.wasm"); err == nil {
		t.Error("loading a file that is not wasm: no error")
	}
	if _, err := (noCaller{}).Call(ctx, "/e", "/a.B/C", nil, 1); err == nil {
		t.Error("noCaller answered")
	}
}
