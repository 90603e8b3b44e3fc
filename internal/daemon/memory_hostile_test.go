package daemon

// Issue 27 end to end: a handler whose instances each fill 64 MiB, in a running daemon with
// plugins of other types registered.

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/internal/config"
	"github.com/wasmhost/wasmhost/internal/limits"
	"github.com/wasmhost/wasmhost/internal/registration/registrationtest"
)

// residentBytes is the test process's resident set (/proc/self/statm): the daemon's, which
// runs in it.
func residentBytes(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Skipf("no /proc/self/statm: %v", err)
	}
	pages, err := strconv.ParseInt(string(bytes.Fields(b)[1]), 10, 64)
	if err != nil {
		t.Fatalf("/proc/self/statm %q: %v", b, err)
	}
	return pages * int64(os.Getpagesize())
}

// TestHostileMemoryInRunningDaemon: 16 plugins of a type whose handler fills all of its 64 MiB
// of memory (host/testdata/hog.wat) register at once, with handlers.poolSize 16: the idle
// instances over handlers.limits.instanceMemory (500 MiB: 7 of them stay, 448 MiB, and the rest
// is room for what the daemon itself grows by meanwhile) are closed, and the daemon's resident
// memory is back under the ceiling, over what it held before, within seconds; the plugins of the other types stay registered and the daemon ready. The sandbox's
// TestInstanceMemoryHandedBack repeats the shape 20 times.
func TestHostileMemoryInRunningDaemon(t *testing.T) {
	const (
		plugins = 16
		ceiling = 500 << 20
	)
	cfg, _ := testDaemonConfig(t)
	cfg.Reconciler.InitialBackoff = config.Duration(time.Hour) // one attempt each
	cfg.Reconciler.MaxBackoff = config.Duration(time.Hour)
	cfg.Handlers.PoolSize = plugins
	cfg.Handlers.CallTimeout = config.Duration(time.Minute) // filling 64 MiB on a loaded machine
	cfg.Handlers.Limits.CallCPU = limits.Duration(time.Minute)
	cfg.Handlers.Limits.InstanceMemory = ceiling
	installFixtures(t, cfg.HandlerDir, "ok", "reload_v1", "hog")
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	d, exited := startTestDaemon(t, cfg, nil)
	plugin := func(typ, name string) *registrationtest.Plugin {
		return registrationtest.Serve(t, filepath.Join(cfg.SocketDir, name+".sock"), registrationtest.Info{Type: typ, Name: name, Versions: []string{"v1"}}, registrationtest.Options{})
	}
	others := []*registrationtest.Plugin{plugin("ok.example", "a"), plugin("reload.example", "b")}
	for _, p := range others {
		if n := p.WaitNotification(t, hostileWait); !n.Registered {
			t.Fatalf("%s: %+v", p.Path(), n)
		}
	}

	base := residentBytes(t)
	var hogs []*registrationtest.Plugin
	for i := range plugins {
		hogs = append(hogs, plugin("hog.example", fmt.Sprint("hog", i)))
	}
	for _, p := range hogs {
		if n := p.WaitNotification(t, hostileWait); !n.Registered {
			t.Errorf("%s: %+v", p.Path(), n)
		}
	}
	t.Logf("resident: %d MiB before, %d MiB once the %d plugins registered", base>>20, residentBytes(t)>>20, plugins)
	waitResidentUnder(t, base, ceiling)

	checkUnharmed(t, d, exited, others...)
	checkAllRegistered(t, d, plugins+len(others))
}
