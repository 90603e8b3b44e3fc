package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/internal/registration/registrationtest"
	"github.com/wasmhost/wasmhost/internal/testwait"
)

// installFixtures copies the host's test modules (internal/host/testdata/<name>.wasm) into the
// handler directory dir, as the hostile tests start their daemons with them.
func installFixtures(t *testing.T, dir string, names ...string) {
	t.Helper()
	for _, f := range names {
		b, err := os.ReadFile(filepath.Join("..", "host", "testdata", f+".wasm"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f+".wasm"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// checkUnharmed is what every hostile test asks of the daemon once the hostile handler or
// plugin has done its worst: Run has not returned, the daemon is ready, and each plugin of
// others (of the other types) was told once that it registered, and nothing else.
func checkUnharmed(t *testing.T, d *Daemon, exited <-chan struct{}, others ...*registrationtest.Plugin) {
	t.Helper()
	select {
	case <-exited:
		t.Fatal("Run returned")
	default:
	}
	if err := d.Ready(); err != nil {
		t.Errorf("not ready: %v", err)
	}
	for _, p := range others {
		if notes := p.Notifications(); len(notes) != 1 || !notes[0].Registered {
			t.Errorf("%s: notifications %+v", p.Path(), notes)
		}
	}
}

// waitResidentUnder waits, a few seconds at most, until the daemon's resident memory is back
// under ceiling over what it held before (base): the memory of closed instances handed back.
func waitResidentUnder(t *testing.T, base, ceiling int64) {
	t.Helper()
	testwait.UntilWithin(t, 10*time.Second, fmt.Sprintf("the daemon's resident memory back under %d MiB (ceiling) + %d MiB (before), from %d MiB",
		ceiling>>20, base>>20, residentBytes(t)>>20), func() bool { return residentBytes(t) <= base+ceiling })
}

// checkAllRegistered fails unless want plugins are registered, every plugin the daemon knows.
func checkAllRegistered(t *testing.T, d *Daemon, want int) {
	t.Helper()
	regs := 0
	for _, v := range d.State().Plugins() {
		if v.Registered {
			regs++
		}
	}
	if regs != want {
		t.Errorf("%d of the %d plugins registered", regs, want)
	}
}
