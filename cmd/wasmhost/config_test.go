package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/internal/config"
)

func writeConfig(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "wasmhost.yaml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestConfigMistakes feeds config files with every kind of mistake to `wasmhost config check`
// and checks that each is named by its key.
func TestConfigMistakes(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		want       []string // each must appear in the error
	}{
		{"unknown top-level key", "socketdir: /x\n", []string{"line 1: field socketdir not found"}},
		{"unknown nested key", "handlers:\n  callTimeOut: 5s\n", []string{"handlers.callTimeOut", "line 2: field callTimeOut not found"}},
		{"bad duration", "handlers:\n  callTimeout: 5 seconds\n", []string{"handlers.callTimeout", `"5 seconds" is not a duration`}},
		{"bad size", "handlers:\n  memoryLimit: 12XB\n", []string{"handlers.memoryLimit", `"12XB" is not a size`}},
		{"wrong type", "reconciler:\n  maxConcurrent: many\n", []string{"reconciler.maxConcurrent", "line 2"}},
		{"several at once", "handlerz: /x\nwatcher:\n  resync: soon\n", []string{"handlerz", "watcher.resync"}},
		{"not yaml", "socketDir: [unclosed\n", []string{"config"}},
		{"kubelet's socket dir", "socketDir: /var/lib/kubelet/plugins_registry\n", []string{"socketDir", "kubelet's own socket directory"}},
		{"empty dir", "handlerDir: \"\"\n", []string{"handlerDir: must not be empty"}},
		{"zero timeout", "registration:\n  notifyTimeout: 0s\n", []string{"registration.notifyTimeout: must be a positive duration"}},
		{"negative resync", "watcher:\n  resync: -1s\n", []string{"watcher.resync: must not be negative"}},
		{"backoff order", "reconciler:\n  initialBackoff: 3s\n  maxBackoff: 1s\n", []string{"reconciler.maxBackoff: 1s is below reconciler.initialBackoff 3s"}},
		{"concurrency", "reconciler:\n  maxConcurrent: 0\n", []string{"reconciler.maxConcurrent: must be at least 1"}},
		{"memory too small", "handlers:\n  memoryLimit: 1KiB\n", []string{"handlers.memoryLimit: must be between 64KiB and 4GiB, got 1KiB"}},
		{"unknown capability", "handlers:\n  types:\n    CSIPlugin:\n      capabilities: [network]\n", []string{`handlers.types.CSIPlugin.capabilities: unknown capability "network" (known: plugin_call)`}},
		{"log format", "log:\n  format: xml\n", []string{`log.format: want auto, text or json, got "xml"`}},
		{"log level", "log:\n  level: loud\n", []string{`log.level: want debug, info, warn or error, got "loud"`}},
		{"metrics address", "metrics:\n  listen: nowhere\n", []string{`metrics.listen: want off, unix:/path or host:port`}},
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
	out, err := runRoot(t, "config", "check", "../../examples/config/wasmhost.yaml")
	if err != nil || !strings.Contains(out, ": ok") {
		t.Fatalf("the shipped config: %v\n%s", err, out)
	}
	// What `config defaults` prints is itself a valid config that means the defaults.
	defaults, err := runRoot(t, "config", "defaults")
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.SocketDir = "changed"
	if err := config.Load(writeConfig(t, defaults), &cfg); err != nil {
		t.Fatalf("config defaults does not read back: %v\n%s", err, defaults)
	}
	if cfg.SocketDir != config.Default().SocketDir || cfg.Reconciler.MaxBackoff != config.Duration(2*time.Minute+2*time.Second) || cfg.Handlers.MemoryLimit != 64<<20 {
		t.Errorf("defaults read back as %+v", cfg)
	}
}

// TestFlagsOverrideFile checks the order defaults < file < flags.
func TestFlagsOverrideFile(t *testing.T) {
	file := writeConfig(t, "socketDir: /from/file\nhandlerDir: /handlers/from/file\nhandlers:\n  callTimeout: 7s\n")
	cmd := newRunCmd()
	if err := cmd.ParseFlags([]string{"--config", file, "--socket-dir", "/from/flag", "--handler-timeout", "9s"}); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	if err := config.Load(file, &cfg); err != nil {
		t.Fatal(err)
	}
	if err := overlayFlags(cmd, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.SocketDir != "/from/flag" || cfg.HandlerDir != "/handlers/from/file" || cfg.Handlers.CallTimeout != config.Duration(9*time.Second) {
		t.Errorf("got socketDir %q handlerDir %q callTimeout %s", cfg.SocketDir, cfg.HandlerDir, cfg.Handlers.CallTimeout)
	}
	if cfg.StateDir != config.Default().StateDir {
		t.Errorf("stateDir %q, want the default", cfg.StateDir)
	}
}

func TestByteSize(t *testing.T) {
	for in, want := range map[string]config.ByteSize{"64MiB": 64 << 20, "512KiB": 512 << 10, "1GiB": 1 << 30, "100": 100, "7B": 7} {
		got, err := config.ParseByteSize(in)
		if err != nil || got != want {
			t.Errorf("config.ParseByteSize(%q) = %d, %v; want %d", in, got, err, want)
		}
		if back, _ := config.ParseByteSize(got.String()); back != got {
			t.Errorf("%s does not read back", got)
		}
	}
	for _, bad := range []string{"", "MiB", "-1KiB", "1.5MiB", "10TB"} {
		if _, err := config.ParseByteSize(bad); err == nil {
			t.Errorf("config.ParseByteSize(%q) accepted", bad)
		}
	}
}
