package daemon

// Issue 10 end to end: revisions, automatic rollback, rollback and shadow runs, as an operator
// sees them through the admin API: a plugin registered by v1, v2 that traps dropped in and
// rolled back automatically, the history listing both, a rollback by the operator, and a
// shadow candidate whose disagreement is counted without touching the plugin.

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/admin/client"
	adminv1 "github.com/wasmhost/wasmhost/admin/v1"
	"github.com/wasmhost/wasmhost/internal/config"
	"github.com/wasmhost/wasmhost/internal/logtest"
	"github.com/wasmhost/wasmhost/internal/registration/registrationtest"
	"github.com/wasmhost/wasmhost/internal/state"
)

func TestRevisionsRollbackAndShadowEndToEnd(t *testing.T) {
	cfg, base := testDaemonConfig(t)
	cfg.Handlers.Revisions.AutoRollback = config.AutoRollbackConfig{Window: config.Duration(time.Hour), Threshold: 0.5, MinCalls: 2}
	cfg.Reconciler.InitialBackoff = config.Duration(10 * time.Millisecond)
	cfg.Reconciler.MaxBackoff = config.Duration(50 * time.Millisecond)
	src, sums := writeFixtures(t, base, "rev_v1", "rev_v2", "rev_v3", "rev_v4")
	// Dropped in as operators do: a temporary name, then a rename over the handler.
	drop := func(v string) {
		t.Helper()
		b, err := os.ReadFile(src[v])
		if err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(cfg.HandlerDir, ".rev.wasm.tmp")
		if err := os.WriteFile(tmp, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(cfg.HandlerDir, "rev.wasm")); err != nil {
			t.Fatal(err)
		}
	}
	drop("rev_v1")
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	logs := &logtest.Logs{}
	d := runTestDaemon(t, cfg, slog.New(logs))
	c, err := client.Dial(d.AdminSocket())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := t.Context()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		waitUntil(t, what, cond)
	}
	serve := func(name string) *registrationtest.Plugin {
		return registrationtest.Serve(t, filepath.Join(cfg.SocketDir, name+".sock"),
			registrationtest.Info{Type: "rev.example", Name: name, Versions: []string{"1"}}, registrationtest.Options{})
	}
	registeredBy := func(p *registrationtest.Plugin, v, tag string) {
		t.Helper()
		waitFor(p.Path()+" registered", func() bool {
			v := plugin(d, p.Path())
			return v.Registered && v.State == state.StateRegistered
		})
		view := plugin(d, p.Path())
		if view.HandlerSHA256 != sums[v] || view.Published["revision"] != tag {
			t.Errorf("%s: handler %s published %v; want the revision %s (%s) that registered it", p.Path(), view.HandlerSHA256, view.Published, v, sums[v])
		}
	}
	history := func() *adminv1.ListRevisionsResponse {
		t.Helper()
		h, err := c.ListRevisions(ctx, &adminv1.ListRevisionsRequest{PluginType: "rev.example"})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}

	a := serve("a")
	registeredBy(a, "rev_v1", "v1")
	handler := func() *adminv1.Handler {
		hs, err := c.ListHandlers(ctx, &adminv1.ListHandlersRequest{})
		if err != nil || len(hs.GetHandlers()) != 1 {
			t.Fatalf("handlers: %v, %v", hs, err)
		}
		return hs.GetHandlers()[0]
	}
	// The plugin may be told before the store has the loaded handler's row: wait for it.
	waitFor("the handler's row", func() bool { return handler().GetSha256() == sums["rev_v1"] })
	if h := handler(); h.GetName() != "rev" || h.GetVersion() != "1.0.0" {
		t.Errorf("handler name %q version %q; want the manifest's rev 1.0.0", h.GetName(), h.GetVersion())
	}

	// v2 traps: the plugins registering meanwhile fail, and it is rolled back.
	drop("rev_v2")
	waitFor("v2 in the file", func() bool { return handler().GetSha256() == sums["rev_v2"] })
	registeredBy(a, "rev_v1", "v1") // what v1 published stays v1's
	b, e := serve("b"), serve("c")
	waitFor("the automatic rollback", func() bool { return history().GetPin().GetAuto() })
	registeredBy(b, "rev_v1", "v1")
	registeredBy(e, "rev_v1", "v1")
	h := history()
	if revs := h.GetRevisions(); len(revs) != 2 || revs[0].GetSha256() != sums["rev_v2"] || revs[0].GetRolledBack() == "" ||
		revs[0].GetTraps() < 2 || !revs[0].GetInFile() || revs[1].GetSha256() != sums["rev_v1"] || !revs[1].GetPinned() ||
		revs[1].GetVersion() != "1.0.0" || revs[1].GetFirstLoaded() == nil {
		t.Errorf("history after the automatic rollback: %v", revs)
	}
	if pins := handler().GetPins(); len(pins) != 1 || pins[0].GetSha256() != sums["rev_v1"] || pins[0].GetFileSha256() != sums["rev_v2"] {
		t.Errorf("handler pins: %v; want rev.example on v1 over v2", pins)
	}
	// The pin is visible a moment before the rollback's log line is written: wait for it.
	waitFor("the rollback's log line", func() bool { return len(logs.Matching(slog.LevelWarn, "rolled back automatically")) > 0 })
	if l := logs.Matching(slog.LevelWarn, "rolled back automatically"); len(l) != 1 || !strings.Contains(l[0], sums["rev_v2"]) {
		t.Errorf("automatic rollback logged: %q", l)
	}

	// A good v4: the pin goes; the operator rolls back to v1 (v2, rolled back, is skipped)
	// and clears the pin again.
	drop("rev_v4")
	waitFor("v4 serving", func() bool { return history().GetPin() == nil && history().GetRevisions()[0].GetServing() })
	if _, err := c.Rollback(ctx, &adminv1.RollbackRequest{PluginType: "rev.example", Sha256: "00000000"}); err == nil ||
		!strings.Contains(err.Error(), "NotFound") || !strings.Contains(err.Error(), "rev.example") {
		t.Errorf("rollback to an unknown revision: %v", err)
	}
	rb, err := c.Rollback(ctx, &adminv1.RollbackRequest{PluginType: "rev.example"})
	if err != nil || rb.GetRevision().GetSha256() != sums["rev_v1"] {
		t.Fatalf("rollback: %v, %v; want v1", rb, err)
	}
	registeredBy(serve("d"), "rev_v1", "v1")
	if _, err := c.ClearPin(ctx, &adminv1.ClearPinRequest{PluginType: "rev.example"}); err != nil {
		t.Fatal(err)
	}
	registeredBy(serve("f"), "rev_v4", "v4")

	// A shadow that rejects what v4 accepts: counted and logged, the plugin registered by v4.
	sh, err := c.SetShadow(ctx, &adminv1.SetShadowRequest{PluginType: "rev.example", Candidate: src["rev_v3"]})
	if err != nil || sh.GetShadow().GetSha256() != sums["rev_v3"] {
		t.Fatalf("shadow: %v, %v", sh, err)
	}
	registeredBy(serve("g"), "rev_v4", "v4")
	// The run is counted last (after its disagreement and log line): wait for it.
	waitFor("the shadow run counted", func() bool {
		s := handler().GetShadows()
		return history().GetShadow().GetDisagreements() == 1 && len(s) == 1 && s[0].GetRuns() == 1
	})
	if l := logs.Matching(slog.LevelWarn, "shadow handler disagrees"); len(l) != 1 ||
		!strings.Contains(l[0], "serving_decision=accept") || !strings.Contains(l[0], "shadow_decision=reject") {
		t.Errorf("disagreement logged: %q", l)
	}
	if s := handler().GetShadows(); len(s) != 1 || s[0].GetRuns() != 1 {
		t.Errorf("handler shadows: %v", s)
	}
	for _, bad := range logs.Matching(slog.LevelDebug, "deregistered") {
		t.Errorf("logged: %s", bad)
	}
}

// TestRollbackAsksRejectedPluginsAgain: a plugin a new revision rejected is registered as soon
// as the operator rolls the type back, not at the next reconciler.rejectedRecheck.
func TestRollbackAsksRejectedPluginsAgain(t *testing.T) {
	cfg, _ := testDaemonConfig(t)
	cfg.Reconciler.RejectedRecheck = config.Duration(time.Hour)
	put := func(v string) {
		t.Helper()
		tmp := filepath.Join(cfg.HandlerDir, ".rev.wasm.tmp")
		if err := os.WriteFile(tmp, testdataModule(t, v), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(cfg.HandlerDir, "rev.wasm")); err != nil {
			t.Fatal(err)
		}
	}
	put("rev_v4")
	d := runTestDaemon(t, cfg, nil)
	c, err := client.Dial(d.AdminSocket())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		waitUntil(t, what, cond)
	}
	history := func() *adminv1.ListRevisionsResponse {
		h, _ := c.ListRevisions(t.Context(), &adminv1.ListRevisionsRequest{PluginType: "rev.example"})
		return h
	}
	waitFor("v4 serving", func() bool { return len(history().GetRevisions()) == 1 })
	put("rev_v3")
	waitFor("v3 serving", func() bool { return len(history().GetRevisions()) == 2 && history().GetRevisions()[0].GetServing() })
	p := registrationtest.Serve(t, filepath.Join(cfg.SocketDir, "r.sock"),
		registrationtest.Info{Type: "rev.example", Name: "r", Versions: []string{"1"}}, registrationtest.Options{})
	waitFor("r rejected by v3", func() bool { return plugin(d, p.Path()).State == state.StateRejected })
	if _, err := c.Rollback(t.Context(), &adminv1.RollbackRequest{PluginType: "rev.example"}); err != nil {
		t.Fatal(err)
	}
	waitFor("r registered by v4", func() bool {
		v := plugin(d, p.Path())
		return v.State == state.StateRegistered && v.Published["revision"] == "v4"
	})
}

// TestNewRevisionAsksRejectedPluginsAgain: a plugin its handler's revision rejected is asked
// again as soon as a new revision of the file serves (the README's promise), not at the next
// reconciler.rejectedRecheck.
func TestNewRevisionAsksRejectedPluginsAgain(t *testing.T) {
	cfg, _ := testDaemonConfig(t)
	cfg.Reconciler.RejectedRecheck = config.Duration(time.Hour)
	file := filepath.Join(cfg.HandlerDir, "rev.wasm")
	if err := os.WriteFile(file, testdataModule(t, "rev_v3"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := runTestDaemon(t, cfg, nil)
	p := registrationtest.Serve(t, filepath.Join(cfg.SocketDir, "r.sock"),
		registrationtest.Info{Type: "rev.example", Name: "r", Versions: []string{"1"}}, registrationtest.Options{})
	waitUntil(t, "r rejected by v3", func() bool { return plugin(d, p.Path()).State == state.StateRejected })
	if err := os.WriteFile(file, testdataModule(t, "rev_v1"), 0o644); err != nil { // in place, as cp does
		t.Fatal(err)
	}
	waitUntil(t, "r registered by v1", func() bool {
		v := plugin(d, p.Path())
		return v.State == state.StateRegistered && v.Published["revision"] == "v1"
	})
}
