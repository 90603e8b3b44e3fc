package host

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/wasmhost/wasmhost/internal/host/policy"
	"github.com/wasmhost/wasmhost/internal/host/sandbox"
	"github.com/wasmhost/wasmhost/internal/host/sandbox/sandboxtest"
	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/testwait"
)

const revType = "rev.example"

// revHost runs a host over a handler directory of its own with a revision store; the test
// installs fixtures as rev.wasm with install.
type revHost struct {
	*Host
	logs *logs
	dir  string
	revs string
}

func newRevHost(t *testing.T, revDir string, rc policy.RevisionConfig) *revHost {
	t.Helper()
	dir := sandboxtest.TempDir(t)
	if revDir == "" {
		revDir = filepath.Join(sandboxtest.TempDir(t), "revisions")
	}
	h, l := newStrictHost(t, Config{HandlerDir: dir})
	rc.Dir = revDir
	if err := h.ConfigureRevisions(rc); err != nil {
		t.Fatal(err)
	}
	return &revHost{Host: h, logs: l, dir: dir, revs: revDir}
}

// run starts Run; the test's end stops it and waits.
func (rh *revHost) run(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rh.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	<-rh.Ready()
}

// install puts a fixture in place as rev.wasm and waits until its revision is the file's.
func (rh *revHost) install(t *testing.T, name string) string {
	t.Helper()
	installFile(t, fixture(name), filepath.Join(rh.dir, "rev.wasm"))
	sum := sandboxtest.FileSHA256(t, fixture(name))
	testwait.Until(t, name+" installed", func() bool {
		revs, _ := rh.History(revType)
		return len(revs) > 0 && revs[0].SHA256 == sum && revs[0].InFile
	})
	return sum
}

func (rh *revHost) handler(t *testing.T) registration.Handler {
	t.Helper()
	hd, ok := rh.Registry().Get(revType)
	if !ok {
		t.Fatalf("no handler for %s", revType)
	}
	return hd
}

// published registers a plugin and returns which revision published it.
func (rh *revHost) published(t *testing.T) string {
	t.Helper()
	pub, err := rh.handler(t).RegisterPlugin(context.Background(), sandboxtest.Info(revType, "p"))
	if err != nil {
		t.Fatalf("RegisterPlugin: %v", err)
	}
	return pub["revision"]
}

func TestRollbackPinsTheTypeUntilTheFileChanges(t *testing.T) {
	rh := newRevHost(t, "", policy.RevisionConfig{})
	rh.run(t)
	v1 := rh.install(t, "rev_v1")
	v4 := rh.install(t, "rev_v4")
	if got := rh.published(t); got != "v4" {
		t.Fatalf("after installing v4, register published revision=%q, want v4", got)
	}
	revs, pin := rh.History(revType)
	if len(revs) != 2 || revs[0].SHA256 != v4 || revs[1].SHA256 != v1 || pin != nil {
		t.Fatalf("history = %+v, pin %v; want v4 then v1, no pin", revs, pin)
	}
	if revs[1].Name != "rev" || revs[1].Version != "1.0.0" || revs[1].Calls != 0 || revs[0].Calls != 1 {
		t.Errorf("history = %+v; want names, versions and v4's one call", revs)
	}
	if _, err := os.Stat(filepath.Join(rh.revs, v1+".wasm")); err != nil {
		t.Errorf("v1's bytes are not kept: %v", err)
	}

	r, err := rh.Rollback(context.Background(), revType, "")
	if err != nil || r.SHA256 != v1 || !r.Pinned || !r.Serving {
		t.Fatalf("Rollback = %+v, %v; want v1 serving, pinned", r, err)
	}
	if got := rh.published(t); got != "v1" {
		t.Errorf("after the rollback, register published revision=%q, want v1", got)
	}
	revs, pin = rh.History(revType)
	if pin == nil || pin.SHA256 != v1 || pin.FileSHA256 != v4 || pin.Auto {
		t.Errorf("pin = %+v; want v1 over the file's v4, by the operator", pin)
	}
	if !revs[0].InFile || revs[0].Serving || !revs[1].Serving || revs[1].Calls != 1 {
		t.Errorf("history = %+v; want v4 in the file, v1 serving with its one call", revs)
	}
	if _, err := rh.Rollback(context.Background(), revType, "0000000000"); !errors.Is(err, policy.ErrNoRevision) ||
		!strings.Contains(err.Error(), revType) {
		t.Errorf("rollback to an unknown digest: %v, want policy.ErrNoRevision naming the type", err)
	}

	// The file changes again: the operator's newest word wins, the pin goes.
	rh.install(t, "rev_v3")
	if _, pin := rh.History(revType); pin != nil {
		t.Errorf("pin %+v kept after the file changed", pin)
	}
	err = rh.handler(t).ValidatePlugin(context.Background(), sandboxtest.Info(revType, "p"))
	sandboxtest.ErrContains(t, err, registration.ErrRejected, "refused by v3")

	// Back to v4 by digest prefix, then the pin cleared by the operator.
	if _, err := rh.Rollback(context.Background(), revType, v4[:8]); err != nil {
		t.Fatal(err)
	}
	if got := rh.published(t); got != "v4" {
		t.Errorf("rolled back to v4, register published revision=%q", got)
	}
	if err := rh.Unpin(revType); err != nil {
		t.Fatal(err)
	}
	sandboxtest.ErrContains(t, rh.handler(t).ValidatePlugin(context.Background(), sandboxtest.Info(revType, "p")), registration.ErrRejected, "refused by v3")
	if err := rh.Unpin(revType); !errors.Is(err, policy.ErrNoRevision) {
		t.Errorf("Unpin of a type not pinned: %v, want policy.ErrNoRevision", err)
	}
}

func TestRollbackPinOutlivesARestart(t *testing.T) {
	revDir := filepath.Join(sandboxtest.TempDir(t), "revisions")
	dir := sandboxtest.TempDir(t)
	first := func() {
		h, _ := newStrictHost(t, Config{HandlerDir: dir})
		if err := h.ConfigureRevisions(policy.RevisionConfig{Dir: revDir}); err != nil {
			t.Fatal(err)
		}
		rh := &revHost{Host: h, dir: dir, revs: revDir}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- h.Run(ctx) }()
		<-h.Ready()
		rh.install(t, "rev_v1")
		rh.install(t, "rev_v4")
		if _, err := h.Rollback(context.Background(), revType, ""); err != nil {
			t.Fatal(err)
		}
		cancel()
		<-done
		_ = h.Close(context.Background())
	}
	first()
	rh := newRevHost(t, revDir, policy.RevisionConfig{})
	rh.dir = dir
	rh.Host.cfg.HandlerDir = dir
	rh.run(t)
	testwait.Until(t, "the pin applied again", func() bool {
		_, pin := rh.History(revType)
		return pin != nil
	})
	if got := rh.published(t); got != "v1" {
		t.Errorf("after a restart, register published revision=%q, want the pinned v1", got)
	}
}

func TestAutomaticRollbackOfATrappingRevision(t *testing.T) {
	rh := newRevHost(t, "", policy.RevisionConfig{RollbackWindow: 1 << 40, RollbackMinCalls: 3, RollbackThreshold: 0.5})
	rh.run(t)
	v1 := rh.install(t, "rev_v1")
	v2 := rh.install(t, "rev_v2")
	for range 3 {
		sandboxtest.ErrContains(t, rh.handler(t).ValidatePlugin(context.Background(), sandboxtest.Info(revType, "p")), sandbox.ErrTrap)
	}
	testwait.Until(t, "the automatic rollback", func() bool {
		_, pin := rh.History(revType)
		return pin != nil
	})
	if err := rh.handler(t).ValidatePlugin(context.Background(), sandboxtest.Info(revType, "p")); err != nil {
		t.Errorf("after the automatic rollback: %v", err)
	}
	revs, pin := rh.History(revType)
	if pin.SHA256 != v1 || pin.FileSHA256 != v2 || !pin.Auto || !strings.Contains(pin.Reason, "3 of its first 3 calls") {
		t.Errorf("pin = %+v; want v1 over v2, automatic, with the rate", pin)
	}
	if revs[0].SHA256 != v2 || revs[0].Bad == "" || revs[0].Traps != 3 {
		t.Errorf("history = %+v; want v2 marked rolled back with its 3 traps", revs)
	}
	// The log line follows the pin by a moment.
	testwait.Until(t, "the rollback's log line", func() bool { _, ok := rh.logs.Find("rolled back automatically"); return ok })
	a, ok := rh.logs.Find("rolled back automatically")
	if !ok || a["plugin_type"] != revType || a["from_sha256"] != v2 || a["to_sha256"] != v1 {
		t.Errorf("log = %v, %v", a, ok)
	}
	// The operator cannot roll "back" onto the bad revision by default: the previous good one
	// is v1 itself, and v2 is skipped.
	if _, err := rh.Rollback(context.Background(), revType, ""); !errors.Is(err, policy.ErrNoRevision) {
		t.Errorf("Rollback with only a bad revision before: %v, want policy.ErrNoRevision", err)
	}
}

func TestShadowValidateIsComparedNotObeyed(t *testing.T) {
	rh := newRevHost(t, "", policy.RevisionConfig{})
	rh.run(t)
	rh.install(t, "rev_v1")
	if _, err := rh.SetShadow(context.Background(), revType, "testdata/nothere.wasm"); err == nil {
		t.Error("SetShadow of a missing file: no error")
	}
	if _, err := rh.SetShadow(context.Background(), "other.example", fixture("rev_v3")); !errors.Is(err, sandbox.ErrBadModule) ||
		!strings.Contains(err.Error(), "other.example") {
		t.Errorf("SetShadow for a type the candidate does not declare: %v", err)
	}
	cand := fixture("rev_v3")
	if fixturesShared() {
		cand = filepath.Join(sandboxtest.TempDir(t), "rev_v3.wasm")
		sandboxtest.CopyFile(t, fixture("rev_v3"), cand, 0o644)
	}
	st, err := rh.SetShadow(context.Background(), revType, cand)
	if err != nil || st.SHA256 != sandboxtest.FileSHA256(t, fixture("rev_v3")) || st.Version != "3.0.0" {
		t.Fatalf("SetShadow = %+v, %v", st, err)
	}
	for range 2 {
		if err := rh.handler(t).ValidatePlugin(context.Background(), sandboxtest.Info(revType, "p")); err != nil {
			t.Fatalf("the serving revision accepts, the shadow must not change that: %v", err)
		}
	}
	if got := rh.published(t); got != "v1" {
		t.Errorf("register published revision=%q, want the serving v1", got)
	}
	testwait.Until(t, "two shadow runs", func() bool { return len(rh.Shadows()) == 1 && rh.Shadows()[0].Runs == 2 })
	s := rh.Shadows()[0]
	if s.Disagreements != 2 || !strings.Contains(s.LastDisagreement, "serving accept") || !strings.Contains(s.LastDisagreement, "reject") {
		t.Errorf("shadow = %+v; want 2 disagreements", s)
	}
	a, ok := rh.logs.Find("shadow handler disagrees")
	if !ok || a["serving_decision"] != "accept" || a["shadow_decision"] != "reject" || !strings.Contains(a["shadow_reason"], "refused by v3") {
		t.Errorf("log = %v", a)
	}
	if _, err := rh.SetShadow(context.Background(), revType, ""); err != nil {
		t.Fatal(err)
	}
	if len(rh.Shadows()) != 0 {
		t.Errorf("shadows after clearing: %+v", rh.Shadows())
	}
}

// TestShadowCannotChangeTheStore: a candidate's kv_set is refused (CodeDenied): kv.wasm's
// validate, which fails when kv_set fails, fails in the shadow while the serving copy accepts.
func TestShadowCannotChangeTheStore(t *testing.T) {
	dir := sandboxtest.TempDir(t)
	h, _ := newStrictHost(t, Config{HandlerDir: dir})
	sandboxtest.CopyFile(t, fixture("kv"), filepath.Join(dir, "kv.wasm"), 0o600)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	defer func() { cancel(); <-done }()
	<-h.Ready()
	cand := filepath.Join(sandboxtest.TempDir(t), "kv.wasm")
	sandboxtest.CopyFile(t, fixture("kv"), cand, 0o600)
	if _, err := h.SetShadow(context.Background(), "kv.example", cand); err != nil {
		t.Fatal(err)
	}
	hd, ok := h.Registry().Get("kv.example")
	if !ok {
		t.Fatal("kv.example is not served")
	}
	if err := hd.ValidatePlugin(context.Background(), sandboxtest.Info("kv.example", "p")); err != nil {
		t.Fatalf("the serving handler's validate: %v", err)
	}
	testwait.Until(t, "the shadow run", func() bool { return h.Shadows()[0].Runs == 1 })
	if s := h.Shadows()[0]; s.Disagreements != 1 || s.Failures != 1 || !strings.Contains(s.LastDisagreement, "fail") {
		t.Errorf("shadow = %+v; want its kv_set refused, so its validate failing", s)
	}
}

// TestRevisionsHammer: calls of a type keep being served, by one revision or another, while
// the operator rolls back, unpins, sets and clears a shadow and reads the history, and the
// file changes (run with -race).
func TestRevisionsHammer(t *testing.T) {
	rh := newRevHost(t, "", policy.RevisionConfig{})
	rh.run(t)
	rh.install(t, "rev_v1")
	rh.install(t, "rev_v4")
	cand := filepath.Join(sandboxtest.TempDir(t), "rev_v3.wasm")
	sandboxtest.CopyFile(t, fixture("rev_v3"), cand, 0o600)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errs := make(chan error, 4)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for ctx.Err() == nil {
				hd, ok := rh.Registry().Get(revType)
				if !ok {
					continue
				}
				pub, err := hd.RegisterPlugin(context.Background(), sandboxtest.Info(revType, "p"))
				if err != nil && !errors.Is(err, sandbox.ErrRetired) {
					errs <- err
					return
				}
				if err == nil && pub["revision"] != "v1" && pub["revision"] != "v4" {
					errs <- errors.New("published " + pub["revision"])
					return
				}
				_ = hd.ValidatePlugin(context.Background(), sandboxtest.Info(revType, "p"))
			}
		})
	}
	for i := range 30 {
		switch i % 5 {
		case 0:
			if _, err := rh.Rollback(context.Background(), revType, ""); err != nil && !errors.Is(err, policy.ErrNoRevision) {
				t.Error(err)
			}
		case 1:
			_, _ = rh.SetShadow(context.Background(), revType, cand)
		case 2:
			_ = rh.Unpin(revType)
		case 3:
			rh.History(revType)
			rh.Shadows()
			rh.Pins([]string{revType})
		case 4:
			_, _ = rh.SetShadow(context.Background(), revType, "")
			if i%10 == 4 {
				rh.install(t, "rev_v1")
			} else {
				rh.install(t, "rev_v4")
			}
		}
	}
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
