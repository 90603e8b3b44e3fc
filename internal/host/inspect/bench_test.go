package inspect

import (
	"context"
	"os"
	"testing"

	"github.com/wasmhost/wasmhost/internal/host/sandbox"
	"github.com/wasmhost/wasmhost/internal/host/sandbox/sandboxtest"
)

// BenchmarkInspect measures what `wasmhost handler inspect` runs, in a sandbox of its own
// without a cache on disk: the sandbox's description (sandbox's BenchmarkDescribe measures it
// alone, with and without a cache entry) and the report made of it here, for the WAT fixture
// and the example handler of each SDK.
func BenchmarkInspect(b *testing.B) {
	modules := map[string]func(b *testing.B) string{"wat": func(*testing.B) string { return fixture("ok") }}
	for _, lang := range sandboxtest.SDKs {
		modules[lang] = sandboxtest.ExampleHandler[lang]
	}
	for _, name := range append([]string{"wat"}, sandboxtest.SDKs...) {
		b.Run(name, func(b *testing.B) {
			path := modules[name](b)
			bin, err := os.ReadFile(path)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			cfg, err := sandbox.Config{}.WithDefaults()
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				sb, err := sandbox.New(ctx, cfg)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := Inspect(ctx, sb, path, bin); err != nil {
					b.Fatal(err)
				}
				sb.Close(ctx)
			}
		})
	}
}
