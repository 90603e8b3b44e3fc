package config_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/wasmhost/wasmhost/internal/config/configtest"
)

// TestKubernetesExampleConfigs: the wasmhost config that each ConfigMap under
// examples/kubernetes carries is one the daemon reads (test/interop decodes the manifests
// themselves into the Kubernetes types).
func TestKubernetesExampleConfigs(t *testing.T) {
	files, _ := filepath.Glob("../../examples/kubernetes/*.yaml")
	var n int
	for _, f := range files {
		cfgs := configtest.FromManifest(t, f)
		n += len(cfgs)
		// Both DaemonSets stand in front of the kubelet (issue 28).
		for _, c := range cfgs {
			if strings.HasPrefix(filepath.Base(f), "daemonset") && (!c.Forward.On() || c.Forward.KubeletDir != "/var/lib/kubelet/plugins_registry") {
				t.Errorf("%s: forwarding is not on to /var/lib/kubelet/plugins_registry: %+v", f, c.Forward)
			}
		}
	}
	if n < 2 {
		t.Errorf("%d wasmhost configs found in examples/kubernetes, want one per DaemonSet", n)
	}
}
