package config

import (
	"github.com/wasmhost/wasmhost/internal/tracing"
)

// TracingConfig is the kubelet's TracingConfiguration, with its names: spans of every
// registration exported over OTLP/gRPC (internal/tracing, docs/observability.md). Off unless
// the file has a tracing section with a samplingRatePerMillion above 0.
type TracingConfig struct {
	// Endpoint is the collector's OTLP/gRPC address, host:port. Defaults to none (off); a
	// file with a tracing section and no endpoint gets localhost:4317, as the kubelet's does.
	Endpoint string `yaml:"endpoint"`
	// SamplingRatePerMillion is how many registrations in a million are traced. Defaults to
	// 0, as in the kubelet: none.
	SamplingRatePerMillion int32 `yaml:"samplingRatePerMillion"`
}

// Tracing is the tracing package's configuration of c.
func (c TracingConfig) Tracing(version string) tracing.Config {
	return tracing.Config{Endpoint: c.Endpoint, SamplingRatePerMillion: c.SamplingRatePerMillion, Version: version}
}

// defaultTracingEndpoint gives a tracing section that names no collector the kubelet's
// default, localhost:4317; without the section, tracing stays off.
func (c *Config) defaultTracingEndpoint() {
	if _, ok := c.lines["tracing"]; ok && c.Tracing.Endpoint == "" {
		c.Tracing.Endpoint = tracing.DefaultEndpoint
	}
}

func (c *Config) validateTracing(bad func(key, format string, args ...any)) {
	t := c.Tracing.Tracing("")
	if r := t.SamplingRatePerMillion; r < 0 || r > 1_000_000 {
		bad("tracing.samplingRatePerMillion", "must be 0 to 1000000 (traces sampled in a million), got %d", r)
		t.SamplingRatePerMillion = 0
	}
	if err := t.Validate(); err != nil {
		bad("tracing.endpoint", "%q: want host:port, the collector's OTLP/gRPC address (e.g. %s)", c.Tracing.Endpoint, tracing.DefaultEndpoint)
	}
}
