package conformance

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var (
	valid   = Plugin{Name: "good", Versions: []string{"v1"}}
	invalid = []Plugin{{Name: "old", Versions: []string{"v0"}}}
)

// The well-behaved mode of testdata/handler.wat passes every check.
func TestHandlerKitPasses(t *testing.T) {
	Run(t, "testdata/handler.wasm", Options{PluginType: "conformance.example", Valid: valid, Invalid: invalid})
}

// withMode writes a copy of testdata/handler.wasm with its behaviour byte set to mode.
func withMode(t *testing.T, mode byte) string {
	t.Helper()
	b, err := os.ReadFile("testdata/handler.wasm")
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(b, []byte("MODE:g"))
	if i < 0 {
		t.Fatal("no MODE:g in testdata/handler.wasm")
	}
	b[i+5] = mode
	path := filepath.Join(t.TempDir(), "handler-"+string(mode)+".wasm")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Each faulty behaviour fails the checks it should, with a message that says what is wrong,
// and only those.
func TestHandlerKitFindsProblems(t *testing.T) {
	for _, tc := range []struct {
		mode   byte
		failed map[string]string // check -> part of the problem
	}{
		{'g', nil},
		{'a', map[string]string{"reject/old": `Validate accepted plugin "old"`}},
		{'r', map[string]string{"reject/old": "without a reason"}},
		{'v', map[string]string{"validate": `Validate changed the key-value store (added "1")`}},
		{'t', map[string]string{"register": "Register failed: host: wasm trap", "no-traps": "register trapped"}},
		{'n', map[string]string{"register-again": "already registered"}},
		{'m', map[string]string{"deregister": "not registered in this instance", "deregister-unknown": "not registered in this instance"}},
		{'l', map[string]string{"deregister": "the store is not as before Register (added"}},
		{'e', map[string]string{"deregister-unknown": "no record"}},
	} {
		t.Run(string(tc.mode), func(t *testing.T) {
			results, err := Check(t.Context(), withMode(t, tc.mode), Options{Valid: valid, Invalid: invalid})
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, r := range results {
				names = append(names, r.Name)
				want, bad := tc.failed[r.Name]
				switch {
				case r.Skipped:
					if tc.mode == 'g' || tc.mode == 'a' || tc.mode == 'r' {
						t.Errorf("%s skipped: %s", r.Name, r.Problem)
					}
				case bad && !strings.Contains(r.Problem, want):
					t.Errorf("%s: problem %q, want it to say %q", r.Name, r.Problem, want)
				case !bad && r.Problem != "":
					t.Errorf("%s: unexpected problem %q", r.Name, r.Problem)
				}
			}
			if tc.mode == 'g' {
				want := []string{"module", "exports", "imports", "abi-version", "manifest", "grants", "load", "validate",
					"register", "register-again", "deregister", "deregister-unknown", "reject/old", "deadline", "no-traps"}
				if !slices.Equal(names, want) {
					t.Errorf("checks %q\nwant %q", names, want)
				}
			}
		})
	}
}

// Modules that are wrong as modules fail the static checks and are not called.
func TestHandlerKitBadModules(t *testing.T) {
	for name, tc := range map[string]struct {
		opts   Options
		failed map[string]string
	}{
		"notwasm":     {Options{}, map[string]string{"module": "not a WebAssembly binary module"}},
		"badsig":      {Options{}, map[string]string{"exports": "export wasmhost_validate is function () -> (i32), want function (i32) -> (i32)", "load": "has signature"}},
		"abi2":        {Options{}, map[string]string{"abi-version": "returned 2", "load": "ABI version 2 not supported"}},
		"ungranted":   {Options{}, map[string]string{"grants": "handlers.types.plain.example.capabilities: [plugin_call]", "load": "not granted"}},
		"importmem":   {Options{PluginType: "x"}, map[string]string{"imports": "imports memory env.mem", "abi-version": "could not be read", "load": "imports memory"}},
		"badmanifest": {Options{PluginType: "x"}, map[string]string{"abi-version": "manifest malformed", "load": "manifest malformed"}},
	} {
		t.Run(name, func(t *testing.T) {
			tc.opts.Valid = valid
			results, err := Check(t.Context(), filepath.Join("..", "internal", "host", "testdata", name+".wasm"), tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range results {
				want, bad := tc.failed[r.Name]
				switch {
				case r.Skipped:
				case bad && !strings.Contains(r.Problem, want):
					t.Errorf("%s: problem %q, want it to say %q", r.Name, r.Problem, want)
				case !bad && r.Problem != "":
					t.Errorf("%s: unexpected problem %q", r.Name, r.Problem)
				case bad:
					t.Logf("%s: %s", r.Name, r.Problem)
				}
			}
		})
	}
}

func TestHandlerKitOptions(t *testing.T) {
	if _, err := Check(t.Context(), "testdata/handler.wasm", Options{}); err == nil {
		t.Error("Check without a valid plugin: no error")
	}
	_, err := Check(t.Context(), "testdata/handler.wasm", Options{Valid: valid, Invalid: []Plugin{{Name: "bad\x00name"}}})
	if err == nil || !strings.Contains(err.Error(), "Invalid[0]") {
		t.Errorf("Check with an invalid plugin the daemon would refuse: %v", err)
	}
	if _, err := Check(t.Context(), "testdata/missing.wasm", Options{Valid: valid}); err == nil {
		t.Error("Check of a missing file: no error")
	}
}
