package abitest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/abi/guest"
	"github.com/wasmhost/wasmhost/internal/limits"
)

// TestFakeLimits reads the limits written as constants in the C and Rust SDKs and their fake
// hosts, and compares each with the number the daemon uses: the ABI's (package abi) and the
// defaults of handlers.limits (limits.Defaults, which `wasmhost config defaults` prints). Every
// limit constant of a fake must be in the table below, so that one added later is tied too.
// The Go SDK's fake (guest.FakeHost) is compared by its constants, which this test imports.
func TestFakeLimits(t *testing.T) {
	d := limits.Defaults()
	goFake := map[string][2]int64{ // the fake's, the daemon's
		"FakeKVKeysPerHandler":       {guest.FakeKVKeysPerHandler, int64(d.KVKeysPerHandler)},
		"FakeKVBytesPerHandler":      {guest.FakeKVBytesPerHandler, int64(d.KVBytesPerHandler)},
		"FakeLogLinesPerCall":        {guest.FakeLogLinesPerCall, int64(d.LogLinesPerCall)},
		"FakeLogBytesPerCall":        {guest.FakeLogBytesPerCall, int64(d.LogBytesPerCall)},
		"FakePublishKeys":            {guest.FakePublishKeys, int64(d.PublishKeys)},
		"FakePublishBytes":           {guest.FakePublishBytes, int64(d.PublishBytes)},
		"FakePluginCallsPerCall":     {guest.FakePluginCallsPerCall, int64(d.PluginCallsPerCall)},
		"FakePluginCallResponseSize": {guest.FakePluginCallResponseSize, int64(d.PluginCallResponseSize)},
	}
	for name, v := range goFake {
		if v[0] != v[1] {
			t.Errorf("abi/guest: %s is %d, the daemon's is %d", name, v[0], v[1])
		}
	}
	// Every numeric constant of the Go fake must be in goFake.
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "../../abi/guest/fake_other.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if i >= len(vs.Values) {
					continue
				}
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					continue
				}
				if _, ok := goFake[name.Name]; !ok {
					t.Errorf("abi/guest/fake_other.go: %s is not tied to the daemon's limits: add it to TestFakeLimits", name.Name)
				}
			}
		}
	}
	cDefine := regexp.MustCompile(`(?m)^#define\s+(WH_\w+)\s+(.+?)\s*(?:/\*.*)?$`)
	rustConst := regexp.MustCompile(`(?m)^pub const (\w+): usize = (.+);`)
	for _, f := range []struct {
		file   string
		re     *regexp.Regexp
		prefix string // every number with it must be in want
		want   map[string]int64
	}{
		{"abi/c/wasmhost.h", cDefine, "WH_MAX_", map[string]int64{
			"WH_MAX_REQUEST_BYTES":  abi.MaxRequestBytes,
			"WH_MAX_RESULT_BYTES":   abi.MaxResultBytes,
			"WH_MAX_LOG_LINE_BYTES": abi.MaxLogLineBytes,
			"WH_MAX_KEY_BYTES":      abi.MaxKeyBytes,
			"WH_MAX_VALUE_BYTES":    abi.MaxValueBytes,
		}},
		{"abi/c/wasmhost_fake.h", cDefine, "WH_FAKE_", map[string]int64{
			"WH_FAKE_MAX_KV_ENTRIES":            abi.MaxKVEntries,
			"WH_FAKE_KV_KEYS_PER_HANDLER":       int64(d.KVKeysPerHandler),
			"WH_FAKE_KV_BYTES_PER_HANDLER":      int64(d.KVBytesPerHandler),
			"WH_FAKE_LOG_LINES_PER_CALL":        int64(d.LogLinesPerCall),
			"WH_FAKE_LOG_BYTES_PER_CALL":        int64(d.LogBytesPerCall),
			"WH_FAKE_PUBLISH_KEYS":              int64(d.PublishKeys),
			"WH_FAKE_PUBLISH_BYTES":             int64(d.PublishBytes),
			"WH_FAKE_PLUGIN_CALLS_PER_CALL":     int64(d.PluginCallsPerCall),
			"WH_FAKE_PLUGIN_CALL_RESPONSE_SIZE": int64(d.PluginCallResponseSize),
		}},
		{"abi/rust/src/lib.rs", rustConst, "MAX_", map[string]int64{
			"MAX_REQUEST_BYTES":  abi.MaxRequestBytes,
			"MAX_RESULT_BYTES":   abi.MaxResultBytes,
			"MAX_LOG_LINE_BYTES": abi.MaxLogLineBytes,
			"MAX_KEY_BYTES":      abi.MaxKeyBytes,
			"MAX_VALUE_BYTES":    abi.MaxValueBytes,
		}},
		{"abi/rust/src/fake.rs", rustConst, "", map[string]int64{
			"MAX_KV_ENTRIES":            abi.MaxKVEntries,
			"KV_KEYS_PER_HANDLER":       int64(d.KVKeysPerHandler),
			"KV_BYTES_PER_HANDLER":      int64(d.KVBytesPerHandler),
			"LOG_LINES_PER_CALL":        int64(d.LogLinesPerCall),
			"LOG_BYTES_PER_CALL":        int64(d.LogBytesPerCall),
			"PUBLISH_KEYS":              int64(d.PublishKeys),
			"PUBLISH_BYTES":             int64(d.PublishBytes),
			"PLUGIN_CALLS_PER_CALL":     int64(d.PluginCallsPerCall),
			"PLUGIN_CALL_RESPONSE_SIZE": int64(d.PluginCallResponseSize),
		}},
	} {
		b, err := os.ReadFile("../../" + f.file)
		if err != nil {
			t.Fatal(err)
		}
		found := map[string]bool{}
		for _, m := range f.re.FindAllStringSubmatch(string(b), -1) {
			name, expr := m[1], m[2]
			want, ok := f.want[name]
			if !ok {
				if _, err := evalConst(expr); err == nil && strings.HasPrefix(name, f.prefix) {
					t.Errorf("%s: %s = %s is not tied to the daemon's limits: add it to TestFakeLimits", f.file, name, expr)
				}
				continue
			}
			found[name] = true
			got, err := evalConst(expr)
			if err != nil {
				t.Errorf("%s: %s: %v", f.file, name, err)
			} else if got != want {
				t.Errorf("%s: %s is %d (%s), the daemon's is %d", f.file, name, got, expr, want)
			}
		}
		for name := range f.want {
			if !found[name] {
				t.Errorf("%s: no constant %s", f.file, name)
			}
		}
	}
}

// evalConst evaluates the constant expressions the SDKs write their limits in: a decimal
// number (with _ between digits in Rust), or one shifted left by another, in parentheses or
// not: 16384, 16_384, (64 << 10), 1 << 20.
func evalConst(expr string) (int64, error) {
	s := strings.NewReplacer("(", "", ")", "", " ", "", "_", "").Replace(expr)
	base, shift, shifted := strings.Cut(s, "<<")
	n, err := strconv.ParseInt(base, 10, 64)
	if err != nil {
		return 0, err
	}
	if !shifted {
		return n, nil
	}
	k, err := strconv.ParseUint(shift, 10, 6)
	if err != nil {
		return 0, err
	}
	return n << k, nil
}
