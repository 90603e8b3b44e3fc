package interop

import (
	"testing"

	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// TestDRAHelperWithDaemon: the daemon discovers the DRA helper's registration socket, registers
// it through the shipped dra handler, and the helper sees Notify(true) (through its gRPC
// interceptor and its own RegistrationStatus); when the helper stops, the daemon deregisters it.
func TestDRAHelperWithDaemon(t *testing.T) {
	d := newDirs(t)
	dm := startDaemon(t, d, daemonOptions{Handlers: []string{"dra"}})
	const driver = "gpu.interop.dev"
	p := startDRA(t, d, driver)

	calls := p.calls.waitNotified(t, 1)
	if !calls[0].Registered || calls[0].Error != "" || calls[0].Err != nil {
		t.Fatalf("DRA helper saw %+v, want registered with no error", calls[0])
	}
	if st := p.helper.RegistrationStatus(); st == nil || !st.PluginRegistered {
		t.Errorf("helper's RegistrationStatus = %+v, want registered", st)
	}
	rec := dm.waitRegistered(t, p.RegSocket)
	if rec.str("plugin") != driver || rec.str("plugin_type") != registerapi.DRAPlugin {
		t.Errorf("daemon logged %v, want plugin %s of type %s", rec, driver, registerapi.DRAPlugin)
	}

	p.Stop()
	dm.waitDeregistered(t, p.RegSocket)
	if n := len(p.calls.Notifies()); n != 1 {
		t.Errorf("DRA helper saw %d notifications, want 1", n)
	}
}

// TestDRAHelperDaemonRestart: a helper started before the daemon is registered at the daemon's
// start (its socket already exists), and again by a restarted daemon: the helper does not
// notice the registering side going away, so the new daemon must find it by itself.
func TestDRAHelperDaemonRestart(t *testing.T) {
	d := newDirs(t)
	p := startDRA(t, d, "gpu.interop.dev")

	first := startDaemon(t, d, daemonOptions{Handlers: []string{"dra"}})
	before := len(p.calls.waitRegistered(t))
	first.waitRegistered(t, p.RegSocket)
	first.Stop(t)
	if n := len(p.calls.Notifies()); n != before {
		t.Errorf("stopping the daemon sent the plugin %d notification(s)", n-before)
	}

	second := startDaemon(t, d, daemonOptions{Handlers: []string{"dra"}})
	second.waitRegistered(t, p.RegSocket)
	if calls := p.calls.waitRegistered(t); len(calls) <= before {
		t.Errorf("the restarted daemon registered the plugin without notifying it: %+v", calls)
	}
}

// TestDRAHelperPresentAtDaemonStart: a plugin whose socket exists when the daemon starts must
// not be refused while the daemon is still loading its handlers. The kubelet never has this
// window (its handlers are built in), and a refusal is not harmless: the DRA helper answers
// Notify(false) with an error, and the CSI node-driver-registrar exits on it.
func TestDRAHelperPresentAtDaemonStart(t *testing.T) {
	d := newDirs(t)
	p := startDRA(t, d, "gpu.interop.dev")
	dm := startDaemon(t, d, daemonOptions{Handlers: []string{"dra"}})
	calls := p.calls.waitRegistered(t)
	dm.waitRegistered(t, p.RegSocket)
	for i, c := range calls[:len(calls)-1] {
		t.Errorf("notification %d before the registration: %+v", i, c)
	}
}

// TestDRAHelperRollingUpdateWithDaemon: two instances of one driver (same name, two sockets,
// two endpoints) are both registered; stopping the old one deregisters only its socket.
func TestDRAHelperRollingUpdateWithDaemon(t *testing.T) {
	d := newDirs(t)
	dm := startDaemon(t, d, daemonOptions{Handlers: []string{"dra"}})
	const driver = "gpu.interop.dev"
	oldP := startDRAInstance(t, d, driver, "11111111-2222-3333-4444-555555555555")
	newP := startDRAInstance(t, d, driver, "66666666-7777-8888-9999-000000000000")
	for _, p := range []*draPlugin{oldP, newP} {
		if c := p.calls.waitNotified(t, 1); !c[0].Registered || c[0].Err != nil {
			t.Errorf("instance at %s saw %+v, want registered", p.RegSocket, c[0])
		}
		dm.waitRegistered(t, p.RegSocket)
	}

	oldP.Stop()
	dm.waitDeregistered(t, oldP.RegSocket)
	// The new instance stays registered: nothing deregistered it, nothing notified it again.
	if rs := dm.records(about(msgDeregistered, newP.RegSocket)); len(rs) != 0 {
		t.Errorf("the remaining instance was deregistered: %v", rs)
	}
	if n := len(newP.calls.Notifies()); n != 1 {
		t.Errorf("the remaining instance saw %d notifications, want 1", n)
	}
}
