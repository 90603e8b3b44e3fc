package interop

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// exampleType and exampleVersion are what the shipped example handler
// (handlers-wasm/example) accepts.
const (
	exampleType    = "example.wasmhost.dev"
	exampleVersion = "v1"
)

// hangDeadline is the deadline of a notification the test expects to hang: the call must still
// be pending when it passes.
const hangDeadline = 300 * time.Millisecond

// TestExamplePluginAgainstProbe pins down what the kubelet's example plugin sends and how it
// reacts to each status when its channel is drained (the normal case).
func TestExamplePluginAgainstProbe(t *testing.T) {
	d := newDirs(t)
	e := startExample(t, d, "example-plugin", exampleType, exampleVersion, "v2")
	if why := isSocket(e.Socket); why != "" {
		t.Fatal(why)
	}
	if names := dirNames(t, d.Sockets); !slices.Equal(names, []string{"example-plugin.sock"}) {
		t.Errorf("socket dir holds %q, want only example-plugin.sock", names)
	}

	pr := dialProbe(t, e.Socket)
	info := pr.getInfo(t)
	if info.Type != exampleType || info.Name != "example-plugin" || info.Endpoint != e.Socket ||
		!slices.Equal(info.SupportedVersions, []string{exampleVersion, "v2"}) {
		t.Errorf("GetInfo = {type %q name %q endpoint %q versions %q}, want what it was given: {%q %q %q %q}",
			info.Type, info.Name, info.Endpoint, info.SupportedVersions,
			exampleType, "example-plugin", e.Socket, []string{exampleVersion, "v2"})
	}

	e.Drain()
	if err := pr.notify(t.Context(), probeTimeout, true, ""); err != nil {
		t.Fatalf("Notify(true) with the channel drained: %v", err)
	}
	// Unlike the DRA helper, Notify(false) returns OK.
	const reason = "rejected by the interop probe"
	if err := pr.notify(t.Context(), probeTimeout, false, reason); err != nil {
		t.Errorf("Notify(false) with the channel drained: %v", err)
	}
	got := e.waitReceived(t, 2)
	if !got[0].Registered || got[0].Error != "" || got[1].Registered || got[1].Error != reason {
		t.Errorf("plugin received %+v, want registered then not registered with %q", got, reason)
	}

	if err := e.Stop(); err != nil {
		t.Fatal(err)
	}
	if why := isGone(e.Socket); why != "" {
		t.Error(why)
	}
}

// TestExamplePluginHangsUndrained shows the example plugin as a hung plugin: with nothing
// draining its channel, NotifyRegistrationStatus never returns, whatever the caller's deadline,
// while GetInfo keeps answering. Draining releases every blocked notification.
func TestExamplePluginHangsUndrained(t *testing.T) {
	d := newDirs(t)
	e := startExample(t, d, "hung-plugin", exampleType, exampleVersion)
	pr := dialProbe(t, e.Socket)

	for i, registered := range []bool{true, false} {
		err := pr.notify(t.Context(), hangDeadline, registered, "")
		if status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("notify %d (registered=%v) undrained = %v, want DeadlineExceeded", i, registered, err)
		}
	}
	if info := pr.getInfo(t); info.Name != "hung-plugin" {
		t.Errorf("GetInfo while two notifications hang names %q", info.Name)
	}
	if got := e.Received(); len(got) != 0 {
		t.Errorf("received %+v before draining", got)
	}

	// The two handlers are still blocked in their send: draining takes both, in some order.
	e.Drain()
	got := e.waitReceived(t, 2)
	if got[0].Registered == got[1].Registered {
		t.Errorf("drained %+v, want one registered and one not", got)
	}
	ctx, cancel := context.WithTimeout(t.Context(), probeTimeout)
	defer cancel()
	if err := pr.notify(ctx, probeTimeout, true, ""); err != nil {
		t.Errorf("Notify(true) once drained: %v", err)
	}
	e.waitReceived(t, 3)
}

// TestExamplePluginWithDaemon: the example plugin, drained, is registered by the daemon through
// the shipped example handler (it sees Notify(true)), and deregistered when it stops.
func TestExamplePluginWithDaemon(t *testing.T) {
	d := newDirs(t)
	dm := startDaemon(t, d, daemonOptions{Handlers: []string{"example"}})
	e := startExample(t, d, "example-plugin", exampleType, exampleVersion)
	e.Drain()

	got := e.waitReceived(t, 1)
	if !got[0].Registered || got[0].Error != "" {
		t.Fatalf("plugin received %+v, want registered", got[0])
	}
	rec := dm.waitRegistered(t, e.Socket)
	if rec.str("plugin") != "example-plugin" || rec.str("plugin_type") != exampleType {
		t.Errorf("daemon logged %v, want plugin example-plugin of type %s", rec, exampleType)
	}

	if err := e.Stop(); err != nil {
		t.Fatal(err)
	}
	dm.waitDeregistered(t, e.Socket)
	if got := e.Received(); len(got) != 1 {
		t.Errorf("plugin received %+v, want exactly one notification", got)
	}
}

// TestExamplePluginRejectedByHandler: announcing the versions the kubelet's own tests give the
// example plugin (v1beta1, v1beta2), it is refused by the example handler, which needs v1, and
// is told why with Notify(false).
func TestExamplePluginRejectedByHandler(t *testing.T) {
	d := newDirs(t)
	dm := startDaemon(t, d, daemonOptions{Handlers: []string{"example"}})
	e := startExample(t, d, "old-plugin", exampleType, "v1beta1", "v1beta2")
	e.Drain()

	got := e.waitReceived(t, 1)
	if got[0].Registered || !strings.Contains(got[0].Error, exampleVersion) {
		t.Errorf("plugin received %+v, want not registered, with a reason naming version %s", got[0], exampleVersion)
	}
	if rs := dm.records(about(msgRegistered, e.Socket)); len(rs) != 0 {
		t.Errorf("daemon logged a registration of a refused plugin: %v", rs)
	}
}

// TestExamplePluginHungWithDaemon: a plugin whose NotifyRegistrationStatus never returns does
// not hold up the daemon: its notification is bounded and another plugin registers meanwhile.
// As in the kubelet, a plugin that did not take Notify(true) does not know it is registered, so
// its registration is rolled back and retried with backoff; once the plugin answers again, a
// retry registers it.
func TestExamplePluginHungWithDaemon(t *testing.T) {
	d := newDirs(t)
	dm := startDaemon(t, d, daemonOptions{
		Handlers: []string{"example"},
		Config:   "apiVersion: wasmhost.dev/v1alpha1\nkind: WasmhostConfiguration\nregistration:\n  notifyTimeout: 1s\n",
	})
	hung := startExample(t, d, "hung-plugin", exampleType, exampleVersion)
	ok := startExample(t, d, "ok-plugin", exampleType, exampleVersion)
	ok.Drain()

	// The healthy plugin is registered while the hung one's notification is outstanding.
	if got := ok.waitReceived(t, 1); !got[0].Registered {
		t.Errorf("ok-plugin received %+v, want registered", got[0])
	}
	dm.waitRegistered(t, ok.Socket)

	// The hung plugin's notification times out and its registration is rolled back.
	dm.waitLog(t, "the daemon to roll back "+hung.Socket, func(r logRecord) bool {
		return strings.HasPrefix(r.str("msg"), msgRolledBack) && r.str("socket") == hung.Socket
	})
	if rs := dm.records(about(msgRegistered, hung.Socket)); len(rs) != 0 {
		t.Fatalf("the daemon kept a plugin registered that never took its registration: %v", rs)
	}

	// Once it answers its notifications, a retry registers it.
	hung.Drain()
	dm.waitRegistered(t, hung.Socket)
	got := hung.waitReceived(t, 1)
	for _, st := range got {
		if !st.Registered {
			t.Errorf("hung-plugin was sent %+v, want only registered=true", st)
		}
	}
	t.Logf("the daemon sent the hung plugin %d notification(s) before one went through", len(got))

	for _, e := range []*examplePlugin{hung, ok} {
		if err := e.Stop(); err != nil {
			t.Fatal(err)
		}
		dm.waitDeregistered(t, e.Socket)
	}
}
