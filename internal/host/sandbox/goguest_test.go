package sandbox

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/abi/guest/guesttest"
	"github.com/wasmhost/wasmhost/internal/host/sandbox/sandboxtest"
	"github.com/wasmhost/wasmhost/internal/limits"
	"github.com/wasmhost/wasmhost/internal/registration"
)

// TestGoGuest runs a Go guest written against the raw ABI: a panic and running out of memory
// are traps that cost only the instance, and stdout/stderr reach the log, bounded.
func TestGoGuest(t *testing.T) {
	path := guesttest.Build(t, "../testdata/goguest")
	h, logs := newTestSandbox(t, Config{MemoryLimit: 32 << 20, CallTimeout: time.Minute, PoolSize: 1, Limits: limits.Handler{CallCPU: limits.Duration(time.Minute)}})
	ctx := context.Background()
	m := mustLoadPath(t, h, path)
	good := mustLoad(t, h, "ok")
	call := func(name string) error { return m.ValidatePlugin(ctx, sandboxtest.Info("go.example", name)) }

	if err := call("fine"); err != nil {
		t.Fatalf("a normal call: %v", err)
	}
	t.Run("panic", func(t *testing.T) {
		sandboxtest.ErrContains(t, call("panic"), ErrTrap, path, "wasmhost_validate", `"panic"`)
		if _, ok := logs.Find("panic: boom from panic"); !ok {
			t.Error("the guest's panic message was not logged")
		}
		if err := call("fine"); err != nil {
			t.Errorf("the call after a panic: %v", err)
		}
		checkOK(t, good)
	})
	t.Run("out of memory", func(t *testing.T) {
		sandboxtest.ErrContains(t, call("oom"), ErrTrap, path)
		if _, ok := logs.Find("out of memory"); !ok {
			t.Error("the guest's out-of-memory message was not logged")
		}
		if err := call("fine"); err != nil {
			t.Errorf("the call after running out of memory: %v", err)
		}
		checkOK(t, good)
	})
	t.Run("output", func(t *testing.T) {
		if err := call("print"); err != nil {
			t.Fatal(err)
		}
		for stream, level := range map[string]string{"stdout": "INFO", "stderr": "WARN"} {
			attrs, ok := logs.Find("hello on " + stream)
			if !ok || attrs["stream"] != stream || attrs["level"] != level || attrs["plugin_type"] != "go.example" || attrs["handler"] != path {
				t.Errorf("%s line logged as %v", stream, attrs)
			}
		}
		// Output over the per-call budget ends the call.
		err := call("spam")
		if !errors.Is(err, ErrBudget) || !errors.Is(err, ErrTrap) || !strings.Contains(err.Error(), "logBytesPerCall") {
			t.Fatalf("spam: %v, want the call ended by the output budget", err)
		}
		limit := int(limits.Defaults().LogBytesPerCall)
		lines := logs.Count(strings.Repeat("x", 100))
		if lines == 0 || lines > limit/4096+1 {
			t.Errorf("%d spam lines logged; want them capped at %d bytes", lines, limit)
		}
		attrs, _ := logs.Find(strings.Repeat("x", 100))
		if attrs["cut"] != "true" {
			t.Errorf("a 10000-byte line was not cut: %v", attrs)
		}
		if err := call("fine"); err != nil {
			t.Errorf("the call after going over the budget: %v", err)
		}
	})
}

// TestSDKExample loads the tutorial handler built with the Go SDK (abi/guest) and runs its
// calls through the host.
func TestSDKExample(t *testing.T) {
	if _, err := os.Stat("../../../examples/handler-go"); err != nil {
		t.Skip("no SDK example:", err)
	}
	path := guesttest.Build(t, "../../../examples/handler-go")
	h, logs := newTestSandbox(t, Config{CallTimeout: time.Minute})
	m := mustLoadPath(t, h, path)
	ctx := context.Background()
	p := registration.PluginInfo{Type: "example.wasmhost.dev", Name: "ex", Endpoint: "/run/ex.sock", Versions: []string{"v1"}}
	if err := m.ValidatePlugin(ctx, p); err != nil {
		t.Fatal(err)
	}
	pub, err := m.RegisterPlugin(ctx, p)
	if err != nil || pub["endpoint"] != p.Endpoint {
		t.Fatalf("RegisterPlugin = %v, %v", pub, err)
	}
	if _, ok := logs.Find("registering ex"); !ok {
		t.Error("the guest's log line is missing")
	}
	if err := m.DeRegisterPlugin(ctx, p); err != nil {
		t.Fatal(err)
	}
	p.Versions = []string{"v0"}
	if err := m.ValidatePlugin(ctx, p); !errors.Is(err, registration.ErrRejected) {
		t.Errorf("ValidatePlugin of an unsupported version = %v, want ErrRejected", err)
	}
}
