package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/internal/config"
	"github.com/wasmhost/wasmhost/internal/guestbuild"
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
	var views []pluginView
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
