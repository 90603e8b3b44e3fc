package sandboxtest

import (
	"slices"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/abi/guest/guesttest"
	"github.com/wasmhost/wasmhost/internal/guestbuild"
	"github.com/wasmhost/wasmhost/internal/registration"
)

// Percentiles reports the p50, p99 and maximum of ds as b's metrics p50-unit, p99-unit and
// max-unit, in nanoseconds. It sorts ds.
func Percentiles(b *testing.B, ds []time.Duration, unit string) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2].Nanoseconds()), "p50-"+unit)
	b.ReportMetric(float64(ds[len(ds)*99/100].Nanoseconds()), "p99-"+unit)
	b.ReportMetric(float64(ds[len(ds)-1].Nanoseconds()), "max-"+unit)
}

// BenchPlugin is the plugin the benchmarks' calls are about, a CSI driver as the kubelet
// registers one; a benchmark sets its Type (and Versions) to its handler's.
func BenchPlugin() registration.PluginInfo {
	return registration.PluginInfo{
		Socket: "/var/lib/kubelet/plugins_registry/csi.example.com-reg.sock", Name: "csi.example.com",
		Endpoint: "/var/lib/kubelet/plugins/csi.example.com/csi.sock", Versions: []string{"1.0.0"},
	}
}

// SDKs names the SDKs the example handler is written with, in the order of the table in
// docs/benchmarks-history.md ("The shipped handlers in C"): the keys of ExampleHandler.
var SDKs = []string{"go-sdk", "c-sdk", "rust-sdk", "as-sdk"}

// ExampleHandler builds the example handler (example.wasmhost.dev) with each SDK (the keys
// are SDKs) and returns the module's path, in a temporary directory b removes. A missing
// toolchain skips b (or fails it in CI), as guesttest.Build and guestbuild do.
var ExampleHandler = map[string]func(b *testing.B) string{
	"go-sdk": func(b *testing.B) string {
		return guesttest.Build(b, "github.com/wasmhost/wasmhost/examples/handler-go")
	},
	"c-sdk":    func(b *testing.B) string { return guestbuild.Shipped(b, "example") },
	"rust-sdk": func(b *testing.B) string { return guestbuild.Rust(b, "examples/handler-rust/example.rs") },
	"as-sdk":   func(b *testing.B) string { return guestbuild.AS(b, "examples/handler-as/example.ts") },
}
