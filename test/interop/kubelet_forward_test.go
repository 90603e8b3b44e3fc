package interop

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The tests here put wasmhost in front of the kubelet: the plugins register in wasmhost's
// socket directory, and wasmhost forwards those its handlers admit to the kubelet's
// plugins_registry (forward.kubeletDir, forward.types; docs/configuration.md).

// forwardConfig is the daemon's configuration for forwarding the three types to kdir:
// plugin_call for the CSI handler (NodeGetInfo at the driver's endpoint, under d.Data) and the
// DevicePlugin handler (GetDevicePluginOptions at the plugin's own socket).
func forwardConfig(d dirs, kdir string) string {
	return fmt.Sprintf(`apiVersion: wasmhost.dev/v1alpha1
kind: WasmhostConfiguration
handlers:
  types:
    CSIPlugin:
      capabilities: [plugin_call]
      pluginCallEndpoints: [%s]
    DevicePlugin:
      capabilities: [plugin_call]
forward:
  kubeletDir: %s
  types: [CSIPlugin, DRAPlugin, DevicePlugin]
`, d.Data, kdir)
}

// startForwarding starts the daemon with opts and forwardConfig, or skips the test if this
// daemon does not know forward.* yet (wasmhost config check says which key it does not know).
func startForwarding(t *testing.T, d dirs, kdir string, opts daemonOptions) *Daemon {
	t.Helper()
	opts.Config = forwardConfig(d, kdir)
	cfg := filepath.Join(d.Root, "forward-check.yaml")
	if err := os.WriteFile(cfg, []byte(opts.Config), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(daemonBinary(t), "config", "check", cfg).CombinedOutput()
	if err != nil && strings.Contains(string(out), "forward: unknown key") {
		t.Skipf("forwarding not in this daemon yet: %s", out)
	}
	if err != nil {
		t.Fatalf("wasmhost config check of\n%s: %v\n%s", opts.Config, err, out)
	}
	return startDaemon(t, d, opts)
}

// msgForwardRemoved starts the daemon's message (debug level) for a socket it made in the
// kubelet's directory and removed, with the plugin's socket under "socket".
const msgForwardRemoved = "forward socket removed"

// kubeletDirOf is the kubelet's plugins_registry of a test: outside wasmhost's socket
// directory, as the configuration requires.
func kubeletDirOf(d dirs) string { return filepath.Join(d.Root, "kubelet", "plugins_registry") }

// TestKubeletThroughWasmhost: the three real plugins register with wasmhost, which forwards
// them to the kubelet's plugin manager: its real handlers register each with the plugin's own
// name, endpoint (the device plugin stub announces none: its registration socket, the one in
// wasmhost's directory) and versions; each plugin is told Notify(true) once, after the
// kubelet's Register. After SIGKILL of each (its socket file left behind), wasmhost notices,
// removes the socket it made, and the kubelet calls DeRegisterPlugin; the time from the kill to
// that call is logged (docs/benchmarks.md has the figures).
func TestKubeletThroughWasmhost(t *testing.T) {
	d := newDirs(t)
	kdir := kubeletDirOf(d)
	k := startKubelet(t, kdir)
	dm := startForwarding(t, d, kdir, daemonOptions{Handlers: []string{"csi", "dra", "deviceplugin"}})
	ps := startKubeletPlugins(t, d, d.Sockets, "fwd")
	for _, p := range ps.all() {
		waitKubeletRegistered(t, k, p)
		dm.waitRegistered(t, p.Socket)
		if n := p.Notifies(); len(n) != 1 {
			t.Errorf("plugin %s was notified %d times, want once: %+v", p.Spec.Name, len(n), n)
		}
	}
	checkKubeletSideEffects(t, k, ps)
	if entries, _ := os.ReadDir(kdir); len(entries) != 3 {
		t.Errorf("the kubelet's directory holds %d entries, want one socket per plugin: %v", len(entries), entries)
	}

	// All three are killed together, then each deregistration is waited for: killed one after
	// the other's deregistration, each kill would fall just after a pass of the kubelet's
	// reconciler, and each figure would be its full second.
	killed := map[string]time.Time{}
	for _, p := range ps.all() {
		killed[p.Spec.Name] = p.Kill()
	}
	for _, p := range ps.all() {
		dereg := k.waitCall(t, "the kubelet to deregister "+p.Spec.Name, 1, named("deregister", p.Spec.Name))[0]
		if dereg.Endpoint != wantKubeletEndpoint(p) {
			t.Errorf("DeRegisterPlugin(%q, %q), want endpoint %s", dereg.Name, dereg.Endpoint, wantKubeletEndpoint(p))
		}
		removed := dm.waitLog(t, "wasmhost to log the removal of its socket for "+p.Spec.Name, func(r logRecord) bool {
			return strings.HasPrefix(r.str("msg"), msgForwardRemoved) && r.str("socket") == p.Socket
		})
		at, err := time.Parse(time.RFC3339Nano, removed.str("time"))
		if err != nil {
			t.Fatalf("the daemon's record %v: %v", removed, err)
		}
		t.Logf("%s: wasmhost removed its socket %v after SIGKILL, the kubelet's DeRegisterPlugin followed %v after SIGKILL",
			p.Spec.Role, at.Sub(killed[p.Spec.Name]).Round(100*time.Microsecond), dereg.At.Sub(killed[p.Spec.Name]).Round(100*time.Microsecond))
	}
	// What the kubelet's handlers undo on DeRegisterPlugin.
	waitFor(t, "the killed CSI driver to leave CSINode", func() string {
		if names := csiNodeDrivers(t); slices.Contains(names, ps.CSI.Spec.Name) {
			return fmt.Sprintf("CSINode drivers %q", names)
		}
		return ""
	})
	if k.Devices.Connected(ps.Device.Socket) {
		t.Errorf("the device manager is still connected to the killed device plugin")
	}
	waitFor(t, "wasmhost to remove the sockets it made", func() string {
		if entries, _ := os.ReadDir(kdir); len(entries) != 0 {
			return fmt.Sprintf("%v", entries)
		}
		return ""
	})
}

// TestKubeletHandlerRefusal: a plugin a handler refuses never reaches the kubelet. Refused: a
// CSI driver announcing only CSI 2.0.0 (the shipped csi handler supports major 1), a device
// plugin named in the kubernetes.io domain (the shipped deviceplugin handler), and a DRA
// driver outside the domain an operator's handler admits (testdata/handlers/allowdra.c, here
// in place of the shipped dra handler). Each is told Notify(false) with its handler's reason;
// the kubelet's handlers are never called for them, over three canary cycles after the
// refusals.
func TestKubeletHandlerRefusal(t *testing.T) {
	d := newDirs(t)
	kdir := kubeletDirOf(d)
	k := startKubelet(t, kdir)
	startForwarding(t, d, kdir, daemonOptions{Handlers: []string{"csi", "deviceplugin"}, TestHandlers: []string{"allowdra"}})
	refused := []struct {
		p    *pluginProc
		want string // in the reason
	}{
		{startPluginProc(t, pluginSpec{Role: roleCSI, Name: "csi-" + uniqueTag("refused") + ".interop.dev", RegDir: d.Sockets,
			DataDir: dataDir(t, d, "csi-refused"), Versions: []string{"2.0.0"}}), "none of them supported"},
		{startPluginProc(t, pluginSpec{Role: roleDRA, Name: "dra-refused.interop.dev", RegDir: d.Sockets,
			DataDir: dataDir(t, d, "dra-refused")}), "is not under .allowed.interop.dev"},
		{startPluginProc(t, pluginSpec{Role: roleDevice, Name: "kubernetes.io/refused", RegDir: d.Sockets}), "kubernetes.io"},
	}
	for _, r := range refused {
		n := r.p.waitNotified(t, 1)[0]
		if n.Registered || !strings.Contains(n.Error, r.want) {
			t.Errorf("plugin %s was told %+v, want a refusal containing %q", r.p.Spec.Name, n, r.want)
		}
		t.Logf("%s was told: %s", r.p.Spec.Name, n.Error)
	}
	// An admitted DRA driver reaches the kubelet through the same handler: the refusals are
	// the policy's, not a broken forward.
	ok := startPluginProc(t, pluginSpec{Role: roleDRA, Name: "ok.allowed.interop.dev", RegDir: d.Sockets,
		DataDir: dataDir(t, d, "dra-ok")})
	waitKubeletRegistered(t, k, ok)

	canaryCycles(t, k, d, 3)
	for _, r := range refused {
		if got := k.Calls(func(c kubeletCall) bool { return c.Name == r.p.Spec.Name }); len(got) != 0 {
			t.Errorf("the kubelet's handlers were called for the refused plugin %s: %v", r.p.Spec.Name, got)
		}
	}
	if entries, _ := os.ReadDir(kdir); len(entries) != 1 {
		t.Errorf("the kubelet's directory holds %v, want the admitted plugin's socket alone", entries)
	}
}

// TestKubeletRefusalReachesPlugin: when the kubelet's own handler refuses a plugin wasmhost's
// handler admitted, the plugin is told Notify(false) with the kubelet's text. The kubelet's CSI
// handler refuses a driver whose name is registered already at the same or a higher version
// (wasmhost's csi handler replaces it instead): the first copy registers with the kubelet
// directly, the second through wasmhost.
func TestKubeletRefusalReachesPlugin(t *testing.T) {
	d := newDirs(t)
	kdir := kubeletDirOf(d)
	k := startKubelet(t, kdir)
	startForwarding(t, d, kdir, daemonOptions{Handlers: []string{"csi", "dra", "deviceplugin"}})
	name := "csi-" + uniqueTag("twice") + ".interop.dev"
	direct := startPluginProc(t, pluginSpec{Role: roleCSI, Name: name, RegDir: kdir, DataDir: dataDir(t, d, "csi-direct")})
	waitKubeletRegistered(t, k, direct)

	p := startPluginProc(t, pluginSpec{Role: roleCSI, Name: name, RegDir: d.Sockets, DataDir: dataDir(t, d, "csi-fwd")})
	v := k.waitCall(t, "the kubelet to refuse the second copy", 1, func(c kubeletCall) bool {
		return c.Op == "validate" && c.Name == name && c.Err != nil
	})[0]
	n := p.waitNotified(t, 1)[0]
	if n.Registered || !strings.HasPrefix(n.Error, "kubelet: ") || !strings.Contains(n.Error, v.Err.Error()) {
		t.Errorf("the plugin was told %+v, want Notify(false) with \"kubelet: \" and the kubelet's text %q", n, v.Err)
	}
	t.Logf("the plugin was told: %s", n.Error)
	// node-driver-registrar exits on Notify(false).
	select {
	case <-p.Exited():
	case <-time.After(waitTimeout):
		t.Errorf("the CSI registrar did not exit on Notify(false)")
	}
	if got := k.Calls(named("register", name)); len(got) != 1 {
		t.Errorf("the kubelet registered %s %d times, want once (the direct copy): %v", name, len(got), got)
	}
}

// TestKubeletWasmhostRestart: a restart of wasmhost costs each forwarded plugin at most one
// DeRegisterPlugin and one RegisterPlugin in the kubelet, and leaves it registered there.
func TestKubeletWasmhostRestart(t *testing.T) {
	d := newDirs(t)
	kdir := kubeletDirOf(d)
	k := startKubelet(t, kdir)
	opts := daemonOptions{Handlers: []string{"csi", "dra", "deviceplugin"}}
	first := startForwarding(t, d, kdir, opts)
	ps := startKubeletPlugins(t, d, d.Sockets, "restart")
	for _, p := range ps.all() {
		waitKubeletRegistered(t, k, p)
	}
	before, notified := map[string]int{}, map[string]int{}
	for _, p := range ps.all() {
		before[p.Spec.Name] = len(k.Calls(func(c kubeletCall) bool { return c.Name == p.Spec.Name && c.Op != "validate" }))
		notified[p.Spec.Name] = len(p.Notifies())
	}

	first.Stop(t)
	second := startForwarding(t, d, kdir, opts)
	for _, p := range ps.all() {
		second.waitRegistered(t, p.Socket)
		// Told again, which wasmhost does only once the kubelet has accepted the forward.
		if n := p.waitNotified(t, notified[p.Spec.Name]+1); !n[len(n)-1].Registered {
			t.Errorf("%s was told %+v after the restart", p.Spec.Name, n[len(n)-1])
		}
	}
	// Every event wasmhost's restart caused in the kubelet's directory has been acted upon.
	canaryCycles(t, k, d, 1)
	for _, p := range ps.all() {
		calls := k.Calls(func(c kubeletCall) bool { return c.Name == p.Spec.Name && c.Op != "validate" })
		since := calls[before[p.Spec.Name]:]
		var regs, deregs int
		for _, c := range since {
			switch {
			case c.Op == "deregister":
				deregs++
			case c.Err == nil:
				regs++
			}
		}
		t.Logf("%s: the restart cost %d deregistration(s) and %d registration(s) in the kubelet", p.Spec.Role, deregs, regs)
		if regs > 1 || deregs > 1 {
			t.Errorf("%s: the restart cost %d deregistrations and %d registrations, want at most one each: %v", p.Spec.Name, deregs, regs, since)
		}
		if last := calls[len(calls)-1]; last.Op != "register" || last.Err != nil {
			t.Errorf("%s is not registered in the kubelet after the restart: last call %v", p.Spec.Name, last)
		}
	}
}
