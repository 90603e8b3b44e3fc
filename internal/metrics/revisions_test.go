package metrics_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/wasmhost/wasmhost/internal/metrics"
)

// TestRevisionMetrics: a plugin type pinned to an older revision, and a shadow run's runs and
// disagreements, as a scrape shows them.
func TestRevisionMetrics(t *testing.T) {
	cfg := testConfig()
	cfg.Handlers = func() []metrics.HandlerSample {
		return []metrics.HandlerSample{{
			Name: "csi.wasm", PluginTypes: []string{"CSIPlugin"}, SHA256: "new", ABIVersion: 1,
			Pins:    []metrics.PinSample{{PluginType: "CSIPlugin", SHA256: "old", Auto: true}},
			Shadows: []metrics.ShadowSample{{PluginType: "CSIPlugin", SHA256: "next", Runs: 7, Disagreements: 2}},
		}}
	}
	m, err := metrics.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const want = `
# HELP wasmhost_handler_pinned 1 while a plugin type is served by an older revision of its handler than its file holds (a rollback; auto="true" when automatic).
# TYPE wasmhost_handler_pinned gauge
wasmhost_handler_pinned{auto="true",plugin_type="CSIPlugin",sha256="old"} 1
# HELP wasmhost_handler_shadow_runs_total Registrations whose Validate the plugin type's shadow candidate ran too.
# TYPE wasmhost_handler_shadow_runs_total counter
wasmhost_handler_shadow_runs_total{plugin_type="CSIPlugin",sha256="next"} 7
# HELP wasmhost_handler_shadow_disagreements_total Of those, the ones the candidate decided otherwise than the serving revision (accept, reject, fail).
# TYPE wasmhost_handler_shadow_disagreements_total counter
wasmhost_handler_shadow_disagreements_total{plugin_type="CSIPlugin",sha256="next"} 2
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want),
		"wasmhost_handler_pinned", "wasmhost_handler_shadow_runs_total", "wasmhost_handler_shadow_disagreements_total"); err != nil {
		t.Error(err)
	}
}
