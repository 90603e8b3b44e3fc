package limits_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/wasmhost/wasmhost/internal/limits"
)

func TestParseByteSize(t *testing.T) {
	for in, want := range map[string]limits.ByteSize{
		"64Mi": 64 << 20, "512Ki": 512 << 10, "1Gi": 1 << 30, "2Ti": 2 << 40, "1Ei": 1 << 60, "0.5Ki": 512, ".5Ki": 512, "1.Ki": 1 << 10,
		"1k": 1000, "1M": 1e6, "1G": 1e9, "1T": 1e12, "1P": 1e15, "1.5k": 1500, "+64Mi": 64 << 20, "1e9": 1e9, "5E6": 5e6,
		"64MiB": 64 << 20, "512KiB": 512 << 10, "1GiB": 1 << 30, "1TiB": 1 << 40, "100": 100, "7B": 7, "0": 0, " 64Mi ": 64 << 20,
	} {
		got, err := limits.ParseByteSize(in)
		if err != nil || got != want {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d", in, got, err, want)
		}
		if back, err := limits.ParseByteSize(got.String()); back != got || err != nil {
			t.Errorf("%s (from %q) reads back as %d, %v", got, in, back, err)
		}
	}
	for in, want := range map[string]string{
		"":        `"" is not a size: want a number of bytes`,
		"Mi":      `"Mi" is not a size`,
		"-1Ki":    `"-1Ki" is not a size: it is negative`,
		"1.5":     `"1.5" is not a whole number of bytes`,
		"0.1Ki":   `"0.1Ki" is not a whole number of bytes`,
		"64m":     `unknown suffix "m" (in a Kubernetes quantity m is milli`,
		"10TB":    `unknown suffix "TB" (write 10T for the decimal unit or 10Ti for the binary one)`,
		"1KB":     `(write 1k for the decimal unit or 1Ki for the binary one)`,
		"64K":     `the decimal kilo is a lower-case k`,
		"1e3Mi":   `"1e3Mi" is not a size`,
		"1e100":   `"1e100" is not a size`,
		"1e-1":    `"1e-1" is not a whole number of bytes`,
		"8Ei":     `"8Ei" is too large a size`,
		"64 Mi":   `"64 Mi" is not a size`,
		"1,000":   `"1,000" is not a size`,
		"sixteen": `"sixteen" is not a size: want a number of bytes`,
	} {
		_, err := limits.ParseByteSize(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseByteSize(%q) = %v; want an error saying %s", in, err, want)
		}
	}
}

func ExampleParseByteSize() {
	for _, s := range []string{"64Mi", "1.5Gi", "500M", "64MiB", "1048576"} {
		b, _ := limits.ParseByteSize(s)
		fmt.Printf("%-8s %11d bytes, written %s\n", s, b, b)
	}
	_, err := limits.ParseByteSize("64m")
	fmt.Println(err)
	// Output:
	// 64Mi        67108864 bytes, written 64Mi
	// 1.5Gi     1610612736 bytes, written 1536Mi
	// 500M       500000000 bytes, written 500000000
	// 64MiB       67108864 bytes, written 64Mi
	// 1048576      1048576 bytes, written 1Mi
	// "64m" is not a size: unknown suffix "m" (in a Kubernetes quantity m is milli, a thousandth: for mebibytes write Mi); want a number of bytes with an optional suffix: Ki, Mi, Gi, Ti (binary, e.g. 64Mi), k, M, G, T (decimal, e.g. 500M), or KiB, MiB, GiB, TiB
}
