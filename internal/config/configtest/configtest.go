// Package configtest reads the wasmhost configurations that Kubernetes manifests carry, for
// the tests that check the example manifests.
package configtest

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

// FromManifest returns the configuration of each ConfigMap in the manifest at path that
// carries a config.yaml, loaded over the defaults as the daemon loads its file. A manifest
// that cannot be read, or a config.yaml the daemon would refuse, fails the test.
func FromManifest(t testing.TB, path string) []config.Config {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []config.Config
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var doc struct {
			Kind string            `yaml:"kind"`
			Data map[string]string `yaml:"data"`
		}
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		c, ok := doc.Data["config.yaml"]
		if doc.Kind != "ConfigMap" || !ok {
			continue
		}
		p := filepath.Join(t.TempDir(), "config.yaml")
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg := config.Default()
		warnings, err := config.Load(p, &cfg)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(warnings) > 0 {
			t.Fatalf("%s: %v", path, warnings)
		}
		out = append(out, cfg)
	}
}
