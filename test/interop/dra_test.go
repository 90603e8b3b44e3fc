package interop

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// The versions the DRA helper announces by default: gRPC service names, not version numbers.
var draDefaultVersions = []string{"v1.DRAPlugin", "v1beta1.DRAPlugin", "v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth"}

// TestDRAHelperAgainstProbe pins down what the real DRA helper sends and how it reacts to each
// registration status, with the minimal probe on the registering side.
func TestDRAHelperAgainstProbe(t *testing.T) {
	d := newDirs(t)
	const driver = "gpu.interop.dev"
	p := startDRA(t, d, driver)

	// Start returns with both sockets listening: the registration socket in the registrar
	// directory, named after the driver, and nothing else there.
	if why := isSocket(p.RegSocket); why != "" {
		t.Fatal(why)
	}
	if why := isSocket(p.DRASocket); why != "" {
		t.Fatal(why)
	}
	if names := dirNames(t, d.Sockets); !slices.Equal(names, []string{driver + "-reg.sock"}) {
		t.Errorf("socket dir holds %q, want only %q", names, driver+"-reg.sock")
	}
	if fi, err := os.Stat(p.RegSocket); err == nil {
		t.Logf("%s: mode %v (the helper does not set it: umask decides)", p.RegSocket, fi.Mode())
	}

	pr := dialProbe(t, p.RegSocket)
	info := pr.getInfo(t)
	if info.Type != registerapi.DRAPlugin || info.Name != driver || info.Endpoint != p.DRASocket ||
		!slices.Equal(info.SupportedVersions, draDefaultVersions) {
		t.Errorf("GetInfo = {type %q name %q endpoint %q versions %q}, want {%q %q %q %q}",
			info.Type, info.Name, info.Endpoint, info.SupportedVersions,
			registerapi.DRAPlugin, driver, p.DRASocket, draDefaultVersions)
	}
	if st := p.helper.RegistrationStatus(); st != nil {
		t.Errorf("RegistrationStatus before any notify = %+v, want nil", st)
	}

	// Notify(true) is accepted.
	if err := pr.notify(t.Context(), probeTimeout, true, ""); err != nil {
		t.Fatalf("Notify(true): %v", err)
	}
	calls := p.calls.waitNotified(t, 1)
	if !calls[0].Registered || calls[0].Err != nil {
		t.Errorf("plugin saw %+v, want registered with no error", calls[0])
	}
	// Safe to read now: the interceptor recorded the call after the helper stored the status.
	if st := p.helper.RegistrationStatus(); st == nil || !st.PluginRegistered {
		t.Errorf("RegistrationStatus after Notify(true) = %+v, want registered", st)
	}

	// Notify(false) makes the RPC fail with "failed registration process: <the message>" (code
	// Unknown: the helper returns a plain error), and the plugin keeps serving.
	const reason = "rejected by the interop probe"
	err := pr.notify(t.Context(), probeTimeout, false, reason)
	if status.Code(err) != codes.Unknown || !strings.Contains(err.Error(), "failed registration process: "+reason) {
		t.Errorf("Notify(false) = %v, want code Unknown with %q", err, "failed registration process: "+reason)
	}
	if st := p.helper.RegistrationStatus(); st == nil || st.PluginRegistered || st.Error != reason {
		t.Errorf("RegistrationStatus after Notify(false) = %+v, want not registered, error %q", st, reason)
	}
	if why := isSocket(p.RegSocket); why != "" {
		t.Errorf("after Notify(false): %s", why)
	}
	if again := pr.getInfo(t); again.Name != driver {
		t.Errorf("GetInfo after Notify(false) names %q, want %q", again.Name, driver)
	}

	// A later Notify(true) is accepted again.
	if err := pr.notify(t.Context(), probeTimeout, true, ""); err != nil {
		t.Errorf("Notify(true) after Notify(false): %v", err)
	}
	if calls := p.calls.waitNotified(t, 3); !calls[2].Registered || calls[2].Err != nil {
		t.Errorf("third notify seen as %+v, want registered with no error", calls[2])
	}
	if n := p.calls.GetInfos(); n != 2 {
		t.Errorf("plugin served %d GetInfo calls, want 2", n)
	}

	// Stop removes both sockets: a clean stop is visible to a watcher as a removal.
	p.Stop()
	if why := isGone(p.RegSocket); why != "" {
		t.Error(why)
	}
	if why := isGone(p.DRASocket); why != "" {
		t.Error(why)
	}
}

// TestDRAHelperVersionsFollowOptions checks that the versions are the services the driver
// enables: a handler must accept any non-empty subset, not the default list only.
func TestDRAHelperVersionsFollowOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []kubeletplugin.Option
		want []string
	}{
		{"no health service", []kubeletplugin.Option{kubeletplugin.HealthService(false)},
			[]string{"v1.DRAPlugin", "v1beta1.DRAPlugin"}},
		{"v1 only", []kubeletplugin.Option{kubeletplugin.NodeV1beta1(false), kubeletplugin.HealthV1alpha1(false)},
			[]string{"v1.DRAPlugin", "v1.DRAResourceHealth"}},
		{"v1beta1 only, no health", []kubeletplugin.Option{kubeletplugin.NodeV1(false), kubeletplugin.HealthService(false)},
			[]string{"v1beta1.DRAPlugin"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDirs(t)
			p := startDRA(t, d, "gpu.interop.dev", tc.opts...)
			if got := dialProbe(t, p.RegSocket).getInfo(t).SupportedVersions; !slices.Equal(got, tc.want) {
				t.Errorf("versions = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestDRAHelperRollingUpdate runs two instances of one driver side by side, as a rolling
// update does: two registration sockets, the same plugin name, two endpoints. The daemon must
// keep both registered, keyed by socket, not by name.
func TestDRAHelperRollingUpdate(t *testing.T) {
	d := newDirs(t)
	const driver = "gpu.interop.dev"
	uids := []types.UID{"11111111-2222-3333-4444-555555555555", "66666666-7777-8888-9999-000000000000"}
	var ps []*draPlugin
	for _, uid := range uids {
		p := startDRAInstance(t, d, driver, uid)
		if why := isSocket(p.RegSocket); why != "" {
			t.Fatal(why)
		}
		if !strings.HasPrefix(filepath.Base(p.RegSocket), driver+"-") || !strings.HasSuffix(p.RegSocket, "-reg.sock") {
			t.Errorf("rolling-update socket %s is not <driver>-…-reg.sock", p.RegSocket)
		}
		info := dialProbe(t, p.RegSocket).getInfo(t)
		if info.Name != driver || info.Type != registerapi.DRAPlugin || info.Endpoint != p.DRASocket {
			t.Errorf("instance %s: GetInfo = {%q %q %q}, want {%q %q %q}", uid,
				info.Type, info.Name, info.Endpoint, registerapi.DRAPlugin, driver, p.DRASocket)
		}
		ps = append(ps, p)
	}
	if names := dirNames(t, d.Sockets); len(names) != 2 {
		t.Errorf("socket dir holds %q, want two registration sockets", names)
	}
	t.Logf("rolling-update sockets %q", dirNames(t, d.Sockets))

	// Stopping one instance removes only its own sockets.
	ps[0].Stop()
	if why := isGone(ps[0].RegSocket); why != "" {
		t.Error(why)
	}
	if why := isSocket(ps[1].RegSocket); why != "" {
		t.Error(why)
	}
}

// dirNames lists a directory's entries by name, sorted.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}
