package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/testwait"

	"github.com/wasmhost/wasmhost/internal/host/sandbox/sandboxtest"
	"github.com/wasmhost/wasmhost/internal/host/wasmbin"
	"github.com/wasmhost/wasmhost/internal/limits"
)

// The code shapes of a guest call that never ends on its own (testdata/*.wat): each must end at
// its deadline with an error that names the handler and the limit, whatever it does in between.
var endlessShapes = []string{
	"loop",      // a loop
	"calltree",  // a loop-free exponential call tree, 45 deep
	"mutual",    // the same through two functions calling each other
	"indirect",  // the same through call_indirect
	"straight",  // 2,000 instructions of straight-line code at every node of a tree
	"bulk",      // memory.fill and memory.copy of 1 MiB at every node
	"hostcalls", // a host function at every node
}

// TestEveryCodeShapeStopsAtItsDeadline: each endless shape ends at handlers.callTimeout, named,
// counted as a timeout, and the good handler beside it keeps answering.
func TestEveryCodeShapeStopsAtItsDeadline(t *testing.T) {
	h, _ := newTestSandbox(t, Config{CallTimeout: 200 * time.Millisecond})
	good := mustLoad(t, h, "ok")
	for _, shape := range endlessShapes {
		t.Run(shape, func(t *testing.T) {
			m := mustLoad(t, h, shape)
			sandboxtest.NoHang(t, shape, func() {
				err := m.ValidatePlugin(context.Background(), sandboxtest.Info(shape+".example", "p"))
				sandboxtest.ErrContains(t, err, context.DeadlineExceeded, shape+".wasm", "wasmhost_validate", "timed out after 200ms")
			})
			if n := m.stats.timeouts.Load(); n != 1 {
				t.Errorf("%d timeouts counted, want 1", n)
			}
			checkOK(t, good)
		})
	}
}

// TestEveryCodeShapeHonoursCancel: a call canceled by its caller (the daemon shutting down)
// ends at once, whatever its shape, long before its deadline.
func TestEveryCodeShapeHonoursCancel(t *testing.T) {
	h, _ := newTestSandbox(t, Config{CallTimeout: time.Hour})
	for _, shape := range endlessShapes {
		t.Run(shape, func(t *testing.T) {
			m := mustLoad(t, h, shape)
			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			go func() { errc <- m.ValidatePlugin(ctx, sandboxtest.Info(shape+".example", "p")) }()
			testwait.Until(t, "the call to run", func() bool { return m.sb.gate.account(shape+".example").cpu.Load() > 0 })
			cancel()
			sandboxtest.NoHang(t, shape, func() { sandboxtest.ErrContains(t, <-errc, context.Canceled, "canceled") })
		})
	}
}

// TestGuestCallsDoNotStopTheWorld: a garbage collection (whose stop-the-world waits for every
// goroutine to reach a point where it may be preempted) completes while endless calls of every
// shape run; before the ticks, it waited for the call to end.
func TestGuestCallsDoNotStopTheWorld(t *testing.T) {
	h, _ := newTestSandbox(t, Config{CallTimeout: time.Hour, PoolSize: 1, Limits: limits.Handler{GuestThreads: len(endlessShapes), CallCPU: limits.Duration(time.Hour)}})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, len(endlessShapes))
	for _, shape := range endlessShapes {
		m := mustLoad(t, h, shape)
		go func() { errc <- m.ValidatePlugin(ctx, sandboxtest.Info(shape+".example", "p")) }()
		testwait.Until(t, shape+" to run", func() bool { return h.gate.account(shape+".example").cpu.Load() > 0 })
	}
	sandboxtest.NoHang(t, "runtime.GC", func() {
		for range 3 {
			runtime.GC()
		}
	})
	cancel()
	for range endlessShapes {
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Errorf("want canceled, got %v", err)
		}
	}
}

// TestCPUBudget: a call over handlers.limits.callCPU ends, named, before its deadline.
func TestCPUBudget(t *testing.T) {
	h, _ := newTestSandbox(t, Config{CallTimeout: time.Hour, Limits: limits.Handler{CallCPU: limits.Duration(50 * time.Millisecond)}})
	m := mustLoad(t, h, "calltree")
	sandboxtest.NoHang(t, "calltree", func() {
		err := m.ValidatePlugin(context.Background(), sandboxtest.Info("calltree.example", "p"))
		sandboxtest.ErrContains(t, err, ErrCPUBudget, "calltree.wasm", "used more than 50ms of CPU (handlers.limits.callCPU)")
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("a CPU budget error does not match context.DeadlineExceeded: %v", err)
		}
	})
	if cpu := time.Duration(h.gate.account("calltree.example").cpu.Load()); cpu < 50*time.Millisecond {
		t.Errorf("%v of CPU counted for the type, want at least the budget", cpu)
	}
}

// TestWideFramesCountTowardTheCallStack: a frame that keeps 1,000 values live across its call
// counts them, so the bound traps (named) long before wazero's own stack reaches its 50 MB
// ceiling, which a frame counted by its parameters alone let it reach (as "stack overflow").
func TestWideFramesCountTowardTheCallStack(t *testing.T) {
	h, _ := newTestSandbox(t, Config{})
	m := mustLoad(t, h, "wide")
	sandboxtest.ErrContains(t, m.ValidatePlugin(context.Background(), sandboxtest.Info("wide.example", "p")), ErrTrap,
		"call stack over 1048576 bytes (handlers.limits.maxCallStack)")
}

// TestFIFOInTheCompileCache: a FIFO in the compile cache is removed before the next compile
// (wazero's read of it blocked every later compile); one in place of a kept revision: the
// host's TestFIFOsInTheDaemonsOwnFiles.
func TestFIFOInTheCompileCache(t *testing.T) {
	cache := sandboxtest.TempDir(t)
	h, _ := newTestSandbox(t, Config{CacheDir: cache})
	mustLoad(t, h, "ok")
	dirs, _ := filepath.Glob(filepath.Join(cache, moduleCacheDir, "*", "wazero-*"))
	if len(dirs) == 0 {
		t.Fatal("no compile cache directory")
	}
	var fifo string // a compiled module in the cache, replaced by a FIFO
	_ = filepath.WalkDir(dirs[0], func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			fifo = p
		}
		return nil
	})
	if fifo == "" || os.Remove(fifo) != nil {
		t.Fatalf("no compiled module in %s", dirs[0])
	}
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	h2, _ := newTestSandbox(t, Config{CacheDir: cache})
	sandboxtest.NoHang(t, "a load with a FIFO in the compile cache", func() { mustLoad(t, h2, "ok") })
	if fi, err := os.Lstat(fifo); err == nil && !fi.Mode().IsRegular() {
		t.Errorf("the FIFO is still in the compile cache: %v", fi.Mode())
	}
}

// TestTheRewriteIsNotAWayIn: the module's own code may not reach what the rewrite adds (the
// counters are globals after the module's own, the yield a function import): an index past
// the module's own is refused before the rewrite would make it valid, and so is an import
// from the host's reserved module.
func TestTheRewriteIsNotAWayIn(t *testing.T) {
	h, _ := newTestSandbox(t, Config{})
	module := func(sections ...[]byte) []byte {
		b := append([]byte(nil), wasmbin.Header...)
		for _, s := range sections {
			b = append(b, s...)
		}
		return b
	}
	types := []byte{1, 4, 1, 0x60, 0, 0} // type 0: [] -> []
	funcs := []byte{3, 2, 1, 0}          // function 0: type 0
	code := func(body ...byte) []byte {
		fb := append([]byte{0}, body...) // no locals
		fb = append(fb, 0x0b)
		return append([]byte{10, byte(len(fb) + 2), 1, byte(len(fb))}, fb...)
	}
	for name, c := range map[string]struct {
		bin  []byte
		want string
	}{
		"sets the counter":   {module(types, funcs, code(0x41, 0x7f, 0x24, 0x00)), "global.set of global 0, which the module does not have"},
		"reads the fuel":     {module(types, funcs, code(0x23, 0x00, 0x1a)), "global.get of global 0, which the module does not have"},
		"calls the yield":    {module(types, funcs, code(0x10, 0x01)), "call of function 1, which the module does not have"},
		"exports the global": {module(types, funcs, []byte{7, 5, 1, 1, 'g', 3, 0}, code()), `export "g" names global 0, which the module does not have`},
		"imports the yield": {module([]byte{1, 5, 1, 0x60, 0, 1, 0x7f}, []byte{2, 26, 1, 16}, []byte(wasmbin.SandboxModule), []byte{5}, []byte(wasmbin.SandboxYield), []byte{0, 0}),
			"imports from wasmhost_sandbox, a module name the host reserves"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := h.Load(context.Background(), "x.wasm", c.bin, &Stats{})
			if !errors.Is(err, ErrBadModule) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("load: %v, want a refusal with %q", err, c.want)
			}
		})
	}
}

// TestRecursionInInitialize: a module whose _initialize recurses without end is refused with
// the call-stack bound named, as a call's would be.
func TestRecursionInInitialize(t *testing.T) {
	h, _ := newTestSandbox(t, Config{})
	_, err := loadFile(h, context.Background(), fixture("initrecurse"))
	sandboxtest.ErrContains(t, err, ErrBadModule, "initrecurse.wasm", "_initialize", "call stack over 1048576 bytes (handlers.limits.maxCallStack)")
}

// TestInstanceMemoryCeiling: instances that grew their memory are closed once idle when they
// hold more than handlers.limits.instanceMemory together, whatever the pool size.
func TestInstanceMemoryCeiling(t *testing.T) {
	h, _ := newTestSandbox(t, Config{MemoryLimit: 2 << 20, PoolSize: 8, Limits: limits.Handler{InstanceMemory: 5 << 20}})
	m := mustLoad(t, h, "grow")
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			if err := m.ValidatePlugin(context.Background(), sandboxtest.Info("grow.example", fmt.Sprint(i))); !errors.Is(err, registration.ErrRejected) {
				t.Errorf("grow: %v", err)
			}
		})
	}
	wg.Wait()
	if used := h.memoryUsed(); used > 5<<20 {
		t.Errorf("idle instances hold %d bytes, over the ceiling of %d", used, 5<<20)
	}
	if n := len(m.slots); n > 2 {
		t.Errorf("%d instances of 2 MiB alive, want at most 2 under a 5 MiB ceiling", n)
	}
}
