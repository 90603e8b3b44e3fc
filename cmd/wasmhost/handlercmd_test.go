package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/conformance"
	"github.com/wasmhost/wasmhost/internal/config"
	"github.com/wasmhost/wasmhost/internal/daemon"
	"github.com/wasmhost/wasmhost/internal/doctest"
	"github.com/wasmhost/wasmhost/internal/testwait"
)

// handlerCmdRun runs `wasmhost <args>` through newRootCmd and returns its standard output and
// error.
func handlerCmdRun(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRootCmd()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	err := root.ExecuteContext(ctx)
	return out.String() + errOut.String(), err
}

// handlerCmdDir returns a new private temporary directory with a compile cache in it, removed
// when t ends.
func handlerCmdDir(t *testing.T) (dir, cache string) {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "wh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir, filepath.Join(dir, "cache")
}

// handlerCmdCopy copies a module of the repository into dir with mode 0644, as an operator
// would install it (a checkout may be group-writable, which the daemon refuses).
func handlerCmdCopy(t *testing.T, dir, src string) string {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, filepath.Base(src))
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dst, 0o644); err != nil {
		t.Fatal(err)
	}
	return dst
}

func handlerCmdWant(t *testing.T, out string, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(out, p) {
			t.Errorf("output lacks %q:\n%s", p, out)
		}
	}
}

func TestHandlerTestCommand(t *testing.T) {
	dir, cache := handlerCmdDir(t)
	minimal := handlerCmdCopy(t, dir, "../../abi/testdata/minimal.wasm")
	kit := handlerCmdCopy(t, dir, "../../conformance/testdata/handler.wasm")

	// A module of one type: --type defaults to it; every call accepted.
	out, err := handlerCmdRun(t, "handler", "test", minimal, "--name", "demo", "--versions", "v1", "--cache-dir", cache)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	handlerCmdWant(t, out,
		"handler   "+minimal+": minimal, ABI v1, 315 bytes",
		`plugin    example.wasmhost.dev/minimal "demo", versions ["v1"]`,
		"socket   /var/lib/wasmhost/plugins_registry/demo-reg.sock",
		"sandbox   timeout 5s, memory 64Mi, grants []",
		"\nvalidate    ok  ",
		"\nregister    ok  ",
		"  log       INFO registered\n",
		"\nderegister  ok  ",
		"PASS: validate, register and deregister accepted the plugin")

	// Store and published keys, after each call.
	out, err = handlerCmdRun(t, "handler", "test", kit, "--name", "p", "--versions", "v1", "--socket", "/r/p-reg.sock",
		"--endpoint", "/r/p.sock", "--cache-dir", cache)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	handlerCmdWant(t, out, "endpoint /r/p.sock", "  published k = v\n", "  store     \n", "  store     (empty)\n")

	// A refusal fails the test, and stops as the daemon does; --expect-reject turns it round.
	out, err = handlerCmdRun(t, "handler", "test", kit, "--name", "p", "--versions", "v0", "--cache-dir", cache)
	if !errors.Is(err, errHandlerFailed) || err.Error() != "handler test failed: validate rejected the plugin" {
		t.Errorf("refused plugin: %v", err)
	}
	handlerCmdWant(t, out, "validate    rejected", "  reason    refused\n", "(not called: register, deregister;", "FAIL: validate rejected the plugin")
	if strings.Contains(out, "\nregister") {
		t.Errorf("register called after a refusal:\n%s", out)
	}
	if out, err = handlerCmdRun(t, "handler", "test", kit, "--name", "p", "--versions", "v0", "--expect-reject", "--cache-dir", cache); err != nil {
		t.Errorf("--expect-reject of a refused plugin: %v\n%s", err, out)
	}
	handlerCmdWant(t, out, "PASS: validate refused the plugin, as expected")
	if _, err = handlerCmdRun(t, "handler", "test", kit, "--name", "p", "--versions", "v1", "--expect-reject", "--cache-dir", cache); err == nil ||
		!strings.Contains(err.Error(), "validate accepted the plugin, want it rejected") {
		t.Errorf("--expect-reject of an accepted plugin: %v", err)
	}

	// -o json.
	out, err = handlerCmdRun(t, "handler", "test", kit, "--name", "p", "--versions", "v1", "-o", "json", "--cache-dir", cache)
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Manifest struct{ Name string }
		Plugin   struct {
			Type     string
			Versions []string `json:"supportedVersions"`
		}
		Load  struct{ Result string }
		Calls []struct {
			Op, Result string
			Published  map[string]string
			Store      map[string]string
			Duration   int64 `json:"durationNanoseconds"`
		}
		Passed bool
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !v.Passed || v.Manifest.Name != "good" || v.Plugin.Type != "conformance.example" || v.Load.Result != "ok" || len(v.Calls) != 3 {
		t.Fatalf("json %+v", v)
	}
	if c := v.Calls[1]; c.Op != "register" || c.Result != "ok" || c.Published["k"] != "v" || len(c.Store) != 1 || c.Duration <= 0 {
		t.Errorf("register in json: %+v", c)
	}
	for k, val := range v.Calls[1].Store {
		if b, err := base64.StdEncoding.DecodeString(val); err != nil || string(b) != "1" || !strings.Contains(k, "conformance.example") {
			t.Errorf("store %q = %q (%v)", k, val, err)
		}
	}

	// Mistakes in the flags and files.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{kit, "--grant", "net"}, `--grant "net": unknown capability (known: plugin_call)`},
		{[]string{kit, "-o", "xml"}, `--output "xml": want text, json, yaml`},
		{[]string{kit, "--name", ""}, "--name must not be empty"},
		{[]string{kit, "--name", "a\nb"}, "the daemon would refuse this plugin before any handler"},
		{[]string{kit, "--timeout", "0s"}, "--timeout 0s: must be positive"},
		{[]string{kit, "--call-fixture", filepath.Join(dir, "missing.yaml")}, "no such file"},
		{[]string{"../../abi/testdata/minimal.wat"}, "is not a WebAssembly module: it is WebAssembly text"},
		{[]string{filepath.Join(dir, "missing.wasm")}, "no such file"},
	} {
		out, err := handlerCmdRun(t, append([]string{"handler", "test", "--cache-dir", cache}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("handler test %q: %v, want %q\n%s", tc.args, err, tc.want, out)
		}
	}
}

// plugin_call: refused at load without the grant, answered from a fixture with it.
func TestHandlerTestCommandFixture(t *testing.T) {
	dir, cache := handlerCmdDir(t)
	ungranted := handlerCmdCopy(t, dir, "../../internal/host/testdata/ungranted.wasm") // validate calls /svc/Ping and rejects with the answer
	fixture := filepath.Join(dir, "fixture.yaml")
	if err := os.WriteFile(fixture, []byte("/svc/Ping:\n  response: "+base64.StdEncoding.EncodeToString([]byte("pong"))+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	failing := filepath.Join(dir, "failing.json")
	if err := os.WriteFile(failing, []byte(`{"/svc/Ping": {"error": {"code": "Unavailable", "message": "driver not ready"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}

	out, err := handlerCmdRun(t, "handler", "test", ungranted, "--name", "p", "--cache-dir", cache)
	if err == nil {
		t.Fatal("loaded without the grant")
	}
	handlerCmdWant(t, out, "load      error  host: bad module", "not granted", "hint: here, grant it with --grant plugin_call",
		"hint: the operator grants it in the daemon's config: handlers.types.plain.example.capabilities: [plugin_call]")

	out, _ = handlerCmdRun(t, "handler", "test", ungranted, "--name", "p", "--endpoint", "/r/p.sock", "--grant", "plugin_call", "--call-fixture", fixture, "--cache-dir", cache)
	handlerCmdWant(t, out, "grants [\"plugin_call\"], plugin_call answered from "+fixture,
		"validate    rejected", "  reason    pong\n", "  plugin_call /svc/Ping on /r/p.sock: 4 bytes\n")

	out, _ = handlerCmdRun(t, "handler", "test", ungranted, "--name", "p", "--grant", "plugin_call", "--call-fixture", failing, "--cache-dir", cache)
	handlerCmdWant(t, out, "validate    error", "rpc error: code = Unavailable desc = driver not ready")

	// The grant may come from the daemon's config instead.
	cfg := filepath.Join(dir, "wasmhost.yaml")
	if err := os.WriteFile(cfg, []byte(configHeader+"handlers:\n  callTimeout: 2s\n  types:\n    plain.example:\n      capabilities: [plugin_call]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _ = handlerCmdRun(t, "handler", "test", ungranted, "--name", "p", "--config", cfg, "--call-fixture", fixture, "--cache-dir", cache)
	handlerCmdWant(t, out, "timeout 2s, memory 64Mi, grants [\"plugin_call\"]", "  reason    pong\n")
}

func TestHandlerInspectCommand(t *testing.T) {
	dir, cache := handlerCmdDir(t)
	minimal := handlerCmdCopy(t, dir, "../../abi/testdata/minimal.wasm")
	ungranted := handlerCmdCopy(t, dir, "../../internal/host/testdata/ungranted.wasm")

	out, err := handlerCmdRun(t, "handler", "inspect", minimal, "--cache-dir", cache)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	handlerCmdWant(t, out,
		"size          315 bytes\n",
		"abi version   1\n",
		"plugin types  example.wasmhost.dev/minimal\n",
		"name          minimal\n",
		"capabilities  none\n",
		"exports (6)\n",
		"  wasmhost_validate     function  (i32) -> (i32)\n",
		"  memory                memory    min 1 pages, no max\n",
		"imports (2)\n",
		"  wasmhost.log         function  (i32, i32, i32) -> ()\n",
		"config    (defaults: no capability granted)\n",
		"daemon    ok: this daemon would load it\n")

	out, err = handlerCmdRun(t, "handler", "inspect", ungranted, "--cache-dir", cache)
	if !errors.Is(err, errHandlerFailed) {
		t.Errorf("inspect of a module this daemon refuses: %v", err)
	}
	handlerCmdWant(t, out,
		"capabilities  plugin_call\n",
		"wasmhost.plugin_call  function  (i32, i32, i32, i32, i32, i32) -> (i32)  (needs plugin_call)\n",
		"daemon    REFUSED: host: bad module "+ungranted+": imports wasmhost.plugin_call which is not granted",
		"hint: the operator grants it in the daemon's config: handlers.types.plain.example.capabilities: [plugin_call]")

	cfg := filepath.Join(dir, "wasmhost.yaml")
	if err := os.WriteFile(cfg, []byte(configHeader+"handlers:\n  types:\n    plain.example:\n      capabilities: [plugin_call]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err = handlerCmdRun(t, "handler", "inspect", ungranted, "--config", cfg, "-o", "json", "--cache-dir", cache)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var v struct {
		ABIVersion   uint32 `json:"abiVersion"`
		Capabilities []string
		Imports      []struct{ Module, Name, Signature, Capability string }
		Exports      []struct{ Name, Kind, Signature string }
		Loads        bool
		Config       string
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if v.ABIVersion != 1 || !v.Loads || v.Config != cfg || len(v.Capabilities) != 1 || len(v.Imports) != 3 ||
		v.Imports[2].Capability != "plugin_call" || len(v.Exports) != 6 {
		t.Errorf("json %+v", v)
	}
	// -o yaml says the same, with the same keys.
	yamlOut, err := handlerCmdRun(t, "handler", "inspect", ungranted, "--config", cfg, "-o", "yaml", "--cache-dir", cache)
	if err != nil {
		t.Fatalf("%v\n%s", err, yamlOut)
	}
	sameDocument(t, out, yamlOut)
	if !strings.Contains(yamlOut, "\nabiVersion: 1\n") || !strings.Contains(yamlOut, "\n  - module: wasmhost\n") {
		t.Errorf("handler inspect -o yaml:\n%s", yamlOut)
	}

	// The memory limit of the config applies; modules that are not handlers say why.
	small := filepath.Join(dir, "small.yaml")
	if err := os.WriteFile(small, []byte(configHeader+"handlers:\n  memoryLimit: 64Ki\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bigmem := handlerCmdCopy(t, dir, "../../internal/host/testdata/bigmem.wasm")
	out, _ = handlerCmdRun(t, "handler", "inspect", bigmem, "--config", small, "--cache-dir", cache)
	handlerCmdWant(t, out, "REFUSED: host: bad module", "memory minimum", "hint: raise handlers.memoryLimit")

	self, err := os.Executable() // the test binary: a native executable
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ file, want string }{
		{self, "is not a WebAssembly module: it is a native executable: build the handler with GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared"},
		{handlerCmdCopy(t, dir, "../../internal/host/testdata/notwasm.wasm"), "not a WebAssembly binary module"},
		{filepath.Join(dir, "missing.wasm"), "no such file"},
		{dir, "is not a regular file"},
	} {
		out, err := handlerCmdRun(t, "handler", "inspect", tc.file, "--cache-dir", cache)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("inspect %s: %v, want %q\n%s", tc.file, err, tc.want, out)
		}
	}
}

// TestWalkthrough performs the steps of examples/handler-walkthrough/README.md, from building
// the handler to seeing its plugin registered by a running daemon, and checks what the README
// shows. The daemon runs in-process (newDaemon); the example plugin runs as a process.
func TestWalkthrough(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a Go handler module and the example plugin, and runs a daemon")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command in PATH")
	}
	base, _ := handlerCmdDir(t)
	run := filepath.Join(base, "run")
	sockets, handlers, state := filepath.Join(run, "plugins_registry"), filepath.Join(run, "handlers"), filepath.Join(run, "state")
	for _, d := range []struct {
		dir  string
		mode os.FileMode
	}{{run, 0o755}, {sockets, 0o755}, {handlers, 0o755}, {state, 0o700}} { // install -d -m ...
		if err := os.Mkdir(d.dir, d.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d.dir, d.mode); err != nil {
			t.Fatal(err)
		}
	}
	cache := filepath.Join(state, "cache") // the daemon's: it loads what the steps compiled
	goBuild := func(out, pkg string, wasm bool) {
		t.Helper()
		args := []string{"build", "-o", out, pkg}
		cmd := exec.Command(gobin, args...)
		if wasm {
			cmd = exec.Command(gobin, "build", "-buildmode=c-shared", "-trimpath", "-ldflags=-s -w", "-o", out, pkg)
			cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
		}
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, b)
		}
		if err := os.Chmod(out, 0o755); err != nil {
			t.Fatal(err)
		}
	}

	// Step 2: build.
	wasm := filepath.Join(base, "sensors.wasm")
	goBuild(wasm, "../../examples/handler-walkthrough", true)
	if err := os.Chmod(wasm, 0o644); err != nil {
		t.Fatal(err)
	}

	// Step 3: handler test, accepted and refused.
	out, err := handlerCmdRun(t, "handler", "test", wasm, "--name", "thermal-1", "--versions", "v1beta1,v1", "--cache-dir", cache)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	handlerCmdWant(t, out,
		": sensors 0.1.0, ABI v1,",
		`plugin    sensors.example.com "thermal-1", versions ["v1beta1", "v1"]`,
		"\nvalidate    ok  ",
		"  log       INFO registered sensor plugin thermal-1 (API v1) at /var/lib/wasmhost/plugins_registry/thermal-1-reg.sock\n",
		"  published api      = v1\n",
		"            endpoint = /var/lib/wasmhost/plugins_registry/thermal-1-reg.sock\n",
		`  store     sensor/thermal-1 = "\n5/var/lib/wasmhost/plugins_registry/thermal-1-reg.sock\x12\x02v1"`,
		"  log       INFO deregistered sensor plugin thermal-1\n",
		"PASS: validate, register and deregister accepted the plugin\n")
	out, err = handlerCmdRun(t, "handler", "test", wasm, "--name", "legacy-1", "--versions", "v0", "--expect-reject", "--cache-dir", cache)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	handlerCmdWant(t, out, "validate    rejected", "  reason    sensor plugin legacy-1 speaks none of v1, v1beta1\n",
		"PASS: validate refused the plugin, as expected\n")

	// Step 4: the conformance kit, as examples/handler-walkthrough/conformance_test.go runs it.
	results, err := conformance.Check(t.Context(), wasm, conformance.Options{
		PluginType: "sensors.example.com",
		Valid:      conformance.Plugin{Name: "thermal-1", Versions: []string{"v1"}},
		Invalid:    []conformance.Plugin{{Name: "legacy-1", Versions: []string{"v0"}}},
		CacheDir:   cache,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		if r.Problem != "" {
			t.Errorf("conformance %s: %s", r.Name, r.Problem)
		}
	}

	// Step 5: inspect.
	out, err = handlerCmdRun(t, "handler", "inspect", wasm, "--cache-dir", cache)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	handlerCmdWant(t, out, "abi version   1\n", "plugin types  sensors.example.com\n", "name          sensors\n",
		"capabilities  none\n", "daemon    ok: this daemon would load it\n")

	// Step 6: a daemon, the handler dropped into its handler directory.
	cfg := config.Default()
	cfg.SocketDir, cfg.HandlerDir, cfg.StateDir = sockets, handlers, state
	cfg.Metrics.Listen = "off"
	var logBuf lockedBuffer
	d, err := daemon.New(context.Background(), cfg, slog.New(slog.NewTextHandler(&logBuf, &slog.HandlerOptions{Level: slog.LevelDebug})), "v0.0.0-test")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("daemon run: %v", err)
			}
		case <-time.After(2 * time.Minute):
			t.Error("daemon run did not return within 2m of its context being cancelled")
		}
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("daemon log:\n%s", logBuf.String())
		}
	})
	b, err := os.ReadFile(wasm)
	if err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(base, "sensors.wasm.tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(tmp, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(handlers, "sensors.wasm")); err != nil { // install -m 0644
		t.Fatal(err)
	}

	// Step 7: the example plugin, of our type.
	pluginBin := filepath.Join(base, "plugin")
	goBuild(pluginBin, "../../examples/plugin", false)
	var pluginLog lockedBuffer
	plugin := exec.Command(pluginBin, "--socket-dir", sockets, "--type", "sensors.example.com", "--name", "thermal-1", "--versions", "v1beta1,v1")
	plugin.Stdout, plugin.Stderr = &pluginLog, &pluginLog
	if err := plugin.Start(); err != nil {
		t.Fatal(err)
	}
	pluginDone := make(chan error, 1)
	go func() { pluginDone <- plugin.Wait() }()
	pluginExited := false
	t.Cleanup(func() {
		if !pluginExited {
			_ = plugin.Process.Kill()
			<-pluginDone
		}
		if t.Failed() {
			t.Logf("plugin log:\n%s", pluginLog.String())
		}
	})

	// Step 8: wasmhost plugins shows it registered, with what the handler published.
	admin := filepath.Join(state, "admin.sock")
	poll := func(what string, cond func() bool) {
		t.Helper()
		testwait.Until(t, what, cond)
	}
	poll("the plugin to be registered", func() bool {
		out, err = handlerCmdRun(t, "plugins", "--admin-socket", admin)
		// The STATE column: "no handler registered for …" in LAST-ERROR is not it (the
		// handler may still be compiling when the plugin starts).
		lines := strings.Split(strings.TrimSpace(out), "\n")
		return err == nil && len(lines) == 2 && len(strings.Fields(lines[1])) > 3 && strings.Fields(lines[1])[3] == "registered"
	})
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !slices.Equal(strings.Fields(lines[0])[:6], []string{"SOCKET", "TYPE", "NAME", "STATE", "VERSIONS", "AGE"}) ||
		!slices.Equal(strings.Fields(lines[1])[:5], []string{"thermal-1.sock", "sensors.example.com", "thermal-1", "registered", "v1beta1,v1"}) {
		t.Errorf("wasmhost plugins:\n%s", out)
	}
	out, err = handlerCmdRun(t, "plugins", "--admin-socket", admin, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var listed []struct {
		State     string
		Published map[string]string
	}
	if err := json.Unmarshal([]byte(out), &listed); err != nil || len(listed) != 1 || listed[0].State != "registered" || listed[0].Published["api"] != "v1" {
		t.Errorf("wasmhost plugins -o json: %v\n%s", err, out)
	}

	// The walkthrough's step 9: capture the registration, replay it, diff, bench.
	sessions := filepath.Join(base, "sessions")
	if out, err = handlerCmdRun(t, "plugins", "capture", "thermal-1", "-o", sessions, "--admin-socket", admin); err != nil {
		t.Fatalf("plugins capture: %v\n%s", err, out)
	}
	sess := filepath.Join(sessions, "sensors.example.com-thermal-1.yaml")
	out, err = handlerCmdRun(t, "handler", "test", wasm, "--replay", sess, "--cache-dir", cache)
	if err != nil {
		t.Fatalf("handler test --replay: %v\n%s", err, out)
	}
	handlerCmdWant(t, out, "\nvalidate    ok  ", "\nregister    ok  ", "PASS: the module did what the session "+sess+" recorded\n")
	if out, err = handlerCmdRun(t, "handler", "diff", wasm, wasm, sess, "--cache-dir", cache); err != nil || !strings.Contains(out, "0 of 1 sessions changed") {
		t.Errorf("handler diff: %v\n%s", err, out)
	}
	if out, err = handlerCmdRun(t, "handler", "bench", wasm, "--replay", sess, "--duration", "200ms"); err != nil || !strings.Contains(out, "calls/s") {
		t.Errorf("handler bench: %v\n%s", err, out)
	}

	// Step 9: the plugin stops (Ctrl-C): it removes its socket, and the daemon deregisters it.
	if err := plugin.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err = <-pluginDone
	pluginExited = true
	if err != nil {
		t.Errorf("plugin exit: %v", err)
	}
	poll("the plugin to be gone", func() bool {
		out, err = handlerCmdRun(t, "plugins", "--admin-socket", admin)
		return err == nil && strings.Contains(out, "No plugin sockets found.")
	})
	poll("the handler's deregister log line", func() bool {
		return strings.Contains(logBuf.String(), "deregistered sensor plugin thermal-1")
	})
	stop()
}

// TestHandlerConformanceCommand: the conformance kit from the command line passes a module that
// does what it is asked, and fails, naming the check, one that does not.
func TestHandlerConformanceCommand(t *testing.T) {
	dir, cache := handlerCmdDir(t)
	minimal := handlerCmdCopy(t, dir, "../../abi/testdata/minimal.wasm") // accepts every plugin

	out, err := handlerCmdRun(t, "handler", "conformance", minimal, "--name", "demo", "--versions", "v1", "--cache-dir", cache)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	handlerCmdWant(t, out, "PASS  load\n", "PASS  register-again\n", "PASS  deregister\n", "\nPASS: all 14 checks passed\n")

	out, err = handlerCmdRun(t, "handler", "conformance", minimal, "--name", "demo", "--invalid", "old=v0", "--cache-dir", cache)
	if !errors.Is(err, errHandlerFailed) {
		t.Fatalf("a plugin the module accepts given as --invalid: %v, want a failed conformance run\n%s", err, out)
	}
	handlerCmdWant(t, out, "FAIL  reject/old: ", "\nFAIL: 1 of 15 checks failed\n")

	if _, err := handlerCmdRun(t, "handler", "conformance", minimal, "--cache-dir", cache); err == nil || !strings.Contains(err.Error(), "--name") {
		t.Errorf("no --name: %v, want an error naming --name", err)
	}
}

// TestHandlerCommandModulesRefused: a module built as a WASI command (it exports _start) is
// refused by handler test and handler inspect with the build that makes it a reactor, as the
// daemon refuses it: the WAT fixture, a Go handler built without -buildmode=c-shared and a C
// handler linked without -mexec-model=reactor.
func TestHandlerCommandModulesRefused(t *testing.T) {
	dir, cache := handlerCmdDir(t)
	modules := []string{handlerCmdCopy(t, dir, "../../internal/host/testdata/command.wasm")}
	if !testing.Short() {
		goCmd := filepath.Join(dir, "go-command.wasm")
		cmd := exec.Command("go", "build", "-trimpath", "-o", goCmd, "../../examples/handler-go")
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
		modules = append(modules, goCmd)

		clang := doctest.Tool(t, "clang", "Debian: clang lld wasi-libc libclang-rt-14-dev-wasm32")
		mainC := filepath.Join(dir, "main.c")
		if err := os.WriteFile(mainC, []byte("int main(void) { return 0; }\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		cCmd := filepath.Join(dir, "c-command.wasm")
		out, err := exec.Command(clang, "--target=wasm32-wasi", "-O2", "-I", "../../abi/c", "-o", cCmd,
			"../../handlers-wasm/example/example.c", "../../abi/c/wasmhost.c", mainC).CombinedOutput()
		if err != nil {
			t.Fatalf("clang: %v\n%s", err, out)
		}
		modules = append(modules, cCmd)
	}
	const how = "exports _start: it was built as a WASI command, not the reactor a handler must be; build it as a reactor: " +
		"Go: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared; C: clang --target=wasm32-wasi -mexec-model=reactor"
	for _, m := range modules {
		t.Run(filepath.Base(m), func(t *testing.T) {
			if err := os.Chmod(m, 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := handlerCmdRun(t, "handler", "test", m, "--name", "demo", "--cache-dir", cache)
			if !errors.Is(err, errHandlerFailed) || !strings.Contains(err.Error(), m+" would not load: "+how) {
				t.Errorf("handler test: %v, want it refused with %q\n%s", err, how, out)
			}
			out, err = handlerCmdRun(t, "handler", "inspect", m, "--cache-dir", cache)
			if !errors.Is(err, errHandlerFailed) {
				t.Errorf("handler inspect: %v, want it to say the daemon would refuse it\n%s", err, out)
			}
			handlerCmdWant(t, out, "daemon    REFUSED: host: bad module "+m+": "+how)
		})
	}
}
