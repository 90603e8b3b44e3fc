package kube_test

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wasmhost/wasmhost/internal/registration/registrationtest"
)

// TestClusterPlugins: `wasmhost cluster plugins` lists the plugins of two nodes from their
// NodeFeature objects, with an admin's kubeconfig as kubectl would use it.
func TestClusterPlugins(t *testing.T) {
	c := startCluster(t)
	c.setUp()
	bin := filepath.Join(t.TempDir(), "wasmhost")
	build := exec.Command("go", "build", "-o", bin, "./cmd/wasmhost")
	build.Dir = "../.." // the daemon's module
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, node := range []string{"node-a", "node-b"} {
		td := startDaemon(t, node, c.kubeconfig(c.nodeToken("wasmhost", node)),
			map[string]*registrationtest.RecordingHandler{"CSIPlugin": csiHandler()})
		startPlugins(t, td.sockets, "csi-on-"+node, 2)
		waitFor(t, node+"'s plugins on its NodeFeature", func() bool {
			n, err := c.published(node)
			return err == nil && len(n.Instances["csi.wasmhost.dev"]) == 2
		})
	}
	admin := c.kubeconfig(adminToken)
	out, err := exec.Command(bin, "cluster", "plugins", "--kubeconfig", admin).CombinedOutput()
	if err != nil {
		t.Fatalf("cluster plugins: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[0], "NODE") || !strings.Contains(lines[1], "node-a") ||
		!strings.Contains(lines[1], "CSIPlugin") || !strings.Contains(lines[1], "csi-on-node-a-0") || !strings.Contains(lines[1], "registered") ||
		!strings.Contains(lines[1], "node_id=node-a topology=zone=z1") || !strings.Contains(lines[4], "node-b") {
		t.Errorf("cluster plugins:\n%s", out)
	}
	out, err = exec.Command(bin, "cluster", "plugins", "--kubeconfig", admin, "-o", "json").Output()
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Plugins []struct {
			Node, Type, Name, State, Socket string
			Versions                        []string
			Published                       map[string]string
		}
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(doc.Plugins) != 4 || doc.Plugins[3].Node != "node-b" || doc.Plugins[3].Published["node_id"] != "node-a" ||
		doc.Plugins[3].Versions[0] != "1.0.0" || !strings.HasSuffix(doc.Plugins[3].Socket, "csi-on-node-b-1.sock") {
		t.Errorf("cluster plugins -o json:\n%s", out)
	}
	out, err = exec.Command(bin, "cluster", "plugins", "--kubeconfig", admin, "-o", "wide").Output()
	if err != nil || !strings.Contains(string(out), "SOCKET") || !strings.Contains(string(out), "csi-on-node-b-1.sock") {
		t.Errorf("cluster plugins -o wide (%v):\n%s", err, out)
	}
}
