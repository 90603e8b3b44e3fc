package interop

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// kubeletPlugins are the three real plugins of the kubelet tests, each in a process of its own.
type kubeletPlugins struct {
	CSI, DRA, Device *pluginProc
}

func (k kubeletPlugins) all() []*pluginProc { return []*pluginProc{k.CSI, k.DRA, k.Device} }

// kubeletPluginNames are the names of the three plugins for tag.
func kubeletPluginNames(tag string) (csiName, draName, deviceName string) {
	return "csi-" + tag + ".interop.dev", "dra-" + tag + ".interop.dev", "interop.dev/" + tag
}

// uniqueTags numbers the tags of the process.
var uniqueTags atomic.Int64

// uniqueTag is tag with a number of its own in this process: the kubelet's CSI handler keeps its
// drivers in a package variable, and a driver the kubelet never deregistered (killed, or left
// when a test ends) would refuse a later one of the same name (go test -count).
func uniqueTag(tag string) string { return fmt.Sprintf("%s%d", tag, uniqueTags.Add(1)) }

// startKubeletPlugins starts the three plugins, their registration sockets in regDir and their
// other sockets under d.Data.
func startKubeletPlugins(t *testing.T, d dirs, regDir, tag string) kubeletPlugins {
	t.Helper()
	tag = uniqueTag(tag)
	csiName, draName, deviceName := kubeletPluginNames(tag)
	ps := kubeletPlugins{
		CSI:    launchPluginProc(t, pluginSpec{Role: roleCSI, Name: csiName, RegDir: regDir, DataDir: dataDir(t, d, "csi-"+tag)}),
		DRA:    launchPluginProc(t, pluginSpec{Role: roleDRA, Name: draName, RegDir: regDir, DataDir: dataDir(t, d, "dra-"+tag)}),
		Device: launchPluginProc(t, pluginSpec{Role: roleDevice, Name: deviceName, RegDir: regDir}),
	}
	for _, p := range ps.all() {
		p.waitReady(t)
	}
	return ps
}

// dataDir makes a directory of its own for one plugin under d.Data.
func dataDir(t *testing.T, d dirs, name string) string {
	t.Helper()
	dir := filepath.Join(d.Data, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// wantKubeletEndpoint is the endpoint the kubelet's handlers must be given for p: the one its
// GetInfo announces, or its registration socket when it announces none (the device plugin
// stub), as the kubelet itself does.
func wantKubeletEndpoint(p *pluginProc) string {
	if p.Endpoint != "" {
		return p.Endpoint
	}
	return p.Socket
}

// wantVersions are the versions p announces.
func wantVersions(p *pluginProc) []string {
	switch p.Spec.Role {
	case roleCSI:
		if len(p.Spec.Versions) > 0 {
			return p.Spec.Versions
		}
		return csiVersions
	case roleDRA:
		return []string{"v1.DRAPlugin", "v1beta1.DRAPlugin", "v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth"}
	default:
		return []string{"v1beta1"}
	}
}

// waitKubeletRegistered waits until the kubelet's handler has registered p (Register returned
// no error) and p was told Notify(true), checks what the handler was given and that the
// notification came after the handler's Register was called, and returns that Register call.
func waitKubeletRegistered(t *testing.T, k *kubelet, p *pluginProc) kubeletCall {
	t.Helper()
	reg := k.waitCall(t, "the kubelet to register "+p.Spec.Name, 1, func(c kubeletCall) bool {
		return c.Op == "register" && c.Name == p.Spec.Name && c.Err == nil
	})[0]
	wantType := map[string]string{roleCSI: registerapi.CSIPlugin, roleDRA: registerapi.DRAPlugin, roleDevice: registerapi.DevicePlugin}[p.Spec.Role]
	if reg.Type != wantType || reg.Endpoint != wantKubeletEndpoint(p) || !slices.Equal(reg.Versions, wantVersions(p)) {
		t.Errorf("the kubelet's handler got %v, want type %s, endpoint %s, versions %q", reg, wantType, wantKubeletEndpoint(p), wantVersions(p))
	}
	n := p.waitNotified(t, 1)
	last := n[len(n)-1]
	if !last.Registered || last.Error != "" {
		t.Errorf("plugin %s was told %+v, want registered", p.Spec.Name, last)
	}
	if !last.Time().After(reg.At) {
		t.Errorf("plugin %s was told registered at %s, before the kubelet's Register at %s",
			p.Spec.Name, last.Time().Format("15:04:05.000000"), reg.At.Format("15:04:05.000000"))
	}
	return reg
}

// checkKubeletSideEffects checks what the kubelet's real handlers did for the registered
// plugins: the CSI driver is in the node's CSINode object (written by its nodeinfomanager after
// NodeGetInfo), and the device manager's client holds a connection to the device plugin and
// received its devices through ListAndWatch.
func checkKubeletSideEffects(t *testing.T, k *kubelet, ps kubeletPlugins) {
	t.Helper()
	waitFor(t, "the CSI driver in CSINode", func() string {
		if names := csiNodeDrivers(t); !slices.Contains(names, ps.CSI.Spec.Name) {
			return fmt.Sprintf("CSINode drivers %q", names)
		}
		return ""
	})
	waitFor(t, "the device manager's view of "+ps.Device.Spec.Name, func() string {
		if !k.Devices.Connected(wantKubeletEndpoint(ps.Device)) || k.Devices.DeviceCount(ps.Device.Spec.Name) != 2 {
			return fmt.Sprintf("connected %v, devices %d", k.Devices.Connected(wantKubeletEndpoint(ps.Device)),
				k.Devices.DeviceCount(ps.Device.Spec.Name))
		}
		return ""
	})
}

// canaryCycles registers a DRA helper in the kubelet's directory and stops it, n times, waiting
// each time for the kubelet's Register and then its DeRegister: each cycle takes at least two
// passes of the kubelet's reconciler (it registers in one pass and deregisters in a later one),
// so after it every event that reached the kubelet before has been acted upon.
func canaryCycles(t *testing.T, k *kubelet, d dirs, n int) {
	t.Helper()
	const name = "canary.interop.dev"
	cd := dirs{Root: d.Root, Sockets: k.Dir, Data: filepath.Join(d.Root, "canary")}
	if err := os.MkdirAll(cd.Data, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= n; i++ {
		p := startDRA(t, cd, name)
		k.waitCall(t, "the kubelet to register the canary", i, named("register", name))
		p.Stop()
		k.waitCall(t, "the kubelet to deregister the canary", i, named("deregister", name))
	}
}

// TestKubeletAloneKeepsKilledPlugins is the baseline: the three plugins register with the
// kubelet's plugin manager directly; after SIGKILL their socket files stay, nothing answers
// there any more, and the kubelet never calls DeRegisterPlugin for them. "Never" is observed
// over a bounded window: three canary cycles after the kill (each a registration and a
// deregistration of another plugin, so at least six reconciler passes, about 6 s).
func TestKubeletAloneKeepsKilledPlugins(t *testing.T) {
	d := newDirs(t)
	kdir := filepath.Join(d.Root, "kubelet", "plugins_registry")
	k := startKubelet(t, kdir)
	ps := startKubeletPlugins(t, d, kdir, "alone")
	for _, p := range ps.all() {
		waitKubeletRegistered(t, k, p)
	}
	checkKubeletSideEffects(t, k, ps)

	killed := time.Now()
	for _, p := range ps.all() {
		p.Kill()
		if why := isSocket(p.Socket); why != "" {
			t.Fatalf("after SIGKILL the socket should stay: %s", why)
		}
		if c, err := net.Dial("unix", p.Socket); err == nil {
			_ = c.Close()
			t.Fatalf("%s still answers after SIGKILL", p.Socket)
		}
	}
	canaryCycles(t, k, d, 3)
	t.Logf("observed for %v after the kill", time.Since(killed).Round(time.Millisecond))
	for _, p := range ps.all() {
		if got := k.Calls(named("deregister", p.Spec.Name)); len(got) != 0 {
			t.Errorf("the kubelet deregistered %s: %v", p.Spec.Name, got)
		}
	}
	// The device manager's own client saw its ListAndWatch stream end and dropped the
	// connection: that is the device manager, not the plugin manager, which still has the
	// plugin registered (no DeRegisterPlugin).
	if k.Devices.Connected(ps.Device.Socket) {
		t.Logf("the device manager still holds a connection to the killed device plugin")
	}
	if names := csiNodeDrivers(t); !slices.Contains(names, ps.CSI.Spec.Name) {
		t.Errorf("the killed CSI driver left CSINode (%q), which needs a DeRegisterPlugin", names)
	}
}
