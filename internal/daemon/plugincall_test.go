package daemon

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wasmhost/wasmhost/internal/config"
)

// A handler may call only its own plugin: the socket it registered from, or an endpoint under
// a prefix allowed for its type; never the daemon's own sockets, not even through a symlink
// or under an allowed prefix.
func TestPluginCallPolicy(t *testing.T) {
	dir, err := os.MkdirTemp("/tmp", "wh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	mk := func(rel string) string {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: p, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return p
	}
	reg := mk("reg/csi-reg.sock")
	driver := mk("plugins/csi/csi.sock")
	other := mk("elsewhere/other.sock")
	admin := mk("plugins/state/admin.sock") // under the allowed prefix on purpose
	link := filepath.Join(dir, "plugins", "csi", "link.sock")
	if err := os.Symlink(admin, link); err != nil {
		t.Fatal(err)
	}
	escape := filepath.Join(dir, "plugins", "csi", "escape.sock")
	if err := os.Symlink(other, escape); err != nil {
		t.Fatal(err)
	}

	cfg := config.Default()
	cfg.Admin.Socket = admin
	cfg.Handlers.Types = map[string]config.TypeConfig{"CSIPlugin": {PluginCallEndpoints: []string{"unix://" + filepath.Join(dir, "plugins")}}}
	policy := pluginCallPolicy(cfg)
	for _, tc := range []struct {
		typ, endpoint string
		refused       string // "" when allowed
	}{
		{"CSIPlugin", reg, ""},    // its own registration socket
		{"CSIPlugin", driver, ""}, // under the allowed prefix
		{"OtherPlugin", reg, ""},  // its own socket, whatever its type
		{"OtherPlugin", driver, "neither the plugin's own socket"},
		{"CSIPlugin", other, "neither the plugin's own socket"},
		{"CSIPlugin", admin, "the daemon's own sockets"},
		{"CSIPlugin", link, "the daemon's own sockets"},
		{"CSIPlugin", escape, "neither the plugin's own socket"},
		{"CSIPlugin", filepath.Join(dir, "plugins", "gone.sock"), "no such file"},
		// unix:// URLs name the same sockets (a common CSI spelling), and are confined alike.
		{"CSIPlugin", "unix://" + driver, ""},
		{"CSIPlugin", "unix:" + driver, ""},
		{"OtherPlugin", "unix://" + reg, ""},
		{"CSIPlugin", "unix://" + admin, "the daemon's own sockets"},
		{"CSIPlugin", "unix://" + other, "neither the plugin's own socket"},
		{"CSIPlugin", "unix://relative.sock", "not a unix socket path"},
		{"CSIPlugin", "tcp://127.0.0.1:1", "not a unix socket path"},
	} {
		got, err := policy(tc.typ, reg, tc.endpoint)
		switch {
		case tc.refused == "" && err != nil:
			t.Errorf("%s %s: refused: %v", tc.typ, tc.endpoint, err)
		case tc.refused == "" && got == "":
			t.Errorf("%s %s: allowed with no path to dial", tc.typ, tc.endpoint)
		case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused)):
			t.Errorf("%s %s: %q, %v; want refused with %q", tc.typ, tc.endpoint, got, err, tc.refused)
		}
	}
}
