package interop

import (
	"context"
	"os"
	"slices"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// TestCSIPluginAgainstProbe checks the CSI plugin runner against the probe: what it announces,
// that its endpoint answers NodeGetInfo, and that Notify(false) makes its registrar exit inside
// the call, leaving a dead socket file until it is restarted.
func TestCSIPluginAgainstProbe(t *testing.T) {
	d := newDirs(t)
	const driver = "csi.interop.dev"
	p := startCSI(t, d, driver)

	fi, err := os.Stat(p.RegSocket)
	if err != nil || fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o700 {
		t.Fatalf("registration socket %s: %v %v, want a socket with mode 0700", p.RegSocket, fi.Mode(), err)
	}
	pr := dialProbe(t, p.RegSocket)
	info := pr.getInfo(t)
	if info.Type != registerapi.CSIPlugin || info.Name != driver || info.Endpoint != p.Endpoint ||
		!slices.Equal(info.SupportedVersions, csiVersions) {
		t.Errorf("GetInfo = {%q %q %q %q}, want {%q %q %q %q}", info.Type, info.Name, info.Endpoint,
			info.SupportedVersions, registerapi.CSIPlugin, driver, p.Endpoint, csiVersions)
	}

	conn, err := grpc.NewClient("unix://"+info.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(t.Context(), probeTimeout)
	defer cancel()
	ni, err := csi.NewNodeClient(conn).NodeGetInfo(ctx, &csi.NodeGetInfoRequest{})
	if err != nil || ni.NodeId != p.NodeID {
		t.Errorf("NodeGetInfo at the endpoint = %v, %v; want node %q", ni, err, p.NodeID)
	}

	if err := pr.notify(t.Context(), probeTimeout, true, ""); err != nil {
		t.Errorf("Notify(true): %v", err)
	}
	err = pr.notify(t.Context(), probeTimeout, false, "refused by the interop probe")
	if status.Code(err) != codes.Unavailable {
		t.Errorf("Notify(false) = %v, want Unavailable: the registrar exits inside the call", err)
	}
	<-p.Exited()
	if why := isSocket(p.RegSocket); why != "" {
		t.Errorf("after the exit the socket file should stay: %s", why)
	}

	// Restarted, it unlinks the dead socket and serves again.
	if err := p.StartRegistrar(); err != nil {
		t.Fatal(err)
	}
	if info := dialProbe(t, p.RegSocket).getInfo(t); info.Name != driver {
		t.Errorf("GetInfo after the restart names %q", info.Name)
	}
}

// TestCSIPluginWithDaemon: with plugin_call granted to CSIPlugin, the daemon registers the CSI
// plugin through handlers-wasm/csi, which calls NodeGetInfo on the driver's endpoint; the
// registrar sees Notify(true); stopping the registrar deregisters it.
func TestCSIPluginWithDaemon(t *testing.T) {
	d := newDirs(t)
	dm := startDaemon(t, d, daemonOptions{
		Handlers: []string{"csi"},
		// The driver serves CSI on a socket of its own, under d.Data: plugin_call may dial
		// there only because the operator allows that directory for CSIPlugin.
		Config: "apiVersion: wasmhost.dev/v1alpha1\nkind: WasmhostConfiguration\nhandlers:\n  types:\n    CSIPlugin:\n" +
			"      capabilities: [plugin_call]\n      pluginCallEndpoints: [" + d.Data + "]\n",
	})
	const driver = "csi.interop.dev"
	p := startCSI(t, d, driver)

	calls := p.calls.waitRegistered(t)
	if len(calls) != 1 {
		t.Errorf("registrar saw %+v, want one Notify(true)", calls)
	}
	rec := dm.waitRegistered(t, p.RegSocket)
	if rec.str("plugin") != driver || rec.str("plugin_type") != registerapi.CSIPlugin {
		t.Errorf("daemon logged %v, want plugin %s of type %s", rec, driver, registerapi.CSIPlugin)
	}
	if n := p.csi.NodeGetInfos(); n < 1 {
		t.Errorf("the driver served %d NodeGetInfo calls, want the handler's", n)
	}

	p.StopRegistrar()
	dm.waitDeregistered(t, p.RegSocket)
}
