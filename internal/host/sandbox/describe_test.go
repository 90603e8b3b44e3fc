package sandbox

import (
	"context"
	"testing"

	"github.com/wasmhost/wasmhost/internal/registration"
)

func TestStore(t *testing.T) {
	h, _ := newTestSandbox(t, Config{})
	if s := h.Store("kv.example"); s != nil {
		t.Errorf("store before any call: %v", s)
	}
	m := mustLoad(t, h, "kv")
	defer m.Close(context.Background())
	p := registration.PluginInfo{Type: "kv.example", Name: "p"}
	if err := m.ValidatePlugin(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	s := h.Store("kv.example")
	if len(s) != 1 || string(s["k"]) != "v1" {
		t.Errorf("store %q", s)
	}
	s["k"][0] = 'x' // a copy
	if got := h.Store("kv.example"); string(got["k"]) != "v1" {
		t.Errorf("store changed through the snapshot: %q", got)
	}
}
