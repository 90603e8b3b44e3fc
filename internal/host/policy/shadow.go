package policy

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/wasmhost/wasmhost/internal/host/sandbox"
	"github.com/wasmhost/wasmhost/internal/registration"
)

// Shadow runs: the operator names a candidate revision for a plugin type (SetShadow); on every
// registration of a plugin of that type the candidate's Validate runs beside the serving one,
// and the two decisions are compared: a disagreement is counted and logged with both. The
// candidate has no effect on the plugin: its call starts with the serving one and runs in the
// background (the registration never waits for it), in the same sandbox (the same deadline
// and memory ceiling) as background work (its guest code runs only when no other call waits
// for a turn on the CPU: sandbox.SetBackground), it may read the type's key-value store but not change it, and it may
// not call the plugin (plugin_call and kv writes return abi.CodeDenied). Register and
// Deregister are the serving revision's only.

// shadowRun is the candidate of one plugin type.
type shadowRun struct {
	pluginType string
	rev        *revision
	cand       *Serving // its own stats and quarantine: its failures are not the serving file's
	since      time.Time

	slots                                  chan struct{} // bounds the runs at once: the candidate's pool
	runs, disagreements, failures, skipped atomic.Uint64
	last                                   atomic.Pointer[string] // the last disagreement, said in full
}

// ShadowStatus is the shadow run of one plugin type.
type ShadowStatus struct {
	PluginType       string
	SHA256           string // the candidate's
	File             string // where the candidate was read from
	Name, Version    string // its manifest's
	Since            time.Time
	Runs             uint64 // registrations validated by both
	Disagreements    uint64 // of them, those the two decided differently
	Failures         uint64 // candidate calls that failed (trap, timeout, error)
	Skipped          uint64 // registrations not shadowed: the candidate's pool was busy
	LastDisagreement string
}

// noShadow is what startShadow returns when the type has no candidate.
func noShadow(error) {}

// startShadow starts the candidate's Validate of p for plugin type t beside the serving call,
// if t has a candidate; the caller passes the serving decision to the function it returns (it
// must call it once, and it never blocks).
func (h *Layer) startShadow(t string, p registration.PluginInfo) func(serving error) {
	var s *shadowRun
	if snap := h.revs.shadowSnap.Load(); snap != nil { // no lock on every registration's path
		s = (*snap)[t]
	}
	if s == nil {
		return noShadow
	}
	select {
	case s.slots <- struct{}{}:
	default:
		// As many runs as the candidate has instances are under way (a slow candidate):
		// this registration is not shadowed rather than queue work behind them.
		s.skipped.Add(1)
		return noShadow
	}
	if !s.cand.m.Enter() {
		<-s.slots
		return noShadow
	}
	if !h.sb.BeginWork() {
		s.cand.m.Leave()
		<-s.slots
		return noShadow
	}
	servingErr := make(chan error, 1)
	go func() {
		defer h.sb.EndWork()
		defer func() { <-s.slots }()
		defer s.cand.m.Leave()
		shadowErr := func() error {
			_, err := s.cand.Serve(h.sb.Context(), sandbox.FnValidate, t, p)
			return err
		}()
		var served error
		select {
		case served = <-servingErr:
		case <-h.sb.Context().Done():
			return
		}
		s.compare(h, p, served, shadowErr)
	}()
	return func(err error) { servingErr <- err }
}

// publishShadowsLocked makes the shadows as they are now what startShadow reads (rs.mu held).
func (rs *revisions) publishShadowsLocked() {
	snap := maps.Clone(rs.shadows)
	rs.shadowSnap.Store(&snap)
}

// decision names what a Validate decided: accept, reject or fail.
func decision(err error) string {
	switch {
	case err == nil:
		return "accept"
	case errors.Is(err, registration.ErrRejected):
		return "reject"
	}
	return "fail"
}

func (s *shadowRun) compare(h *Layer, p registration.PluginInfo, served, shadow error) {
	if errors.Is(shadow, context.Canceled) || errors.Is(served, context.Canceled) {
		return // the daemon is stopping, or the registration was abandoned: nothing to compare
	}
	// The run is counted last: whoever sees it counted finds its disagreement and log line.
	defer s.runs.Add(1)
	if shadow != nil && !errors.Is(shadow, registration.ErrRejected) {
		s.failures.Add(1)
	}
	ds, dc := decision(served), decision(shadow)
	if ds == dc {
		return
	}
	defer s.disagreements.Add(1) // after the line below, as the run: whoever sees it finds the line
	why := func(err error) string {
		if err == nil {
			return ""
		}
		return err.Error()
	}
	msg := fmt.Sprintf("plugin %s (socket %s): serving %s, shadow %s %s", p.Name, p.Socket, ds, short(s.rev.Digest), dc)
	s.last.Store(&msg)
	h.log.Warn("shadow handler disagrees with the serving one", "plugin_type", s.pluginType, "plugin", p.Name,
		"socket", p.Socket, "serving_decision", ds, "serving_reason", why(served),
		"shadow_sha256", s.rev.Digest, "shadow_decision", dc, "shadow_reason", why(shadow))
}

// SetShadow makes candidate the shadow of plugin type t: a handler file (read with the same
// checks as the handler directory's), or a kept revision by digest ("sha256:" and a prefix of
// at least 6 hex digits will do). An empty candidate clears t's shadow. It returns the
// candidate's status.
func (h *Layer) SetShadow(ctx context.Context, t, candidate string) (ShadowStatus, error) {
	done, err := h.revisionChange()
	if err != nil {
		return ShadowStatus{}, err
	}
	defer done()
	rs := h.revs
	if candidate == "" {
		rs.mu.Lock()
		old := rs.shadows[t]
		delete(rs.shadows, t)
		rs.publishShadowsLocked()
		rs.forgetLocked()
		rs.mu.Unlock()
		if old == nil {
			return ShadowStatus{}, fmt.Errorf("%w: plugin type %s has no shadow", ErrNoRevision, t)
		}
		old.cand.m.Retire()
		h.log.Info("shadow handler cleared", "plugin_type", t, "shadow_sha256", old.rev.Digest)
		rs.changed()
		return ShadowStatus{}, nil
	}
	var bin []byte
	file := candidate
	if d, ok := digestRef(candidate); ok {
		rs.mu.Lock()
		full := rs.resolveLocked(t, d)
		if full == "" && rs.bySHA[d] != nil {
			full = d
		}
		r := rs.bySHA[full]
		rs.mu.Unlock()
		if r == nil {
			return ShadowStatus{}, fmt.Errorf("%w: revision %s is not kept for plugin type %s (see: wasmhost handlers history %s)", ErrNoRevision, d, t, t)
		}
		file = r.File
		if bin, err = rs.bytesOf(full); err != nil {
			return ShadowStatus{}, fmt.Errorf("shadow for plugin type %s: %w", t, err)
		}
	} else if bin, err = h.sb.ReadHandlerFile(candidate); err != nil {
		return ShadowStatus{}, fmt.Errorf("shadow for plugin type %s: %w", t, err)
	}
	m, err := h.sb.Load(ctx, file, bin, new(sandbox.Stats))
	if err != nil {
		return ShadowStatus{}, fmt.Errorf("shadow for plugin type %s: %w", t, err)
	}
	if !slices.Contains(m.PluginTypes(), t) {
		m.Retire()
		return ShadowStatus{}, fmt.Errorf("%w: shadow %s (sha256 %s) does not declare plugin type %s (it declares %v)",
			sandbox.ErrBadModule, file, short(m.SHA256()), t, m.PluginTypes())
	}
	m.SetReadOnly()
	m.SetBackground()
	if err := rs.keepBytes(m.SHA256(), bin); err != nil {
		h.log.Warn("shadow revision not kept on disk", "plugin_type", t, "sha256", m.SHA256(), "error", err)
	}
	s := &shadowRun{pluginType: t, cand: &Serving{h: h, m: m, q: new(Quarantine), shadow: true}, since: time.Now(), slots: make(chan struct{}, h.cfg.PoolSize)}
	rs.mu.Lock()
	s.rev = rs.recordLocked(m, file)
	old := rs.shadows[t]
	rs.shadows[t] = s
	rs.publishShadowsLocked()
	rs.forgetLocked()
	rs.writeIndexLocked()
	rs.mu.Unlock()
	if old != nil {
		old.cand.m.Retire()
	}
	h.log.Info("shadow handler set: its Validate runs beside the serving one on every registration",
		"plugin_type", t, "shadow", file, "shadow_sha256", m.SHA256(), "name", m.Manifest().Name, "version", m.Manifest().Version)
	rs.changed()
	return s.status(), nil
}

// digestRef reads "sha256:HEX" (HEX at least 6 digits: a prefix) or a bare 64-digit digest.
func digestRef(s string) (string, bool) {
	if d, ok := strings.CutPrefix(s, "sha256:"); ok {
		return d, len(d) >= 6 && len(d) <= 64 && strings.Trim(d, "0123456789abcdef") == ""
	}
	return s, isDigest(s)
}

func (s *shadowRun) status() ShadowStatus {
	st := ShadowStatus{
		PluginType: s.pluginType, SHA256: s.rev.Digest, File: s.cand.m.File(),
		Name: s.cand.m.Manifest().Name, Version: s.cand.m.Manifest().Version, Since: s.since,
		Runs: s.runs.Load(), Disagreements: s.disagreements.Load(), Failures: s.failures.Load(), Skipped: s.skipped.Load(),
	}
	if p := s.last.Load(); p != nil {
		st.LastDisagreement = *p
	}
	return st
}

// Shadows returns the shadow run of every plugin type that has one, sorted by type.
func (h *Layer) Shadows() []ShadowStatus {
	rs := h.revs
	rs.mu.Lock()
	out := make([]ShadowStatus, 0, len(rs.shadows))
	for _, s := range rs.shadows {
		out = append(out, s.status())
	}
	rs.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].PluginType < out[j].PluginType })
	return out
}
