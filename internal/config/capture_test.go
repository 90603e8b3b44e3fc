package config_test

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/wasmhost/wasmhost/internal/config"
)

func TestCapture(t *testing.T) {
	cfg, _, err := check(t, header+"handlers:\n  capture:\n    sessions: 4\n    redact: ['secret-[0-9]+']\n  types:\n    Vault:\n      capture: false\n    CSIPlugin:\n      capture: true\n")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Handlers.Capture.Sessions != 4 || !slices.Equal(cfg.Handlers.Capture.Redact, []string{"secret-[0-9]+"}) {
		t.Errorf("handlers.capture read as %+v", cfg.Handlers.Capture)
	}
	if got := slices.Sorted(maps.Keys(cfg.CaptureOptOut())); !slices.Equal(got, []string{"Vault"}) {
		t.Errorf("opted out: %v, want Vault", got)
	}
	if d := config.Default(); d.Handlers.Capture.Sessions != 16 || len(d.Handlers.Capture.Redact) == 0 {
		t.Errorf("defaults %+v", d.Handlers.Capture)
	}
	cfg, _, err = check(t, header+"handlers:\n  capture:\n    redact: []\n")
	if err != nil || len(cfg.Handlers.Capture.Redact) != 0 {
		t.Errorf("redact: [] read as %q (%v)", cfg.Handlers.Capture.Redact, err)
	}
	for file, want := range map[string]string{
		header + "handlers:\n  capture:\n    sessions: -1\n":          "handlers.capture.sessions: must be between 0 (off) and 10000, got -1",
		header + "handlers:\n  capture:\n    redact: ['(unclosed']\n": `handlers.capture.redact: "(unclosed": error parsing regexp`,
	} {
		if _, _, err := check(t, file); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want %q", file, err, want)
		}
	}
}
