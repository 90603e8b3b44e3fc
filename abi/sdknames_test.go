package abi_test

import (
	"maps"
	"os"
	"regexp"
	"slices"
	"testing"

	"github.com/wasmhost/wasmhost/abi"
)

// TestSDKNames checks the export and import names written in the SDKs of other languages
// against the constants of this package: each must be a name of the ABI, and each SDK must
// implement every export and wrap every host function.
func TestSDKNames(t *testing.T) {
	for _, sdk := range []struct {
		file            string
		export, imports *regexp.Regexp
	}{
		{"c/wasmhost.c", regexp.MustCompile(`(?m)^WH_EXPORT\((\w+)\)`), regexp.MustCompile(`(?m)^WH_IMPORT\((\w+)\)`)},
		{"assemblyscript/wasmhost/index.ts", regexp.MustCompile(`(?m)^export function (wasmhost_\w+)\(`), regexp.MustCompile(`@external\("wasmhost", "(\w+)"\)`)},
		{"rust/src/lib.rs", regexp.MustCompile(`pub extern "C" fn (\w+)\(`), regexp.MustCompile(`#\[link_name = "(\w+)"\]`)},
	} {
		b, err := os.ReadFile(sdk.file)
		if err != nil {
			t.Fatal(err)
		}
		check := func(what string, re *regexp.Regexp, sigs map[string]abi.Signature, skip ...string) {
			found := map[string]bool{}
			for _, m := range re.FindAllStringSubmatch(string(b), -1) {
				if _, ok := sigs[m[1]]; !ok {
					t.Errorf("%s: %s %q is not in the ABI", sdk.file, what, m[1])
				}
				found[m[1]] = true
			}
			for _, name := range slices.Sorted(maps.Keys(sigs)) {
				if !found[name] && !slices.Contains(skip, name) {
					t.Errorf("%s: no %s %q", sdk.file, what, name)
				}
			}
		}
		check("export", sdk.export, abi.ExportSignatures, abi.ExportInitialize) // the toolchain's
		check("import", sdk.imports, abi.ImportSignatures)
	}
}
