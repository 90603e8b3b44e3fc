package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wasmhost/wasmhost/internal/config"
	"github.com/wasmhost/wasmhost/internal/oci/ocitest"
	"github.com/wasmhost/wasmhost/internal/reconciler"
	"github.com/wasmhost/wasmhost/internal/registration/registrationtest"
)

// TestE2EHandlersFromRegistry is the operator's story of issue 11: an author pushes the example
// handler signed (wasmhost handler push --sign-key), someone else pushes a module unsigned; the
// daemon, told to serve both by digest and to trust the author's key for example.wasmhost.dev,
// registers an example plugin through the pulled handler and shows the unsigned one refused,
// saying why, in wasmhost handlers. Issue 22: wasmhost status counts the refused source as not
// serving and names it, the handlers table marks its row, and once it is signed by a key
// trusted for its type, wasmhost handlers pull serves it at once.
func TestE2EHandlersFromRegistry(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the example handler")
	}
	t.Parallel()
	reg := ocitest.Start(t)
	dirs := newE2EDirs(t, "/tmp")
	keys := t.TempDir()
	author := ocitest.NewKey(t, keys, "author")
	minKey := ocitest.NewKey(t, keys, "min")

	file := filepath.Join(keys, "example.wasm")
	if err := os.WriteFile(file, exampleWasm(t), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := runRoot(t, "handler", "push", "--sign-key", author.PrivatePEM, file, reg.Ref("wasmhost/example:v1"))
	if err != nil {
		t.Fatalf("push: %v\n%s", err, out)
	}
	pinned := strings.TrimSpace(strings.SplitN(strings.SplitN(out, "pinned: ", 2)[1], "\n", 2)[0])
	minWasm, err := os.ReadFile(filepath.Join("..", "..", "internal", "host", "testdata", "min.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	unsigned := ocitest.PushArtifact(t, reg.Ref("wasmhost/min:v1"), minWasm)

	cfg := e2eConfig(dirs)
	cfg.Handlers.Sources = []string{pinned, unsigned.String()}
	cfg.Handlers.Trust.Keys = []config.TrustKey{
		{PublicKey: author.PublicPEM, PluginTypes: []string{"example.wasmhost.dev"}},
		{PublicKey: minKey.PublicPEM, PluginTypes: []string{"min.example"}},
	}
	// The test waits on the plugin's notification, not on the product's first wait: on a
	// loaded machine under -race, pulling and compiling may take longer than the defaults.
	cfg.Handlers.Pull.FirstWait = config.Duration(e2eWait)
	cfg.Handlers.Pull.Timeout = config.Duration(e2eWait / 2)
	// Nor on its compile timeout: the 2 MB example handler took over a minute to compile
	// with -race while the machine's load was 17 on 2 cores.
	cfg.Handlers.Limits.CompileTimeout = config.Duration(e2eWait)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	rd := startDaemon(t, cfg, testLog(t), nil)

	sock := filepath.Join(dirs.Socket, "demo.sock")
	p := registrationtest.Serve(t, sock, pluginInfo("example.wasmhost.dev", "demo"), registrationtest.Options{})
	wantNotification(t, p, true, "")
	rd.waitState(sock, reconciler.StateRegistered)

	var table string
	waitFor(t, "wasmhost handlers to show both sources", func() bool {
		table, _, err = runClient(t.Context(), "handlers", "--admin-socket", rd.d.AdminSocket(), "-o", "wide")
		return err == nil && strings.Contains(table, pinned) && strings.Contains(table, "plugin type min.example: unsigned")
	})
	for _, line := range strings.Split(table, "\n") {
		if strings.HasPrefix(line, pinned) && (!strings.Contains(line, "example.wasmhost.dev") || strings.Contains(line, "NOT SERVING")) {
			t.Errorf("the pulled handler's row does not serve example.wasmhost.dev:\n%s", table)
		}
		if strings.HasPrefix(line, unsigned.String()) && !strings.Contains(line, "NOT SERVING (policy): ") {
			t.Errorf("the refused source's row is not marked as not serving:\n%s", table)
		}
	}

	// wasmhost status counts it, and names it with why, once the first pull is over (the
	// plugin registered as soon as its handler served, maybe before the gate closed).
	waitFor(t, "the daemon to be ready", func() bool { return rd.d.Ready() == nil })
	status, _, err := runClient(t.Context(), "status", "--admin-socket", rd.d.AdminSocket())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"handlers: 1 serving, 1 source or file not serving\n", "problems:", "1 handler source or file not serving: " + unsigned.String() + " (policy)"} {
		if !strings.Contains(status, want) {
			t.Errorf("wasmhost status lacks %q:\n%s", want, status)
		}
	}

	// Signed since, it is pulled at once by wasmhost handlers pull, which says it serves.
	ocitest.Sign(t, unsigned, minKey)
	pulled, _, err := runClient(t.Context(), "handlers", "pull", "--admin-socket", rd.d.AdminSocket())
	if err != nil || strings.Contains(pulled, "NOT SERVING") || !strings.Contains(pulled, "min.example") {
		t.Errorf("handlers pull: %v\n%s", err, pulled)
	}
	waitFor(t, "wasmhost status to count every handler as serving", func() bool {
		status, _, err = runClient(t.Context(), "status", "--admin-socket", rd.d.AdminSocket())
		return err == nil && strings.Contains(status, "handlers: 2 serving\n") && !strings.Contains(status, "problems:")
	})
}
