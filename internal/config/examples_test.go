package config_test

import (
	"path/filepath"
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
		n += len(configtest.FromManifest(t, f))
	}
	if n < 2 {
		t.Errorf("%d wasmhost configs found in examples/kubernetes, want one per DaemonSet", n)
	}
}
