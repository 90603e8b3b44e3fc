package policy

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync/atomic"
	"time"

	"github.com/wasmhost/wasmhost/internal/host/sandbox"
)

// Rollbacks: a rollback pins a plugin type to an older revision kept in the revision store
// (revisions.go): the handler file still holds the newer bytes (and their module stays loaded
// for the file's other types), but the type's calls go to the pinned revision until the file
// changes again (a new revision is installed: the operator's newest word wins and the pin is
// cleared), or the operator clears the pin (Unpin). Pins are kept in the revision index and
// outlive a restart. The operator rolls back (Rollback); a new revision on probation, whose
// calls trap or time out too often in its first minutes, is rolled back automatically.

// Pin is a plugin type served by an older revision than its file holds.
type Pin struct {
	PluginType string
	SHA256     string // the revision serving
	FileSHA256 string // the revision the file held when it was pinned
	Auto       bool   // an automatic rollback, not the operator's
	Reason     string
	At         time.Time
}

// probation watches a new revision in its first RollbackWindow.
type probation struct {
	until        time.Time
	calls, fault atomic.Int64
	fired        atomic.Bool
}

// pinned is a type served by an older revision: the calls of that type that reach fileS (the
// module of the file's revision) go to s instead.
type pinned struct {
	Pin
	s     *Serving // nil until loaded (a pin read from the index waits for its file's revision)
	fileS *Serving
}

// pinFor returns what serves plugin type t in s's place, or nil.
func (s *Serving) pinFor(t string) *Serving {
	if pins := s.pins.Load(); pins != nil {
		return (*pins)[t]
	}
	return nil
}

// setPin makes ps serve plugin type t in s's place (nil: s serves it again). Its callers
// hold revisions.mu.
func (s *Serving) setPin(t string, ps *Serving) {
	next := make(map[string]*Serving)
	if pins := s.pins.Load(); pins != nil {
		maps.Copy(next, *pins)
	}
	if ps == nil {
		delete(next, t)
	} else {
		next[t] = ps
	}
	s.pins.Store(&next)
}

// observe counts one plugin call of s in its revision and its probation; a revision on
// probation whose fault rate crosses the threshold is rolled back, once, in the background.
func (s *Serving) observe(err error) {
	o := outcomeOf(err)
	if r := s.rev.Load(); r != nil {
		r.count(o)
	}
	p := s.probation.Load()
	if p == nil {
		return
	}
	if time.Now().After(p.until) {
		s.probation.CompareAndSwap(p, nil)
		return
	}
	calls := p.calls.Add(1)
	faults := p.fault.Load()
	if o.fault() {
		faults = p.fault.Add(1)
	}
	h := s.h
	rs := h.revs
	if calls < int64(rs.cfg.RollbackMinCalls) || float64(faults) < rs.cfg.RollbackThreshold*float64(calls) {
		return
	}
	if !p.fired.CompareAndSwap(false, true) {
		return
	}
	reason := fmt.Sprintf("%d of its first %d calls trapped or timed out (threshold %.0f%% within %v of loading)",
		faults, calls, rs.cfg.RollbackThreshold*100, rs.cfg.RollbackWindow)
	h.sb.GoAsync(func() { rs.autoRollback(s, reason, err) })
}

// autoRollback pins every type s serves to its previous good revision.
func (rs *revisions) autoRollback(s *Serving, reason string, last error) {
	m := s.m
	rs.pinMu.Lock()
	defer rs.pinMu.Unlock()
	rs.mu.Lock()
	if r := rs.bySHA[m.SHA256()]; r != nil {
		r.Bad = reason
	}
	rs.mu.Unlock()
	for _, t := range m.PluginTypes() {
		th := rs.h.typeHandlerOf(t)
		if th == nil || th.cur.Load() != s || s.pinFor(t) != nil {
			continue
		}
		rs.mu.Lock()
		prev := rs.previousGoodLocked(t, m.SHA256())
		rs.mu.Unlock()
		if prev == nil {
			rs.h.log.Error("handler revision fails, and there is no earlier good revision to roll back to",
				"plugin_type", t, "handler", m.File(), "sha256", m.SHA256(), "reason", reason, "last_error", last)
			continue
		}
		if _, err := rs.pinLocked(rs.h.sb.Context(), t, prev.Digest, true, reason); err != nil {
			rs.h.log.Error("automatic rollback failed; the new revision keeps serving",
				"plugin_type", t, "handler", m.File(), "sha256", m.SHA256(), "to_sha256", prev.Digest, "error", err)
			continue
		}
		rs.h.log.Warn("handler revision rolled back automatically", "plugin_type", t, "handler", m.File(),
			"from_sha256", m.SHA256(), "to_sha256", prev.Digest, "to_version", prev.Version, "reason", reason, "last_error", last)
	}
	rs.repinned()
}

// repinned is changed for a pin set or cleared: another revision serves the type, so the
// plugins it rejected are asked again (the registry wakes the reconciler).
func (rs *revisions) repinned() {
	rs.changed()
	rs.h.cfg.Registry.Touch()
}

// pinLocked makes the revision digest serve t (rs.pinMu held): its module is loaded from the
// kept bytes and swapped in front of the file's. Pinning the revision the file holds clears
// the pin instead.
func (rs *revisions) pinLocked(ctx context.Context, t, digest string, auto bool, reason string) (*revision, error) {
	th := rs.h.typeHandlerOf(t)
	if th == nil {
		return nil, fmt.Errorf("%w: plugin type %s has no handler file in this host", ErrNoRevision, t)
	}
	cur := th.cur.Load()
	rs.mu.Lock()
	r := rs.bySHA[digest]
	rs.mu.Unlock()
	if r == nil || !slices.Contains(r.Types, t) {
		return nil, fmt.Errorf("%w: revision %s is not kept for plugin type %s (see: wasmhost handlers history %s)", ErrNoRevision, short(digest), t, t)
	}
	if cur.m.SHA256() == digest {
		rs.mu.Lock()
		rs.unpinLocked(t)
		rs.writeIndexLocked()
		rs.mu.Unlock()
		return r, nil
	}
	if why := rs.h.cfg.Bindings[t].Refusal(t, cur.m.File(), digest); why != "" {
		return nil, fmt.Errorf("%w: revision %s may not serve: %s", sandbox.ErrBadModule, short(digest), why)
	}
	bin, err := rs.bytesOf(digest)
	if err != nil {
		return nil, fmt.Errorf("plugin type %s, revision %s: %w", t, short(digest), err)
	}
	m, err := rs.h.sb.Load(ctx, cur.m.File(), bin, cur.m.Stats())
	if err != nil {
		return nil, fmt.Errorf("plugin type %s, revision %s did not load: %w", t, short(digest), err)
	}
	if !slices.Contains(m.PluginTypes(), t) {
		m.Retire()
		return nil, fmt.Errorf("%w: revision %s does not declare plugin type %s", ErrNoRevision, short(digest), t)
	}
	ps := &Serving{h: rs.h, m: m, q: cur.q} // the file's quarantine
	ps.rev.Store(r)
	cur.q.Reset() // the older revision is not quarantined for what the newer one did
	rs.mu.Lock()
	rs.unpinLocked(t)
	rs.pins[t] = &pinned{Pin: Pin{PluginType: t, SHA256: digest, FileSHA256: cur.m.SHA256(), Auto: auto, Reason: reason, At: time.Now()}, s: ps, fileS: cur}
	cur.setPin(t, ps)
	rs.writeIndexLocked()
	rs.mu.Unlock()
	return r, nil
}

// unpinLocked drops t's pin (rs.mu held): the file's revision serves again.
func (rs *revisions) unpinLocked(t string) {
	p := rs.pins[t]
	if p == nil {
		return
	}
	delete(rs.pins, t)
	if p.fileS != nil && p.fileS.pinFor(t) == p.s {
		p.fileS.setPin(t, nil)
	}
	if p.s != nil {
		p.s.m.Retire()
	}
}

// Rollback makes plugin type t served by revision digest (a prefix of at least 6 hex digits
// will do), or by the previous good revision when digest is "". It pins t until the handler
// file changes again or Unpin. It returns the revision now serving.
func (h *Layer) Rollback(ctx context.Context, t, digest string) (Revision, error) {
	done, err := h.revisionChange()
	if err != nil {
		return Revision{}, err
	}
	defer done()
	rs := h.revs
	th := h.typeHandlerOf(t)
	if th == nil {
		return Revision{}, fmt.Errorf("%w: plugin type %s has no handler file in this host", ErrNoRevision, t)
	}
	serving := th.cur.Load().m.SHA256()
	if ps := th.cur.Load().pinFor(t); ps != nil {
		serving = ps.m.SHA256()
	}
	rs.mu.Lock()
	if digest == "" {
		if prev := rs.previousGoodLocked(t, serving); prev != nil {
			// The one after the serving one in the history, not the newest other one.
			ds := rs.byType[t]
			i := slices.Index(ds, serving)
			for _, d := range ds[i+1:] {
				if r := rs.bySHA[d]; r != nil && r.Bad == "" {
					prev = r
					break
				}
			}
			digest = prev.Digest
		}
	} else if full := rs.resolveLocked(t, digest); full != "" {
		digest = full
	} else {
		rs.mu.Unlock()
		return Revision{}, fmt.Errorf("%w: revision %s is not kept for plugin type %s, or the prefix names several (see: wasmhost handlers history %s)", ErrNoRevision, digest, t, t)
	}
	rs.mu.Unlock()
	if digest == "" {
		return Revision{}, fmt.Errorf("%w: plugin type %s has no earlier good revision to roll back to (see: wasmhost handlers history %s)", ErrNoRevision, t, t)
	}
	r, err := rs.pinLocked(ctx, t, digest, false, "rolled back by the operator")
	if err != nil {
		return Revision{}, err
	}
	h.log.Warn("handler rolled back by the operator", "plugin_type", t, "from_sha256", serving, "to_sha256", r.Digest,
		"to_version", r.Version, "handler", th.cur.Load().m.File())
	rs.repinned()
	return rs.view(t, r), nil
}

// Unpin clears a rollback pin of t: the revision the handler file holds serves again.
func (h *Layer) Unpin(t string) error {
	done, err := h.revisionChange()
	if err != nil {
		return err
	}
	defer done()
	rs := h.revs
	rs.mu.Lock()
	p := rs.pins[t]
	if p != nil {
		rs.unpinLocked(t)
		rs.writeIndexLocked()
	}
	rs.mu.Unlock()
	if p == nil {
		return fmt.Errorf("%w: plugin type %s is not pinned", ErrNoRevision, t)
	}
	h.log.Info("rollback pin cleared by the operator; the handler file's revision serves", "plugin_type", t, "sha256", p.FileSHA256)
	rs.repinned()
	return nil
}

// pinsOf returns the pins of the given plugin types, sorted by type (for HandlerStatus).
func (rs *revisions) pinsOf(types []string) []Pin {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	var out []Pin
	for _, t := range types {
		if p := rs.pins[t]; p != nil && p.s != nil {
			out = append(out, p.Pin)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PluginType < out[j].PluginType })
	return out
}

// Pins returns the rollback pins of the given plugin types, sorted by type.
func (h *Layer) Pins(types []string) []Pin { return h.revs.pinsOf(types) }
