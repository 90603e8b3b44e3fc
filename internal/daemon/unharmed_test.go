package daemon

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/wasmhost/wasmhost/internal/registration/registrationtest"
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
