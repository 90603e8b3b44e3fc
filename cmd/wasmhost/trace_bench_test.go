package main

import (
	"testing"

	"github.com/wasmhost/wasmhost/internal/config"
	"github.com/wasmhost/wasmhost/internal/tracing/tracingtest"
)

// BenchmarkE2ERegisterTracing is BenchmarkE2ERegister/wasm (socket created → Notify(true),
// the example handler) with tracing off, as by default; on at the rate of 1 in a million
// (almost nothing sampled: what tracing costs a node that has it on); on for every
// registration, to a collector that answers; and on for every registration to a collector
// that takes the exports and never answers (what a hung collector costs a registration).
func BenchmarkE2ERegisterTracing(b *testing.B) {
	for _, bc := range []struct {
		name string
		rate int32 // 0: tracing off
		hung bool
	}{
		{"off", 0, false},
		{"1-per-million", 1, false},
		{"every", 1_000_000, false},
		{"every-collector-hung", 1_000_000, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			dirs := benchDirs(b)
			cfg := benchConfig(dirs)
			if bc.rate > 0 {
				c := tracingtest.Start(b)
				if bc.hung {
					c.Hold()
				}
				cfg.Tracing = config.TracingConfig{Endpoint: c.Addr, SamplingRatePerMillion: bc.rate}
			}
			rd := startBenchDaemonWith(b, cfg, dirs, &noopHandler{}, benchExampleWasm(b))
			registerOneByOne(b, rd, dirs, exampleType)
		})
	}
}
