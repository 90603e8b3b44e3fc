package config_test

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/wasmhost/wasmhost/internal/config"
)

// header is what every config file starts with.
const header = "apiVersion: wasmhost.dev/v1alpha1\nkind: WasmhostConfiguration\n"

func writeFile(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "wasmhost.yaml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// check reads a file over the defaults and validates it, as `wasmhost config check` and
// `wasmhost run --config` do.
func check(t *testing.T, text string) (config.Config, string, error) {
	t.Helper()
	path := writeFile(t, text)
	cfg := config.Default()
	warnings, err := config.Check(path, &cfg)
	if len(warnings) > 0 {
		t.Errorf("warnings: %q", warnings)
	}
	return cfg, path, err
}

// TestMistakes feeds config files with every kind of mistake and checks that each is named by
// its key (and the file, when the file is what is wrong).
func TestMistakes(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		want       []string // each must appear in the error
	}{
		{"unknown top-level key", header + "socketdir: /x\n", []string{"line 3: socketdir: unknown key; did you mean socketDir?"}},
		{"unknown nested key", header + "handlers:\n  callTimeOut: 5s\n", []string{"line 4: handlers.callTimeOut: unknown key; did you mean handlers.callTimeout?"}},
		{"bad duration", header + "handlers:\n  callTimeout: 5 seconds\n", []string{"line 4: handlers.callTimeout (flag --handler-timeout): ", `"5 seconds" is not a duration`}},
		{"bad size", header + "handlers:\n  memoryLimit: 12XB\n", []string{"line 4: handlers.memoryLimit (flag --handler-memory-limit): ", `"12XB" is not a size`, "64Mi"}},
		{"milli is not a size", header + "handlers:\n  memoryLimit: 64m\n", []string{"handlers.memoryLimit", `"64m" is not a size`, "m is milli", "write Mi"}},
		{"fraction of a byte", header + "handlers:\n  memoryLimit: 1.5\n", []string{"handlers.memoryLimit", `"1.5" is not a whole number of bytes`}},
		{"wrong type", header + "reconciler:\n  maxConcurrent: many\n", []string{`line 4: reconciler.maxConcurrent: want a whole number, got "many"`}},
		{"several at once", header + "handlerz: /x\nregistration:\n  getInfoTimeout: soon\n", []string{"line 3: handlerz: unknown key; did you mean handlers?", "line 5: registration.getInfoTimeout: "}},
		{"not yaml", header + "socketDir: [unclosed\n", []string{"config "}},
		{"kubelet's socket dir", header + "socketDir: /var/lib/kubelet/plugins_registry\n", []string{"line 3: socketDir (flag --socket-dir): ", "kubelet's own socket directory"}},
		{"empty dir", header + "handlerDir: \"\"\n", []string{"line 3: handlerDir (flag --handler-dir): must not be empty"}},
		{"zero timeout", header + "registration:\n  notifyTimeout: 0s\n", []string{"line 4: registration.notifyTimeout: must be a positive duration"}},
		{"negative first wait", header + "handlers:\n  pull:\n    firstWait: -1s\n", []string{"line 5: handlers.pull.firstWait: must not be negative"}},
		{"pull timeout within the first wait", header + "handlers:\n  pull:\n    timeout: 2m\n", []string{"line 5: handlers.pull.timeout: 2m0s is not shorter than handlers.pull.firstWait (1m0s)"}},
		{"concurrency", header + "reconciler:\n  maxConcurrent: 0\n", []string{"reconciler.maxConcurrent: must be at least 1"}},
		{"memory too small", header + "handlers:\n  memoryLimit: 1Ki\n", []string{"handlers.memoryLimit (flag --handler-memory-limit): must be between 64Ki and 4Gi, got 1Ki"}},
		{"memory too large", header + "handlers:\n  memoryLimit: 5G\n", []string{"handlers.memoryLimit (flag --handler-memory-limit): must be between 64Ki and 4Gi, got 5000000000"}},
		{"unknown capability", header + "handlers:\n  types:\n    CSIPlugin:\n      capabilities: [network]\n", []string{`handlers.types.CSIPlugin.capabilities: unknown capability "network" (known: plugin_call)`}},
		{"log format", header + "log:\n  format: xml\n", []string{`line 4: log.format (flag --log-format): want auto, text or json, got "xml"`}},
		{"log level", header + "log:\n  level: loud\n", []string{`log.level (flag --log-level): want debug, info, warn or error, got "loud"`}},
		{"a mapping for a value", header + "handlers:\n  poolSize:\n    a: 1\n", []string{"line 5: handlers.poolSize: want a whole number, got a mapping"}},
		{"a list for a mapping", header + "reconciler: [1]\n", []string{"line 3: reconciler: want a mapping of keys, got a list"}},
		{"unknown key under a type", header + "handlers:\n  types:\n    CSIPlugin:\n      fiel: csi.wasm\n", []string{"line 6: handlers.types.CSIPlugin.fiel: unknown key; did you mean handlers.types.CSIPlugin.file?"}},
		{"nothing close", header + "handlers:\n  zzzzzzzz: 1\n", []string{"line 4: handlers.zzzzzzzz: unknown key; handlers has callTimeout, memoryLimit"}},
		{"metrics address", header + "metrics:\n  listen: nowhere\n", []string{`metrics.listen (flag --metrics-listen): want off, unix:/path or host:port`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := check(t, tc.file)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not say %q:\n%v", w, err)
				}
			}
		})
	}
}

// TestHeader: a file says which format it is in, as a kubelet config does; without the header,
// or with one this daemon does not know, it is refused with the file, the field and what is
// accepted.
func TestHeader(t *testing.T) {
	for _, tc := range []struct {
		name, file, want string // want: the error after "config <path>: "
	}{
		{"no header", "socketDir: /x\n",
			"apiVersion and kind are missing: a config file starts with apiVersion: wasmhost.dev/v1alpha1 and kind: WasmhostConfiguration"},
		{"empty file", "",
			"apiVersion and kind are missing: a config file starts with apiVersion: wasmhost.dev/v1alpha1 and kind: WasmhostConfiguration"},
		{"no kind", "apiVersion: wasmhost.dev/v1alpha1\nsocketDir: /x\n",
			"kind is missing: a config file starts with apiVersion: wasmhost.dev/v1alpha1 and kind: WasmhostConfiguration"},
		{"no apiVersion", "kind: WasmhostConfiguration\n",
			"apiVersion is missing: a config file starts with apiVersion: wasmhost.dev/v1alpha1 and kind: WasmhostConfiguration"},
		{"unknown version", "apiVersion: wasmhost.dev/v1\nkind: WasmhostConfiguration\n",
			`line 1: apiVersion: "wasmhost.dev/v1" is not known; accepted: wasmhost.dev/v1alpha1`},
		{"the kubelet's config", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n",
			"line 1: apiVersion: \"kubelet.config.k8s.io/v1beta1\" is not known; accepted: wasmhost.dev/v1alpha1\n" +
				`line 2: kind: "KubeletConfiguration" is not known; accepted: WasmhostConfiguration`},
		{"kind not a string", "apiVersion: wasmhost.dev/v1alpha1\nkind: [WasmhostConfiguration]\n",
			`line 2: kind: a list is not known; accepted: WasmhostConfiguration`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, path, err := check(t, tc.file)
			if err == nil {
				t.Fatal("accepted")
			}
			sep := ": "
			if strings.HasPrefix(tc.want, "line ") {
				sep = ":\n" // a list of mistakes by line, as for the rest of the file
			}
			if want := "config " + path + sep + tc.want; err.Error() != want {
				t.Errorf("error:\n%v\nwant:\n%s", err, want)
			}
		})
	}

	cfg, _, err := check(t, header)
	if err != nil {
		t.Fatalf("a file with only the header: %v", err)
	}
	if cfg.APIVersion != config.APIVersion || cfg.Kind != config.Kind {
		t.Errorf("header read as %q %q", cfg.APIVersion, cfg.Kind)
	}
}

// TestSizesInEveryForm: a memory limit written as Kubernetes writes one, or in the IEC form.
func TestSizesInEveryForm(t *testing.T) {
	for in, want := range map[string]config.ByteSize{
		"64Mi": 64 << 20, "1Gi": 1 << 30, "512Ki": 512 << 10, "4Gi": 4 << 30, "1.5Gi": 3 << 29,
		"67108864": 64 << 20, "500M": 500e6, "2G": 2e9, "65536k": 65536e3,
		"64MiB": 64 << 20, "512KiB": 512 << 10, "1GiB": 1 << 30,
	} {
		cfg, _, err := check(t, header+"handlers:\n  memoryLimit: "+in+"\n")
		if err != nil || cfg.Handlers.MemoryLimit != want {
			t.Errorf("memoryLimit: %s read as %d, %v; want %d", in, cfg.Handlers.MemoryLimit, err, want)
		}
	}
}

// TestDefaults: every key has a default that is valid, and the header is part of it.
func TestDefaults(t *testing.T) {
	d := config.Default()
	if err := d.Validate(); err != nil {
		t.Fatalf("the defaults are not valid: %v", err)
	}
	if d.APIVersion != "wasmhost.dev/v1alpha1" || d.Kind != "WasmhostConfiguration" {
		t.Errorf("default header %q %q", d.APIVersion, d.Kind)
	}
	if d.Handlers.MemoryLimit != 64<<20 || d.Handlers.MemoryLimit.String() != "64Mi" {
		t.Errorf("default memoryLimit %d, written %s; want 64Mi", d.Handlers.MemoryLimit, d.Handlers.MemoryLimit)
	}
	if d.Reconciler.MaxBackoff != config.Duration(2*time.Minute+2*time.Second) {
		t.Errorf("default reconciler.maxBackoff %s", d.Reconciler.MaxBackoff)
	}
}

// TestEveryKeyDocumented: every key of the file has a row in docs/configuration.md, and
// `config defaults` (the defaults as YAML) shows it.
func TestEveryKeyDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	out, err := yaml.Marshal(config.Default())
	if err != nil {
		t.Fatal(err)
	}
	var defaults map[string]any
	if err := yaml.Unmarshal(out, &defaults); err != nil {
		t.Fatal(err)
	}
	var walk func(prefix string, typ reflect.Type)
	walk = func(prefix string, typ reflect.Type) {
		for i := range typ.NumField() {
			f := typ.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "" || name == "-" {
				continue
			}
			key := prefix + name
			if f.Type.Kind() == reflect.Struct && !reflect.PointerTo(f.Type).Implements(reflect.TypeFor[yaml.Unmarshaler]()) {
				walk(key+".", f.Type) // a section of the file (handlers.limits is internal/limits')
				continue
			}
			if f.Type.Kind() == reflect.Map {
				// A map's entries are documented under <key>.<name>.
				if !strings.Contains(string(doc), "| `"+key+".") {
					t.Errorf("docs/configuration.md has no row for %s.<…>", key)
				}
				continue
			}
			if !strings.Contains(string(doc), "| `"+key+"` |") {
				t.Errorf("docs/configuration.md has no row for %s", key)
			}
			var v any = defaults
			for _, part := range strings.Split(key, ".") {
				m, _ := v.(map[string]any)
				var ok bool
				if v, ok = m[part]; !ok {
					t.Errorf("config defaults does not show %s", key)
					break
				}
			}
		}
	}
	walk("", reflect.TypeFor[config.Config]())
}

// TestEveryMistakeInOnePass: unknown keys, values of the wrong kind and values out of range are
// reported together, by line, in the file's own key names, never in Go's.
func TestEveryMistakeInOnePass(t *testing.T) {
	_, path, err := check(t, header+
		"socketdir: /x\n"+ // 3
		"reconciler:\n"+
		"  maxConcurrent: 0\n"+ // 5
		"  maxConcurent: 1\n"+ // 6
		"handlers:\n"+
		"  callTimeout: soon\n"+ // 8
		"  poolSize: -1\n"+ // 9
		"  limits:\n"+
		"    maxModuleSize: 0\n"+ // 11
		"metrics:\n"+
		"  listen: nowhere\n") // 13
	if err == nil {
		t.Fatal("accepted")
	}
	want := "config " + path + ":\n" +
		"line 3: socketdir: unknown key; did you mean socketDir?\n" +
		"line 5: reconciler.maxConcurrent: must be at least 1, got 0\n" +
		"line 6: reconciler.maxConcurent: unknown key; did you mean reconciler.maxConcurrent?\n" +
		`line 8: handlers.callTimeout (flag --handler-timeout): "soon" is not a duration (e.g. 500ms, 5s, 2m)` + "\n" +
		"line 9: handlers.poolSize: must not be negative (0 means one per CPU), got -1\n" +
		"line 11: handlers.limits.maxModuleSize: must be positive, got 0\n" +
		`line 13: metrics.listen (flag --metrics-listen): want off, unix:/path or host:port, got "nowhere"`
	if err.Error() != want {
		t.Errorf("error:\n%v\nwant:\n%s", err, want)
	}
	for _, goName := range []string{"config.", "Config", "int", "field "} {
		if strings.Contains(strings.ReplaceAll(err.Error(), path, ""), goName) {
			t.Errorf("the error names %q, a Go name:\n%v", goName, err)
		}
	}
}

// TestRetiredKeysStillLoad: a file that sets every key retired so far loads, with a warning
// for each that it is ignored and the value used, and the keys beside them are read; the
// retired values stay the defaults.
func TestRetiredKeysStillLoad(t *testing.T) {
	tree := map[string]any{}
	for key := range config.Retired {
		parts := strings.Split(key, ".")
		m := tree
		for _, p := range parts[:len(parts)-1] {
			if m[p] == nil {
				m[p] = map[string]any{}
			}
			m = m[p].(map[string]any)
		}
		m[parts[len(parts)-1]] = 3
	}
	tree["reconciler"].(map[string]any)["maxConcurrent"] = 8
	tree["handlers"].(map[string]any)["limits"].(map[string]any)["maxNesting"] = 100
	body, err := yaml.Marshal(tree)
	if err != nil {
		t.Fatal(err)
	}
	path := writeFile(t, header+string(body))
	cfg := config.Default()
	warnings, err := config.Check(path, &cfg)
	if err != nil {
		t.Fatalf("a file with retired keys: %v", err)
	}
	if cfg.Reconciler.MaxConcurrent != 8 || cfg.Handlers.Limits.MaxNesting != 100 {
		t.Errorf("the keys beside the retired ones were not read: %+v", cfg.Reconciler)
	}
	d := config.Default()
	cfg.Reconciler.MaxConcurrent, cfg.Handlers.Limits.MaxNesting = d.Reconciler.MaxConcurrent, d.Handlers.Limits.MaxNesting
	a, _, _ := strings.Cut(fmt.Sprintf("%+v", cfg), " lines:") // the lines the file set
	if b, _, _ := strings.Cut(fmt.Sprintf("%+v", d), " lines:"); a != b {
		t.Errorf("a retired key changed the config:\n%s\nwant the defaults:\n%s", a, b)
	}
	if len(warnings) != len(config.Retired) {
		t.Fatalf("%d warnings, want one for each of %d retired keys: %q", len(warnings), len(config.Retired), warnings)
	}
	for key, v := range config.Retired {
		if !slices.ContainsFunc(warnings, func(w string) bool {
			return strings.Contains(w, key+" is ignored: it is a constant now ("+v+")")
		}) {
			t.Errorf("no warning for %s with its value %s: %q", key, v, warnings)
		}
	}
	path = writeFile(t, header+"reconciler:\n  stalledAfter: 10ms\n")
	cfg = config.Default()
	warnings, _ = config.Check(path, &cfg)
	if want := "line 4: reconciler.stalledAfter is ignored: it is a constant now (20ms)"; len(warnings) != 1 || !strings.HasPrefix(warnings[0], want) {
		t.Errorf("warnings %q, want one that starts %q", warnings, want)
	}
}
