package config_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/wasmhost/wasmhost/internal/config"
)

// TestKubernetesExampleConfigs: the wasmhost config that each ConfigMap under
// examples/kubernetes carries is one the daemon reads (test/interop decodes the manifests
// themselves into the Kubernetes types).
func TestKubernetesExampleConfigs(t *testing.T) {
	files, _ := filepath.Glob("../../examples/kubernetes/*.yaml")
	var n int
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for {
			var doc struct {
				Kind string            `yaml:"kind"`
				Data map[string]string `yaml:"data"`
			}
			if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			c, ok := doc.Data["config.yaml"]
			if doc.Kind != "ConfigMap" || !ok {
				continue
			}
			n++
			p := filepath.Join(t.TempDir(), "config.yaml")
			if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
				t.Fatal(err)
			}
			cfg := config.Default()
			if err := config.Load(p, &cfg); err != nil {
				t.Errorf("%s: %v", f, err)
			}
		}
	}
	if n < 2 {
		t.Errorf("%d wasmhost configs found in examples/kubernetes, want one per DaemonSet", n)
	}
}
