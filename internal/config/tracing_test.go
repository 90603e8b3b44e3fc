package config_test

import (
	"strings"
	"testing"
)

// TestTracingAsTheKubelet: off without a tracing section; a section that names no collector
// gets the kubelet's localhost:4317, and a rate of 0 (none sampled) unless it says one.
func TestTracingAsTheKubelet(t *testing.T) {
	for _, tc := range []struct {
		name, file, endpoint string
		rate                 int32
		on                   bool
	}{
		{"no section", header, "", 0, false},
		{"empty section", header + "tracing: {}\n", "localhost:4317", 0, false},
		{"rate only", header + "tracing:\n  samplingRatePerMillion: 1000000\n", "localhost:4317", 1000000, true},
		{"both", header + "tracing:\n  endpoint: otel-collector.monitoring:4317\n  samplingRatePerMillion: 1\n", "otel-collector.monitoring:4317", 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _, err := check(t, tc.file)
			if err != nil {
				t.Fatal(err)
			}
			tr := c.Tracing.Tracing("v")
			if tr.Endpoint != tc.endpoint || tr.SamplingRatePerMillion != tc.rate || tr.On() != tc.on {
				t.Errorf("endpoint %q rate %d on %v, want %q %d %v", tr.Endpoint, tr.SamplingRatePerMillion, tr.On(), tc.endpoint, tc.rate, tc.on)
			}
		})
	}
}

// TestTracingMistakes: a bad endpoint or rate is named by its key and line.
func TestTracingMistakes(t *testing.T) {
	for _, tc := range []struct{ file, want string }{
		{header + "tracing:\n  endpoint: http://collector:4317\n", `line 4: tracing.endpoint: "http://collector:4317": want host:port`},
		{header + "tracing:\n  endpoint: collector\n", `line 4: tracing.endpoint: "collector": want host:port`},
		{header + "tracing:\n  endpoint: collector:0\n", `tracing.endpoint: "collector:0"`},
		{header + "tracing:\n  samplingRatePerMillion: 1000001\n", "line 4: tracing.samplingRatePerMillion: must be 0 to 1000000"},
		{header + "tracing:\n  samplingRatePerMillion: -1\n", "tracing.samplingRatePerMillion: must be 0 to 1000000"},
	} {
		_, _, err := check(t, tc.file)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want %q", tc.file, err, tc.want)
		}
	}
}
