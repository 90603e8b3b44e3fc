package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/internal/adminview"
	"github.com/wasmhost/wasmhost/internal/config"
	"github.com/wasmhost/wasmhost/internal/guestbuild"
	"github.com/wasmhost/wasmhost/internal/handlerbench"
	"github.com/wasmhost/wasmhost/internal/handlercheck"
	"github.com/wasmhost/wasmhost/internal/reconciler"
	"github.com/wasmhost/wasmhost/internal/session"
)

// examplePlugin is the example plugin (examples/plugin) running as a process.
type examplePlugin struct {
	socket string
	log    *lockedBuffer // its standard error: the log
	stop   func()        // SIGTERM, as Ctrl-C would, and wait; the test fails if it does not exit cleanly
}

// buildExamplePlugin builds examples/plugin into a temporary directory and returns the
// binary's path. It skips in -short mode.
func buildExamplePlugin(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the example plugin")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command in PATH")
	}
	dir, err := os.MkdirTemp("/tmp", "wh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin := filepath.Join(dir, "plugin")
	if out, err := exec.Command(gobin, "build", "-o", bin, "../../examples/plugin").CombinedOutput(); err != nil {
		t.Fatalf("go build examples/plugin: %v\n%s", err, out)
	}
	return bin
}

// startExamplePlugin runs the example plugin binary with --socket-dir dir --name name and
// args, until the test ends: then it is stopped with SIGTERM (killed if it does not exit) and
// waited for. Its log is shown if the test failed.
func startExamplePlugin(t *testing.T, bin, dir, name string, args ...string) *examplePlugin {
	t.Helper()
	p := &examplePlugin{socket: filepath.Join(dir, name+".sock"), log: &lockedBuffer{}}
	cmd := exec.Command(bin, append([]string{"--socket-dir", dir, "--name", name}, args...)...)
	cmd.Stdout, cmd.Stderr = p.log, p.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var once sync.Once
	p.stop = func() {
		once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case err := <-exited:
				if err != nil {
					t.Errorf("plugin %s: exit: %v", name, err)
				}
			case <-time.After(e2eWait):
				_ = cmd.Process.Kill()
				<-exited
				t.Errorf("plugin %s did not exit on SIGTERM", name)
			}
		})
	}
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("plugin %s log:\n%s", name, p.log.String())
		}
	})
	return p
}

// TestE2ECSIAndDRADrivers runs the daemon with the shipped CSI and DRA handlers, the CSI one
// granted plugin_call as examples/config/wasmhost.yaml does, and the example plugin as a CSI
// driver (answering NodeGetInfo) and as a DRA driver: what the README's "CSI and DRA drivers"
// section shows after make run.
func TestE2ECSIAndDRADrivers(t *testing.T) {
	t.Parallel()
	csiWasm := guestbuild.ShippedBytes(t, "csi")
	draWasm := guestbuild.ShippedBytes(t, "dra")
	bin := buildExamplePlugin(t)
	dirs := newE2EDirs(t, "/tmp")
	for name, wasm := range map[string][]byte{"csi.wasm": csiWasm, "dra.wasm": draWasm} {
		if err := os.WriteFile(filepath.Join(dirs.Handler, name), wasm, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg := e2eConfig(dirs)
	cfg.Handlers.Types = map[string]config.TypeConfig{"CSIPlugin": {Capabilities: []string{"plugin_call"}}}
	rd := startDaemon(t, cfg, testLog(t), nil)

	// A CSI driver, version 1.5.0: registered, with what its NodeGetInfo answered.
	csi := startExamplePlugin(t, bin, dirs.Socket, "csi.example.com", "--type", "CSIPlugin", "--versions", "1.5.0",
		"--csi-node-id", "node-1", "--csi-max-volumes", "16", "--csi-topology", "topology.example.com/zone=z1")
	rd.waitState(csi.socket, reconciler.StateRegistered)
	a, _ := rd.d.State().Actual().Get(csi.socket)
	for k, v := range map[string]string{"node_id": "node-1", "version": "1.5.0", "max_volumes_per_node": "16",
		"topology": "topology.example.com/zone=z1", "endpoint": csi.socket} {
		if a.Published[k] != v {
			t.Errorf("CSI driver published %s=%q, want %q (all: %v)", k, a.Published[k], v, a.Published)
		}
	}
	waitFor(t, "the CSI driver to log its registration", func() bool {
		return strings.Contains(csi.log.String(), "registered by the daemon")
	})

	// wasmhost plugins capture: the registration as its handler saw it, NodeGetInfo included.
	sessDir := filepath.Join(t.TempDir(), "sessions")
	var capOut string
	waitFor(t, "wasmhost plugins capture to answer", func() bool {
		var err error
		capOut, err = runRoot(t, "plugins", "capture", "csi.example.com", "-o", sessDir, "--admin-socket", cfg.AdminSocket())
		return err == nil
	})
	sessFile := filepath.Join(sessDir, "CSIPlugin-csi.example.com.yaml")
	if !strings.Contains(capOut, sessFile) {
		t.Errorf("wasmhost plugins capture printed %q, want it to name %s", capOut, sessFile)
	}
	checkCSISession(t, sessFile, csi.socket)
	// A name no session matches is an error that names it; --all writes every session kept.
	if out, err := runRoot(t, "plugins", "capture", "csi.example.com", "nobody", "-o", sessDir, "--admin-socket", cfg.AdminSocket()); err == nil ||
		!strings.Contains(err.Error(), "no session kept for nobody") {
		t.Errorf("capture of an unknown plugin: %v\n%s", err, out)
	}
	if _, err := runRoot(t, "plugins", "capture", "-o", sessDir, "--admin-socket", cfg.AdminSocket()); err == nil || !strings.Contains(err.Error(), "or give --all") {
		t.Errorf("capture of nothing named: %v", err)
	}
	allDir := filepath.Join(t.TempDir(), "all")
	if out, err := runRoot(t, "plugins", "capture", "--all", "-o", allDir, "--admin-socket", cfg.AdminSocket()); err != nil || !strings.Contains(out, "CSIPlugin-csi.example.com.yaml") {
		t.Errorf("capture --all: %v\n%s", err, out)
	}
	if fi, err := os.Stat(filepath.Join(allDir, "CSIPlugin-csi.example.com.yaml")); err != nil {
		t.Error(err)
	} else if fi.Mode().Perm() != 0o600 {
		t.Errorf("captured session file mode %v, want 0600", fi.Mode())
	}
	testCSIReplay(t, filepath.Join(dirs.Handler, "csi.wasm"), sessFile)

	// The same driver at an older version, from another socket (in a subdirectory, which the
	// daemon watches too): refused, and told why.
	const reason = "driver csi.example.com already registered at version 1.5.0 (endpoint "
	const refusing = "; refusing 1.0.0"
	old := startExamplePlugin(t, bin, filepath.Join(dirs.Socket, "old"), "csi.example.com", "--type", "CSIPlugin", "--versions", "1.0.0",
		"--csi-node-id", "node-1")
	st := rd.waitState(old.socket, reconciler.StateRejected)
	if !strings.Contains(st.LastError, reason) || !strings.Contains(st.LastError, refusing) {
		t.Errorf("older CSI driver: last error %q, want one naming both versions", st.LastError)
	}
	waitFor(t, "the older CSI driver to log the refusal", func() bool {
		l := old.log.String()
		return strings.Contains(l, "registration refused") && strings.Contains(l, reason) && strings.Contains(l, refusing)
	})
	// wasmhost plugins -o json shows it rejected with that reason. The CLI may ask before the
	// admin socket listens.
	var views []adminview.Plugin
	var out string
	waitFor(t, "wasmhost plugins -o json to answer", func() bool {
		var err error
		out, err = runRoot(t, "plugins", "-o", "json", "--admin-socket", cfg.AdminSocket())
		return err == nil
	})
	if err := json.Unmarshal([]byte(out), &views); err != nil {
		t.Fatalf("wasmhost plugins -o json: %v\n%s", err, out)
	}
	found := false
	for _, v := range views {
		if v.Socket == old.socket {
			found = true
			if v.State != "rejected" || v.Name != "csi.example.com" || !strings.Contains(v.LastError, reason) || !strings.Contains(v.LastError, refusing) ||
				!slices.Equal(v.Versions, []string{"1.0.0"}) {
				t.Errorf("older CSI driver shown as %+v", v)
			}
		}
	}
	if !found {
		t.Errorf("wasmhost plugins -o json does not show %s:\n%s", old.socket, out)
	}
	// ... and the registered driver is left as it was.
	if a, _ := rd.d.State().Actual().Get(csi.socket); a.Published["version"] != "1.5.0" {
		t.Errorf("after the refusal the CSI driver is published as %v", a.Published)
	}

	// The 1.5.0 driver stops: it is deregistered, and the older copy, refused because of it, is
	// asked again at once and registers (not at the re-check, 5 minutes away).
	csi.stop()
	rd.waitGone(csi.socket)
	rd.waitState(old.socket, reconciler.StateRegistered)
	if a, _ := rd.d.State().Actual().Get(old.socket); a.Published["version"] != "1.0.0" || a.Published["node_id"] != "node-1" {
		t.Errorf("older CSI driver published %v", a.Published)
	}

	// A DRA driver: registered, used through v1.DRAPlugin.
	dra := startExamplePlugin(t, bin, dirs.Socket, "gpu.example.com", "--type", "DRAPlugin", "--versions", "v1.DRAPlugin,v1.DRAResourceHealth")
	rd.waitState(dra.socket, reconciler.StateRegistered)
	a, _ = rd.d.State().Actual().Get(dra.socket)
	for k, v := range map[string]string{"service": "v1.DRAPlugin", "health": "v1.DRAResourceHealth", "endpoint": dra.socket} {
		if a.Published[k] != v {
			t.Errorf("DRA driver published %s=%q, want %q (all: %v)", k, a.Published[k], v, a.Published)
		}
	}
}

// checkCSISession checks the session the daemon captured of the CSI driver at socket: its
// validate and register calls, the NodeGetInfo exchange and the published facts.
func checkCSISession(t *testing.T, path, socket string) *session.Session {
	t.Helper()
	s, err := session.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if s.Plugin.Socket != socket || s.Plugin.Type != "CSIPlugin" || s.Plugin.Name != "csi.example.com" || !slices.Equal(s.Plugin.Versions, []string{"1.5.0"}) {
		t.Errorf("session plugin %+v", s.Plugin)
	}
	if s.Source != "daemon" || s.Handler.SHA256 == "" {
		t.Errorf("session source %q handler %+v", s.Source, s.Handler)
	}
	var exports []string
	for _, c := range s.Calls {
		exports = append(exports, c.Export)
	}
	if !slices.Equal(exports, []string{"validate", "register"}) {
		t.Fatalf("session calls %v, want validate and register", exports)
	}
	reg := s.Calls[1]
	if reg.Result.Status != "ok" || reg.Result.Published["node_id"] != "node-1" || reg.Result.Published["max_volumes_per_node"] != "16" {
		t.Errorf("register result %+v", reg.Result)
	}
	var calls, cas int
	for _, x := range reg.Exchanges {
		switch x.Fn {
		case session.PluginCall:
			calls++
			if x.Method != "/csi.v1.Node/NodeGetInfo" || !strings.Contains(string(x.Response), "node-1") || x.Code != int32(len(x.Response)) {
				t.Errorf("plugin_call exchange %+v", x)
			}
		case session.KVCAS:
			cas++
			if x.Code != 0 || !x.OldAbsent {
				t.Errorf("kv_compare_and_set exchange %+v", x)
			}
		}
	}
	if calls != 1 || cas != 1 {
		t.Errorf("register exchanged %d plugin_call and %d kv_compare_and_set, want 1 and 1: %+v", calls, cas, reg.Exchanges)
	}
	return s
}

// testCSIReplay replays the captured session of a CSI driver against the handler that served
// it (no departure, either way of matching), against a changed handler (it publishes twice
// the driver's max_volumes_per_node: the departure is named, exit status 1), and records a
// fixture run that replays clean.
func testCSIReplay(t *testing.T, csiWasm, sessFile string) {
	t.Helper()
	// One compile of each module for all the commands: a Go handler takes a minute to compile
	// under the race detector on a loaded machine.
	cache := filepath.Join(t.TempDir(), "cache")
	runRoot := func(t *testing.T, args ...string) (string, error) {
		t.Helper()
		if args[0] == "handler" && slices.Contains([]string{"test", "diff", "bench"}, args[1]) {
			args = append(args, "--cache-dir", cache)
		}
		return runRoot(t, args...)
	}
	for _, match := range []string{"request", "order"} {
		out, err := runRoot(t, "handler", "test", csiWasm, "--grant", "plugin_call", "--replay", sessFile, "--replay-match", match)
		if err != nil || !strings.Contains(out, "PASS: the module did what the session") || strings.Contains(out, "departs") {
			t.Errorf("replay (%s) of the handler that served the session: %v\n%s", match, err, out)
		}
	}
	changed := buildChangedCSI(t)
	out, err := runRoot(t, "handler", "test", changed, "--grant", "plugin_call", "--replay", sessFile)
	if err == nil || !strings.Contains(out, `published max_volumes_per_node: "32", the session's "16"`) || !strings.Contains(out, "FAIL: 1 departures from the session") {
		t.Errorf("replay of a changed handler: %v\n%s", err, out)
	}
	// The JSON view lists the departure on the register call.
	out, _ = runRoot(t, "handler", "test", changed, "--grant", "plugin_call", "--replay", sessFile, "-o", "json")
	var v handlercheck.TestReport
	if err := json.Unmarshal([]byte(strings.SplitN(out, "\nError", 2)[0]), &v); err != nil {
		t.Fatalf("-o json: %v\n%s", err, out)
	}
	if v.Replay == nil || v.Replay.Departures != 1 || len(v.Calls) != 2 || len(v.Calls[1].Departures) != 1 || v.Passed {
		t.Errorf("-o json of the changed handler's replay: %+v", v)
	}

	// handler diff: the same revision twice changes nothing (exit 0); the changed one changes
	// what register publishes (exit 1), and only that.
	out, err = runRoot(t, "handler", "diff", csiWasm, csiWasm, sessFile, "--grant", "plugin_call")
	if err != nil || !strings.Contains(out, "0 of 1 sessions changed") {
		t.Errorf("handler diff of one revision with itself: %v\n%s", err, out)
	}
	out, err = runRoot(t, "handler", "diff", csiWasm, changed, sessFile, "--grant", "plugin_call")
	if exitCode(err) != 1 || !strings.Contains(out, "CHANGED  CSIPlugin csi.example.com") ||
		!strings.Contains(out, `register: published max_volumes_per_node: "16" → "32"`) || strings.Count(out, "register: ") != 1 {
		t.Errorf("handler diff against the changed handler: %v (exit %d)\n%s", err, exitCode(err), out)
	}
	if _, err := runRoot(t, "handler", "diff", csiWasm, "/nonexistent.wasm", sessFile); exitCode(err) != 2 {
		t.Errorf("handler diff with a missing module: %v, exit %d, want 2", err, exitCode(err))
	}

	// --record: a run with a fixture, written as a session, replays without departure.
	rec := filepath.Join(t.TempDir(), "rec.yaml")
	out, err = runRoot(t, "handler", "test", csiWasm, "--type", "CSIPlugin", "--name", "csi.other.com", "--versions", "1.0.0",
		"--grant", "plugin_call", "--call-fixture", "../../handlers-wasm/csi/testdata/nodegetinfo.yaml", "--record", rec)
	if err != nil {
		t.Fatalf("handler test --record: %v\n%s", err, out)
	}
	s, err := session.Load(rec)
	if err != nil {
		t.Fatal(err)
	}
	if s.Source != "handler test" || len(s.Calls) != 3 || s.Calls[2].Export != "deregister" || s.Calls[1].Result.Published["node_id"] != "node-1" {
		t.Errorf("recorded session %+v", s)
	}
	out, err = runRoot(t, "handler", "test", csiWasm, "--grant", "plugin_call", "--replay", rec)
	if err != nil || strings.Contains(out, "departs") {
		t.Errorf("replay of the recorded session: %v\n%s", err, out)
	}

	// handler bench: the session's calls, a baseline saved, a regression against a baseline
	// no run can meet, and Go benchmark lines.
	base := filepath.Join(t.TempDir(), "base.json")
	out, err = runRoot(t, "handler", "bench", csiWasm, "--grant", "plugin_call", "--replay", sessFile, "--duration", "300ms", "--concurrency", "2", "--save", base)
	if err != nil || !strings.Contains(out, "calls/s") || !strings.Contains(out, "validate") || !strings.Contains(out, "register") || !strings.Contains(out, "p99") {
		t.Errorf("handler bench: %v\n%s", err, out)
	}
	var saved handlerbench.Result
	if b, err := os.ReadFile(base); err != nil || json.Unmarshal(b, &saved) != nil || saved.Calls == 0 || saved.Exports["register"].P95 <= 0 || saved.Failed != 0 || saved.Concurrency != 2 {
		t.Fatalf("saved baseline %+v (%v)", saved, err)
	}
	for i := range saved.Samples.RelativeCPU { // a baseline whose calls cost a thousandth
		saved.Samples.RelativeCPU[i] /= 1000
	}
	fast, _ := json.Marshal(saved)
	if err := os.WriteFile(base, fast, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = runRoot(t, "handler", "bench", csiWasm, "--grant", "plugin_call", "--replay", sessFile, "--duration", "200ms", "--concurrency", "2", "--baseline", base, "--max-regression", "10%")
	if err == nil || !strings.Contains(out, "REGRESSION against") || !strings.Contains(err.Error(), "CPU per call") {
		t.Errorf("handler bench against a baseline 1000 times faster: %v\n%s", err, out)
	}
	out, err = runRoot(t, "handler", "bench", csiWasm, "--grant", "plugin_call", "--replay", sessFile, "--duration", "200ms", "-o", "gobench")
	if err != nil || !regexp.MustCompile(`(?m)^BenchmarkHandler/csi/register-1\t\d+\t\d+ ns/op\t\d+ p50-ns`).MatchString(out) {
		t.Errorf("handler bench -o gobench: %v\n%s", err, out)
	}
}

// buildChangedCSI builds the shipped CSI handler with one change: it publishes twice the
// max_volumes_per_node its driver answers.
func buildChangedCSI(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "handlers-wasm/csi/csi.c"))
	const from, to = "add_int(&max, ni.max_volumes);", "add_int(&max, 2 * ni.max_volumes);"
	if err != nil || !strings.Contains(string(b), from) {
		t.Fatalf("the CSI handler's csi.c no longer has %s (%v): change buildChangedCSI", from, err)
	}
	src := filepath.Join(t.TempDir(), "csi.c")
	if err := os.WriteFile(src, []byte(strings.Replace(string(b), from, to, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(root, src) // guestbuild.C takes paths from the repository's root
	if err != nil {
		t.Fatal(err)
	}
	return guestbuild.C(t, rel)
}
