package policy

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/internal/host/sandbox"
	"github.com/wasmhost/wasmhost/internal/limits"
	"github.com/wasmhost/wasmhost/internal/logtest"
	"github.com/wasmhost/wasmhost/internal/registration"
)

// newTestLayer returns a policy layer over a sandbox of its own with the tests' defaults (a
// call timeout of 2 s, 2 instances, the log captured); the test's end closes the sandbox. The
// sandbox loads the testdata fixtures in place, allowing insecure files when the checkout made
// them group-writable (umask 002).
func newTestLayer(t testing.TB, q limits.Quarantine) (*Layer, *logtest.Logs) {
	t.Helper()
	l := &logtest.Logs{}
	fi, err := os.Stat(fixture("ok"))
	shared := err != nil || sandbox.CheckNotShared("", "", fi) != nil
	sc, err := sandbox.Config{CallTimeout: 2 * time.Second, PoolSize: 2, AllowInsecure: shared, Logger: slog.New(l)}.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	sb, err := sandbox.New(context.Background(), sc)
	if err != nil {
		t.Fatalf("sandbox.New: %v", err)
	}
	t.Cleanup(func() {
		if err := sb.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return New(sb, Config{Registry: registration.NewRegistry(), Quarantine: &q, PoolSize: sc.PoolSize, Logger: slog.New(l)}), l
}

// fixture is a module of the host's testdata (internal/host/testdata).
func fixture(name string) string { return filepath.Join("..", "testdata", name+".wasm") }

// mustLoad loads a fixture as the host's LoadFile does: a module served through the layer,
// with a quarantine of its own.
func mustLoad(t testing.TB, h *Layer, name string) *sandbox.Module {
	t.Helper()
	if !h.sb.BeginWork() {
		t.Fatal("the sandbox is closed")
	}
	defer h.sb.EndWork()
	bin, err := h.sb.ReadHandlerFile(fixture(name))
	if err != nil {
		t.Fatal(err)
	}
	m, err := h.sb.Load(context.Background(), fixture(name), bin, new(sandbox.Stats))
	if err != nil {
		t.Fatalf("Load(%s): %v", name, err)
	}
	m.SetOwn(h.NewServing(m, nil, nil))
	return m
}
