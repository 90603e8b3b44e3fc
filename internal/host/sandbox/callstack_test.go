package sandbox

import (
	"bytes"
	"context"
	"errors"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"

	"github.com/wasmhost/wasmhost/abi/guest/guesttest"

	"github.com/wasmhost/wasmhost/internal/host/sandbox/sandboxtest"
	"github.com/wasmhost/wasmhost/internal/host/wasmbin"
	"github.com/wasmhost/wasmhost/internal/limits"
)

// TestCallStackBound: a guest that recurses without end, directly or through a table, traps on
// handlers.limits.maxCallStack, named as such, and costs only its instance: the next call gets
// a fresh one and another handler is not affected.
func TestCallStackBound(t *testing.T) {
	h, _ := newTestSandbox(t, Config{})
	m := mustLoad(t, h, "recurse")
	good := mustLoad(t, h, "ok")
	ctx := context.Background()
	p := sandboxtest.Info("recurse.example", "p")
	for range 2 {
		sandboxtest.ErrContains(t, m.ValidatePlugin(ctx, p), ErrTrap, "recurse.wasm", "wasmhost_validate",
			"call stack over 1048576 bytes (handlers.limits.maxCallStack)")
		_, err := m.RegisterPlugin(ctx, p)
		sandboxtest.ErrContains(t, err, ErrTrap, "wasmhost_register", "handlers.limits.maxCallStack")
	}
	if err := m.DeRegisterPlugin(ctx, p); err != nil {
		t.Errorf("deregister, which does not recurse: %v", err)
	}
	checkOK(t, good)
}

// TestCallStackBoundLeavesGoGuests: a Go guest keeps its goroutine stacks in its linear
// memory, so its calls run far under the default bound of 1 MiB, here with 8 KiB of call stack
// (4 KiB was enough until the runtime found GOGC in its environment: reading it at start
// takes a few frames more).
func TestCallStackBoundLeavesGoGuests(t *testing.T) {
	path := guesttest.Build(t, "../testdata/goguest")
	h, _ := newTestSandbox(t, Config{MemoryLimit: 32 << 20, CallTimeout: time.Minute, PoolSize: 1, Limits: limits.Handler{MaxCallStack: 8 << 10}})
	m := mustLoadPath(t, h, path)
	if err := m.ValidatePlugin(context.Background(), sandboxtest.Info("go.example", "fine")); err != nil {
		t.Fatal(err)
	}
}

// TestGuardCallStack checks the rewrite itself: the module still compiles and exports the
// counter, a module that exports the counter's name is refused, and DWARF sections, whose
// offsets the rewrite invalidates, are dropped while other custom sections stay.
func TestGuardCallStack(t *testing.T) {
	ctx := context.Background()
	src, err := os.ReadFile(fixture("ok"))
	if err != nil {
		t.Fatal(err)
	}
	custom := func(name string, body []byte) []byte {
		b := append([]byte{byte(len(name))}, name...)
		b = append(b, body...)
		return append([]byte{0, byte(len(b))}, b...)
	}
	withCustom := append(append(bytes.Clone(src), custom(".debug_info", []byte("xyz"))...), custom("keep.me", []byte("abc"))...)
	out, err := wasmbin.Instrument(withCustom, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(out, []byte(".debug_info")) || !bytes.Contains(out, []byte("keep.me")) {
		t.Error("want .debug_info dropped and keep.me kept")
	}
	rt := wazero.NewRuntime(ctx)
	defer rt.Close(ctx)
	cm, err := rt.CompileModule(ctx, out)
	if err != nil {
		t.Fatalf("the rewritten module does not compile: %v", err)
	}
	if _, ok := cm.ExportedFunctions()["wasmhost_validate"]; !ok {
		t.Error("the module's own exports are gone")
	}
	if unbounded, err := wasmbin.Instrument(src, 0); err != nil || bytes.Contains(unbounded, []byte(wasmbin.CallStackExport)) {
		t.Errorf("with no bound, want no call-stack counter: %v", err)
	}

	// The counter comes after the globals a module imports: here an immutable one, which the
	// rewritten code could not set, so that the module compiles only if the index is right.
	// (The host refuses imported globals and memories later, with its own message.)
	importing := []byte{0, 'a', 's', 'm', 1, 0, 0, 0,
		1, 4, 1, 0x60, 0, 0, // type 0: [] -> []
		2, 15, 2, 1, 'e', 1, 'g', 3, 0x7f, 0, 1, 'e', 1, 'm', 2, 0, 1, // global i32, memory 1
		3, 2, 1, 0, // function 0: type 0
		10, 6, 1, 4, 0, 0x10, 0, 0x0b} // calls itself
	if _, err := rt.CompileModule(ctx, importing); err != nil {
		t.Fatalf("the module as written: %v", err)
	}
	out, err = wasmbin.Instrument(importing, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.CompileModule(ctx, out); err != nil {
		t.Errorf("rewritten, a module importing a global does not compile: %v", err)
	}

	// A module exporting the counter's name is refused at load, as an ABI fault.
	h, _ := newTestSandbox(t, Config{})
	exporting := guardedTwice(t, src)
	_, err = h.Load(ctx, "twice.wasm", exporting, &Stats{})
	if RefusalReason(err) != RefusedABI || !errors.Is(err, ErrBadModule) {
		t.Errorf("a module exporting %s: %v", wasmbin.CallStackExport, err)
	}
}

// guardedTwice is a module that exports wasmbin.CallStackExport already.
func guardedTwice(t *testing.T, src []byte) []byte {
	t.Helper()
	once, err := wasmbin.Instrument(src, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wasmbin.Instrument(once, 1<<20); !errors.Is(err, wasmbin.ErrReservedExport) && !errors.Is(err, wasmbin.ErrReservedImport) {
		t.Fatalf("guarding twice: %v", err)
	}
	return once
}

// BenchmarkRecursion measures what a call that recurses without end allocates before it
// fails: with the default bound, and with the bound out of the way (wazero's own stack grows
// to its 50 MB ceiling). docs/benchmarks.md records the figures.
func BenchmarkRecursion(b *testing.B) {
	for _, bc := range []struct {
		name  string
		limit int64
	}{{"bound=1Mi", 1 << 20}, {"unbounded", 1<<31 - 1}} {
		b.Run(bc.name, func(b *testing.B) {
			h, _ := newTestSandbox(b, Config{PoolSize: 1, Limits: limits.Handler{MaxCallStack: limits.ByteSize(bc.limit)}})
			m := mustLoad(b, h, "recurse")
			p := sandboxtest.Info("recurse.example", "p")
			runtime.GC()
			b.ReportAllocs()
			for b.Loop() {
				if err := m.ValidatePlugin(context.Background(), p); !errors.Is(err, ErrTrap) {
					b.Fatal(err)
				}
			}
		})
	}
}
