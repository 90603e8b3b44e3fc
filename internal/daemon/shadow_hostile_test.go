package daemon

// Issue 27 end to end: a shadow candidate that fills its 64 MiB and traps, beside a good serving
// revision, in a running daemon with plugins of other types registered. What it cost the
// serving revision's latency is BenchmarkShadowCost's (internal/host); here, what an operator
// checks: every plugin registered by the serving revision, the candidate's failures counted and
// logged, the rest of the daemon untouched and its memory handed back.

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/admin/client"
	adminv1 "github.com/wasmhost/wasmhost/admin/v1"
	"github.com/wasmhost/wasmhost/internal/config"
	"github.com/wasmhost/wasmhost/internal/limits"
	"github.com/wasmhost/wasmhost/internal/logtest"
	"github.com/wasmhost/wasmhost/internal/registration/registrationtest"
	"github.com/wasmhost/wasmhost/internal/testwait"
)

// TestShadowHostileInRunningDaemon: hog.example is served by host/testdata/hogpeer.wat (accepts
// at once) with host/testdata/hogtrap.wat (grows its memory to handlers.memoryLimit, 64 MiB,
// fills it and traps) as its shadow candidate, under the default quarantine; 12 plugins of the
// type register one after another. Each is registered by hogpeer; each registration is
// shadowed, the run counted as a failure and a disagreement (accept against fail) and logged,
// the first ones traps and the rest refused by the quarantine; the plugins of the two other
// types stay registered, the daemon ready, the admin API answering, and the daemon's resident
// memory back under handlers.limits.instanceMemory over what it held before, within seconds.
// The ceiling, 128 MiB, is under the 192 MiB the three trapping runs filled: a trapped
// instance is closed and keeps none of it.
func TestShadowHostileInRunningDaemon(t *testing.T) {
	const (
		plugins = 12
		ceiling = 128 << 20
	)
	cfg, base := testDaemonConfig(t)
	cfg.Reconciler.InitialBackoff = config.Duration(time.Hour) // one attempt each
	cfg.Reconciler.MaxBackoff = config.Duration(time.Hour)
	cfg.Handlers.PoolSize = 2                               // the candidate's too
	cfg.Handlers.CallTimeout = config.Duration(time.Minute) // filling 64 MiB on a loaded machine
	cfg.Handlers.Limits.CallCPU = limits.Duration(time.Minute)
	cfg.Handlers.Limits.InstanceMemory = ceiling
	_, sums := writeFixtures(t, cfg.HandlerDir, "ok", "reload_v1", "hogpeer")
	cand, _ := writeFixtures(t, base, "hogtrap")
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	logs := &logtest.Logs{}
	d, exited := startTestDaemon(t, cfg, slog.New(logs))
	c, err := client.Dial(d.AdminSocket())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := t.Context()
	serve := func(typ, name string) *registrationtest.Plugin {
		return registrationtest.Serve(t, filepath.Join(cfg.SocketDir, name+".sock"), registrationtest.Info{Type: typ, Name: name, Versions: []string{"v1"}}, registrationtest.Options{})
	}
	others := []*registrationtest.Plugin{serve("ok.example", "a"), serve("reload.example", "b")}
	for _, p := range others {
		if n := p.WaitNotification(t, hostileWait); !n.Registered {
			t.Fatalf("%s: %+v", p.Path(), n)
		}
	}
	if _, err := c.SetShadow(ctx, &adminv1.SetShadowRequest{PluginType: "hog.example", Candidate: cand["hogtrap"]}); err != nil {
		t.Fatalf("shadow: %v", err)
	}

	shadow := func() *adminv1.Shadow {
		t.Helper()
		h, err := c.ListRevisions(ctx, &adminv1.ListRevisionsRequest{PluginType: "hog.example"})
		if err != nil {
			t.Fatalf("the admin API: %v", err)
		}
		return h.GetShadow()
	}
	before := residentBytes(t)
	for i := range plugins {
		p := serve("hog.example", fmt.Sprint("hog", i))
		if n := p.WaitNotification(t, hostileWait); !n.Registered {
			t.Fatalf("%s: %+v", p.Path(), n)
		}
		// Notified before the state has the row: wait for it.
		testwait.Until(t, p.Path()+" in the state", func() bool { return plugin(d, p.Path()).Registered })
		if v := plugin(d, p.Path()); v.HandlerSHA256 != sums["hogpeer"] {
			t.Errorf("%s registered by %s; want the serving hogpeer %s", p.Path(), v.HandlerSHA256, sums["hogpeer"])
		}
		// The candidate's run goes on in the background; a run is counted after its failure,
		// disagreement and log line. Waiting for it before the next plugin, the candidate
		// runs on every registration (one run at most holds one of its pool's two slots):
		// none is skipped, and the quarantine is what stops its traps.
		testwait.UntilWithin(t, hostileWait, fmt.Sprintf("registration %d shadowed", i+1), func() bool {
			s := shadow()
			return s.GetRuns()+s.GetSkipped() == uint64(i+1)
		})
	}
	s := shadow()
	t.Logf("shadow: %d runs, %d failures, %d skipped; resident %d MiB before, %d MiB now", s.GetRuns(), s.GetFailures(), s.GetSkipped(), before>>20, residentBytes(t)>>20)
	if s.GetRuns() != plugins || s.GetSkipped() != 0 || s.GetFailures() != plugins || s.GetDisagreements() != plugins {
		t.Errorf("shadow %v: want %d runs, each a failure and a disagreement", s, plugins)
	}
	lines := logs.Matching(slog.LevelWarn, "shadow handler disagrees")
	if uint64(len(lines)) != s.GetRuns() {
		t.Errorf("%d disagreements logged for %d runs: %q", len(lines), s.GetRuns(), lines)
	}
	quarantined := 0
	for _, l := range lines {
		if !strings.Contains(l, "plugin_type=hog.example") || !strings.Contains(l, "serving_decision=accept") || !strings.Contains(l, "shadow_decision=fail") {
			t.Errorf("logged: %s", l)
		}
		if strings.Contains(l, "handler quarantined") {
			quarantined++
		}
	}
	// The first run traps once its memory is full; after a few, the quarantine refuses the
	// candidate's calls at once.
	if len(lines) > 0 && !strings.Contains(lines[0], "wasm error: unreachable") {
		t.Errorf("the first run logged: %s", lines[0])
	}
	if quarantined == 0 {
		t.Errorf("the candidate never quarantined: %q", lines)
	}
	waitResidentUnder(t, before, ceiling)

	checkUnharmed(t, d, exited, others...)
	checkAllRegistered(t, d, plugins+len(others))
	for _, bad := range logs.Matching(slog.LevelDebug, "deregistered") {
		t.Errorf("logged: %s", bad)
	}
}
