package main

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/wasmhost/wasmhost/admin/client"
	"github.com/wasmhost/wasmhost/internal/config"
)

// configHeader is what every config file starts with.
const configHeader = "apiVersion: wasmhost.dev/v1alpha1\nkind: WasmhostConfiguration\n"

func writeConfig(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "wasmhost.yaml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestConfigCheck: `wasmhost config check` names the file and every mistake by its key; the
// parsing itself is tested in internal/config.
func TestConfigCheck(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		want       []string // each must appear in the error
	}{
		{"no header", "socketDir: /x\n", []string{"config ", "wasmhost.yaml: apiVersion and kind are missing: a config file starts with apiVersion: wasmhost.dev/v1alpha1 and kind: WasmhostConfiguration"}},
		{"unknown version", "apiVersion: wasmhost.dev/v2\nkind: WasmhostConfiguration\n", []string{"wasmhost.yaml:\nline 1: apiVersion: \"wasmhost.dev/v2\" is not known; accepted: wasmhost.dev/v1alpha1"}},
		{"bad values", configHeader + "handlerz: /x\nhandlers:\n  memoryLimit: 64m\n", []string{"wasmhost.yaml:\nline 3: handlerz: unknown key; did you mean handlers?\nline 5: handlers.memoryLimit (flag --handler-memory-limit): ", "m is milli"}},
		{"invalid", configHeader + "handlers:\n  memoryLimit: 1Ki\n", []string{"wasmhost.yaml:\nline 4: handlers.memoryLimit (flag --handler-memory-limit): must be between 64Ki and 4Gi, got 1Ki"}},
		{"unknown key and bad value in one pass", configHeader + "socketdir: /x\nreconciler:\n  maxConcurrent: 0\n", []string{"wasmhost.yaml:\nline 3: socketdir: unknown key; did you mean socketDir?\nline 5: reconciler.maxConcurrent: must be at least 1, got 0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := runRoot(t, "config", "check", writeConfig(t, tc.file))
			if err == nil {
				t.Fatal("config check accepted it")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not say %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestConfigCheckAcceptsShippedAndDefaults(t *testing.T) {
	for _, f := range []string{"../../examples/config/wasmhost.yaml", writeConfig(t, configHeader+"handlers:\n  memoryLimit: 128Mi\n")} {
		out, err := runRoot(t, "config", "check", f)
		if err != nil || !strings.Contains(out, ": ok") {
			t.Fatalf("%s: %v\n%s", f, err, out)
		}
	}
	// What `config defaults` prints is itself a valid config that means the defaults: it starts
	// with the header, and writes sizes as Kubernetes does.
	defaults, err := runRoot(t, "config", "defaults")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(defaults, configHeader) || !strings.Contains(defaults, "\nhandlers:\n  callTimeout: 5s\n  memoryLimit: 64Mi\n") {
		t.Errorf("config defaults:\n%s", defaults)
	}
	cfg := config.Default()
	cfg.SocketDir = "changed"
	if _, err := config.Check(writeConfig(t, defaults), &cfg); err != nil {
		t.Fatalf("config defaults does not read back: %v\n%s", err, defaults)
	}
	if cfg.SocketDir != config.Default().SocketDir || cfg.Reconciler.MaxBackoff != config.Duration(2*time.Minute+2*time.Second) || cfg.Handlers.MemoryLimit != 64<<20 {
		t.Errorf("defaults read back as %+v", cfg)
	}
}

// TestFlagsOverrideFile checks the order defaults < file < flags.
func TestFlagsOverrideFile(t *testing.T) {
	file := writeConfig(t, configHeader+"socketDir: /from/file\nhandlerDir: /handlers/from/file\nhandlers:\n  callTimeout: 7s\n  memoryLimit: 32Mi\n")
	cmd := newRunCmd()
	if err := cmd.ParseFlags([]string{"--config", file, "--socket-dir", "/from/flag", "--handler-timeout", "9s", "--handler-memory-limit", "1Gi"}); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	if _, err := config.Load(file, &cfg); err != nil {
		t.Fatal(err)
	}
	if err := overlayFlags(cmd, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.SocketDir != "/from/flag" || cfg.HandlerDir != "/handlers/from/file" || cfg.Handlers.CallTimeout != config.Duration(9*time.Second) ||
		cfg.Handlers.MemoryLimit != 1<<30 {
		t.Errorf("got socketDir %q handlerDir %q callTimeout %s memoryLimit %s", cfg.SocketDir, cfg.HandlerDir, cfg.Handlers.CallTimeout, cfg.Handlers.MemoryLimit)
	}
	if cfg.StateDir != config.Default().StateDir {
		t.Errorf("stateDir %q, want the default", cfg.StateDir)
	}

	// A size flag in a form that is not a size says which flag.
	cmd = newRunCmd()
	err := cmd.ParseFlags([]string{"--handler-memory-limit", "64m"})
	if err == nil || !strings.Contains(err.Error(), "--handler-memory-limit") || !strings.Contains(err.Error(), "m is milli") {
		t.Errorf("--handler-memory-limit 64m: %v", err)
	}
}

// TestDefaultAdminSocket: the client commands and admin/client look where the daemon listens
// by default.
func TestDefaultAdminSocket(t *testing.T) {
	def := config.Default()
	if got, want := client.DefaultSocketPath, def.AdminSocket(); got != want {
		t.Errorf("client.DefaultSocketPath = %q, the daemon's default admin socket is %q", got, want)
	}
}

// TestMemoryLimit: the soft memory limit taken from a cgroup leaves room for the handlers'
// instances, whose memory is mapped outside the Go heap but counts against the cgroup.
func TestMemoryLimit(t *testing.T) {
	const fromCgroup = "cgroup memory.max less handlers.limits.instanceMemory"
	for _, tc := range []struct {
		configured, cgroup, instances int64
		env                           string
		want                          int64
		from                          string
	}{
		{0, 0, 512 << 20, "", 0, ""},
		{0, 1 << 30, 0, "", 1 << 30 / 10 * 9, fromCgroup},
		{0, 1 << 30, 512 << 20, "", 1<<30/10*9 - 512<<20, fromCgroup},
		{0, 256 << 20, 512 << 20, "", 256 << 20 / 10 * 9 / 4, fromCgroup},
		{100 << 20, 256 << 20, 512 << 20, "", 100 << 20, "memoryLimit"},
		{100 << 20, 256 << 20, 512 << 20, "50MiB", 0, ""},
	} {
		if got, from := memoryLimit(tc.configured, tc.env, tc.cgroup, tc.instances); got != tc.want || from != tc.from {
			t.Errorf("memoryLimit(%d, %q, %d, %d) = %d, %q; want %d, %q", tc.configured, tc.env, tc.cgroup, tc.instances, got, from, tc.want, tc.from)
		}
	}
}

// TestFlagsNameTheirKeys: every flag of wasmhost run that sets a config key is the flag the
// config's errors name for that key, and the other way round.
func TestFlagsNameTheirKeys(t *testing.T) {
	want := config.Flags()
	cmd := newRunCmd()
	var got []string
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Name != "config" {
			got = append(got, "--"+f.Name)
		}
	})
	slices.Sort(got)
	named := slices.Sorted(maps.Values(want))
	if !slices.Equal(got, named) {
		t.Errorf("wasmhost run's flags %v; the config's errors name %v", got, named)
	}
}

// TestConfigCheckWarnsOfRetiredKeys: a file that sets a knob that is a constant now is still
// accepted, with a warning naming the key and its line.
func TestConfigCheckWarnsOfRetiredKeys(t *testing.T) {
	var stderr strings.Builder
	root := newRootCmd()
	root.SetArgs([]string{"config", "check", writeConfig(t, configHeader+"reconciler:\n  stalledAfter: 10ms\n")})
	var stdout strings.Builder
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	if err := root.Execute(); err != nil {
		t.Fatalf("config check refused a file with a retired key: %v", err)
	}
	if !strings.Contains(stderr.String(), "warning: line 4: reconciler.stalledAfter is ignored") || !strings.Contains(stdout.String(), ": ok") {
		t.Errorf("stdout %q, stderr %q", stdout.String(), stderr.String())
	}
}
