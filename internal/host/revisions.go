package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/wasmhost/wasmhost/internal/registration"
)

// Revisions: the host keeps the last few good revisions of the handler of each plugin type,
// content-addressed (RevisionConfig.Dir/<sha256>.wasm), so that an operator can go back to one
// (Rollback), and so that a new revision that traps or times out too often in its first minutes
// is rolled back to the previous good one automatically.
//
// A rollback pins the plugin type to the older revision: the handler file still holds the newer
// bytes (and their module stays loaded for the file's other types), but the type's calls go to
// the pinned revision until the file changes again (a new revision is installed: the operator's
// newest word wins and the pin is cleared), or the operator clears the pin (Unpin). Pins are
// kept in the revision index and outlive a restart.

// Sentinel errors of revisions. Callers decide with errors.Is.
var (
	// ErrNoRevision: the plugin type has no handler, no such revision is kept, or no earlier
	// good revision is left to go back to.
	ErrNoRevision = errors.New("host: no such revision")
)

// RevisionConfig configures the revisions a Host keeps and its automatic rollback.
type RevisionConfig struct {
	// Dir keeps the bytes of each revision, <Dir>/<sha256>.wasm, and the index of revisions
	// and pins (index.json). Created with mode 0700. Defaults to "": the bytes are kept in
	// memory and nothing outlives the host.
	Dir string
	// Keep is how many revisions are kept per plugin type, the serving one included.
	// Defaults to 5.
	Keep int
	// RollbackWindow is how long after it starts serving a new revision is watched; 0 turns
	// automatic rollback off. Defaults to 0 (the daemon's config default is 5 minutes).
	RollbackWindow time.Duration
	// RollbackThreshold is the share of calls that trap or time out (or fail at once in
	// quarantine) within RollbackWindow that rolls the revision back. Defaults to 0.5.
	RollbackThreshold float64
	// RollbackMinCalls is how many calls the revision must have had in the window before its
	// rate is judged. Defaults to 5.
	RollbackMinCalls int
	// OnRegistered, if set, is called when a revision's RegisterPlugin of the plugin at socket
	// succeeded, with its file and SHA-256: the revision that registered the plugin and
	// published what it returned (the daemon records both in the plugin's entry). It must be
	// quick. Defaults to nil.
	OnRegistered func(socket, file, sha256 string)
}

func (c RevisionConfig) withDefaults() RevisionConfig {
	if c.Keep <= 0 {
		c.Keep = 5
	}
	if c.RollbackThreshold <= 0 {
		c.RollbackThreshold = 0.5
	}
	if c.RollbackMinCalls <= 0 {
		c.RollbackMinCalls = 5
	}
	return c
}

// Revision is one revision of a plugin type's handler, as History lists it.
type Revision struct {
	SHA256      string
	File        string // the handler file it was loaded from
	Name        string // the manifest's
	Version     string
	PluginTypes []string
	Size        int64
	FirstLoaded time.Time
	// Calls, Failures, Traps and Timeouts counted while the revision served (any of its
	// types), across its activations.
	Calls, Failures, Traps, Timeouts uint64
	Serving                          bool   // it serves the type now
	Pinned                           bool   // it serves the type because of a rollback
	InFile                           bool   // the handler file holds it now
	Bad                              string // why it was rolled back automatically: not a revision to go back to
}

// Pin is a plugin type served by an older revision than its file holds.
type Pin struct {
	PluginType string
	SHA256     string // the revision serving
	FileSHA256 string // the revision the file held when it was pinned
	Auto       bool   // an automatic rollback, not the operator's
	Reason     string
	At         time.Time
}

// revision is the record of one digest; its counters are shared by every module of it.
type revision struct {
	Digest      string    `json:"sha256"`
	File        string    `json:"file"`
	Name        string    `json:"name,omitempty"`
	Version     string    `json:"version,omitempty"`
	Types       []string  `json:"pluginTypes"`
	Size        int64     `json:"size"`
	FirstLoaded time.Time `json:"firstLoaded"`
	Bad         string    `json:"rolledBack,omitempty"`
	Counts      revCounts `json:"counts"`

	calls, failures, traps, timeouts atomic.Uint64
}

type revCounts struct{ Calls, Failures, Traps, Timeouts uint64 }

// count adds the outcome of one call of a module of the revision.
func (r *revision) count(o callOutcome) {
	r.calls.Add(1)
	if o.failed {
		r.failures.Add(1)
	}
	if o.trap {
		r.traps.Add(1)
	}
	if o.timeout {
		r.timeouts.Add(1)
	}
}

// callOutcome classifies a plugin call's error for the revision counters and the probation.
type callOutcome struct{ failed, trap, timeout, quarantined bool }

func outcomeOf(err error) callOutcome {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, ErrRetired) {
		return callOutcome{}
	}
	o := callOutcome{
		timeout:     errors.Is(err, context.DeadlineExceeded),
		trap:        errors.Is(err, ErrTrap) || errors.Is(err, ErrBudget),
		quarantined: errors.Is(err, ErrQuarantined),
	}
	o.failed = o.timeout || o.trap || o.quarantined || errors.Is(err, ErrHandlerFailed) || errors.Is(err, ErrBadResult)
	return o
}

// fault: what a new revision is judged by.
func (o callOutcome) fault() bool { return o.trap || o.timeout || o.quarantined }

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
	s     *served // nil until loaded (a pin read from the index waits for its file's revision)
	fileS *served
}

// pinFor returns what serves plugin type t in s's place, or nil.
func (s *served) pinFor(t string) *served {
	if pins := s.pins.Load(); pins != nil {
		return (*pins)[t]
	}
	return nil
}

// setPin makes ps serve plugin type t in s's place (nil: s serves it again). Its callers
// hold revisions.mu.
func (s *served) setPin(t string, ps *served) {
	next := make(map[string]*served)
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

// revisions is the host's revision store. Its mu guards the maps; pinMu serializes what loads
// and swaps modules (rollbacks, pins, shadows), which may take a compile.
type revisions struct {
	h     *Host
	cfg   RevisionConfig
	pinMu sync.Mutex

	mu      sync.Mutex
	bySHA   map[string]*revision
	byType  map[string][]string  // digests, newest first
	typeAt  map[string]time.Time // when the newest revision of each type was installed
	pins    map[string]*pinned
	shadows map[string]*shadowRun // shadow.go

	shadowSnap atomic.Pointer[map[string]*shadowRun] // a copy of shadows, read without mu
	mem        map[string][]byte                     // the bytes, when there is no Dir
}

// newRevisions makes h's store. Run tells it what serves after each of its steps (sync).
func newRevisions(h *Host) *revisions {
	return &revisions{
		h: h, cfg: RevisionConfig{}.withDefaults(),
		bySHA: make(map[string]*revision), byType: make(map[string][]string), typeAt: make(map[string]time.Time),
		pins: make(map[string]*pinned), shadows: make(map[string]*shadowRun), mem: make(map[string][]byte),
	}
}

// ConfigureRevisions sets how revisions are kept and rolled back, and reads the index kept in
// cfg.Dir (its revisions, and the pins that outlive a restart). Call it before Run.
func (h *Host) ConfigureRevisions(cfg RevisionConfig) error {
	rs := h.revs
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.cfg = cfg.withDefaults()
	if rs.cfg.Dir == "" {
		return nil
	}
	if err := ensurePrivateDir(rs.cfg.Dir); err != nil {
		rs.cfg.Dir = ""
		return fmt.Errorf("host: revision directory: %w", err)
	}
	rs.readIndex()
	return nil
}

// index is the persisted form of the store.
type index struct {
	Revisions []*revision          `json:"revisions"`
	Types     map[string][]string  `json:"pluginTypes"`
	TypesAt   map[string]time.Time `json:"pluginTypesInstalledAt,omitempty"`
	Pins      []Pin                `json:"pins,omitempty"`
}

func (rs *revisions) indexPath() string { return filepath.Join(rs.cfg.Dir, "index.json") }

func (rs *revisions) readIndex() {
	b, err := readOwnFile(rs.indexPath(), -1)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	var ix index
	if err == nil {
		err = json.Unmarshal(b, &ix)
	}
	if err != nil {
		rs.h.log.Warn("revision index unreadable; starting a new one", "file", rs.indexPath(), "error", err)
		return
	}
	for _, r := range ix.Revisions {
		if !isDigest(r.Digest) {
			continue
		}
		r.calls.Store(r.Counts.Calls)
		r.failures.Store(r.Counts.Failures)
		r.traps.Store(r.Counts.Traps)
		r.timeouts.Store(r.Counts.Timeouts)
		rs.bySHA[r.Digest] = r
	}
	for t, ds := range ix.Types {
		ds = slices.DeleteFunc(slices.Clone(ds), func(d string) bool { return rs.bySHA[d] == nil })
		if len(ds) > 0 {
			rs.byType[t] = ds
			if at, ok := ix.TypesAt[t]; ok {
				rs.typeAt[t] = at
			}
		}
	}
	for _, p := range ix.Pins {
		if rs.bySHA[p.SHA256] != nil {
			rs.pins[p.PluginType] = &pinned{Pin: p}
		}
	}
}

// writeIndexLocked persists the store (rs.mu held). Errors are logged: the revisions serve on.
func (rs *revisions) writeIndexLocked() {
	if rs.cfg.Dir == "" {
		return
	}
	ix := index{Types: rs.byType, TypesAt: rs.typeAt}
	for _, d := range slices.Sorted(maps.Keys(rs.bySHA)) {
		r := rs.bySHA[d]
		r.Counts = revCounts{r.calls.Load(), r.failures.Load(), r.traps.Load(), r.timeouts.Load()}
		ix.Revisions = append(ix.Revisions, r)
	}
	for _, t := range slices.Sorted(maps.Keys(rs.pins)) {
		ix.Pins = append(ix.Pins, rs.pins[t].Pin)
	}
	b, err := json.MarshalIndent(ix, "", "  ")
	if err == nil {
		err = writeFileAtomic(rs.indexPath(), b)
	}
	if err != nil {
		rs.h.log.Error("writing the revision index", "file", rs.indexPath(), "error", err)
	}
}

// writeFileAtomic writes b to path by a temporary file and a rename, mode 0600.
func writeFileAtomic(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		_ = os.Remove(f.Name())
	}
	return err
}

func isDigest(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

func (rs *revisions) binPath(digest string) string {
	return filepath.Join(rs.cfg.Dir, digest+".wasm")
}

// keepBytes stores the bytes of a revision (once; the name is their digest).
func (rs *revisions) keepBytes(digest string, bin []byte) error {
	if rs.cfg.Dir == "" {
		rs.mu.Lock()
		rs.mem[digest] = bin
		rs.mu.Unlock()
		return nil
	}
	if _, err := os.Stat(rs.binPath(digest)); err == nil {
		return nil
	}
	return writeFileAtomic(rs.binPath(digest), bin)
}

// bytesOf reads the bytes of a revision back and checks them against their digest.
func (rs *revisions) bytesOf(digest string) ([]byte, error) {
	var bin []byte
	if rs.cfg.Dir == "" {
		rs.mu.Lock()
		bin = rs.mem[digest]
		rs.mu.Unlock()
		if bin == nil {
			return nil, fmt.Errorf("%w: the bytes of revision %s are not kept", ErrNoRevision, digest)
		}
	} else {
		var err error
		if bin, err = readOwnFile(rs.binPath(digest), -1); err != nil {
			return nil, fmt.Errorf("%w: the bytes of revision %s: %w", ErrNoRevision, digest, err)
		}
	}
	if sum := sha256.Sum256(bin); hex.EncodeToString(sum[:]) != digest {
		return nil, fmt.Errorf("%w: %s holds bytes of another digest (changed on disk?)", ErrNoRevision, rs.binPath(digest))
	}
	return bin, nil
}

// forgetLocked drops the revisions no type, pin or shadow refers to any more.
func (rs *revisions) forgetLocked() {
	used := make(map[string]bool)
	for _, ds := range rs.byType {
		for _, d := range ds {
			used[d] = true
		}
	}
	for _, p := range rs.pins {
		used[p.SHA256], used[p.FileSHA256] = true, true
	}
	for _, s := range rs.shadows {
		used[s.rev.Digest] = true
	}
	for d := range rs.bySHA {
		if !used[d] {
			delete(rs.bySHA, d)
			delete(rs.mem, d)
			if rs.cfg.Dir != "" {
				_ = os.Remove(rs.binPath(d))
			}
		}
	}
}

// recordLocked returns the record of m's digest, made from m if new.
func (rs *revisions) recordLocked(m *Module, file string) *revision {
	r := rs.bySHA[m.sum]
	if r == nil {
		// Its fields follow from its bytes: they never change (but Bad, under rs.mu).
		r = &revision{Digest: m.sum, File: file, FirstLoaded: m.loadedAt, Size: m.size,
			Name: m.manifest.Name, Version: m.manifest.Version, Types: slices.Clone(m.manifest.PluginTypes)}
		rs.bySHA[m.sum] = r
	}
	return r
}

// registered tells the daemon which revision registered a plugin (Config.OnRegistered).
func (s *served) registered(fn int, p registration.PluginInfo) {
	if f := s.m.h.revs.cfg.OnRegistered; fn == fnRegister && !s.shadow && f != nil {
		f(p.Socket, s.m.file, s.m.sum)
	}
}

// installed is called by Run when s starts serving the plugin types of file (a new file, or a
// new revision of it). It keeps s's bytes and records the revision first in the history of each
// type; it clears the pins the new revision overrides, re-applies a pin the index kept for
// this very revision (a restart), and puts s on probation when it replaces a good revision.
func (rs *revisions) installed(file string, s *served) {
	m := s.m
	bin := s.bin
	s.bin = nil
	if bin == nil {
		rs.h.log.Warn("revision not kept: a rollback to it will not be possible", "handler", file, "sha256", m.sum)
	} else if err := rs.keepBytes(m.sum, bin); err != nil {
		rs.h.log.Warn("revision not kept: a rollback to it will not be possible", "handler", file, "sha256", m.sum, "error", err)
	}
	rs.mu.Lock()
	r := rs.recordLocked(m, file)
	s.rev.Store(r)
	if r.Bad != "" {
		// Installed again by the operator after it was rolled back: it gets another chance.
		rs.h.log.Info("handler revision installed again after an automatic rollback", "handler", file, "sha256", m.sum, "rolled_back_because", r.Bad)
		r.Bad = ""
	}
	var probationFor, repin []string
	for _, t := range m.manifest.PluginTypes {
		ds := rs.byType[t]
		if len(ds) > 0 && ds[0] != m.sum && rs.previousGoodLocked(t, m.sum) != nil {
			// A new revision where a good one served (not the same one again after a
			// restart): watched in its first minutes.
			probationFor = append(probationFor, t)
		}
		ds = slices.DeleteFunc(slices.Clone(ds), func(d string) bool { return d == m.sum })
		ds = append([]string{m.sum}, ds...)
		if len(ds) > rs.cfg.Keep {
			ds = ds[:rs.cfg.Keep]
		}
		rs.byType[t] = ds
		rs.typeAt[t] = time.Now().UTC()
		switch p := rs.pins[t]; {
		case p == nil:
		case p.FileSHA256 == m.sum && p.SHA256 != m.sum:
			repin = append(repin, t)
		default:
			rs.h.log.Info("rollback pin cleared: the handler file holds a new revision", "plugin_type", t,
				"handler", file, "pinned_sha256", p.SHA256, "sha256", m.sum)
			rs.unpinLocked(t)
		}
	}
	// On probation before the history shows it: a call that follows what the history says
	// is counted.
	if len(probationFor) > 0 && rs.cfg.RollbackWindow > 0 && len(repin) == 0 {
		s.probation.Store(&probation{until: time.Now().Add(rs.cfg.RollbackWindow)})
	}
	rs.forgetLocked()
	rs.writeIndexLocked()
	rs.mu.Unlock()
	// Re-applying a pin loads a module: Run waits for it (a restart, before plugins are
	// registered by the newer revision). Recording alone does not wait for a rollback.
	if len(repin) > 0 {
		rs.pinMu.Lock()
		defer rs.pinMu.Unlock()
	}
	for _, t := range repin {
		rs.mu.Lock()
		p := rs.pins[t]
		rs.unpinLocked(t) // a pin of an earlier module of the same bytes is made again for m
		rs.mu.Unlock()
		if p == nil {
			continue
		}
		if _, err := rs.pinLocked(rs.h.ctx, t, p.SHA256, p.Auto, p.Reason); err != nil {
			rs.h.log.Error("rollback pin kept across the restart could not be applied; the file's revision serves",
				"plugin_type", t, "pinned_sha256", p.SHA256, "error", err)
		}
	}
}

// Served is who served a plugin type last, as the revision store recorded it.
type Served struct {
	File string    // the file the newest revision was installed from
	At   time.Time // when it was installed (its first load, for an index written before)
}

// LastServed returns, for every plugin type the revision store knows, who served it last, as
// read from the index at start (ConfigureRevisions) and kept since. The daemon decides with it
// which of its hosts a type belongs to at start, before any file or source loads.
func (h *Host) LastServed() map[string]Served {
	rs := h.revs
	rs.mu.Lock()
	defer rs.mu.Unlock()
	out := make(map[string]Served, len(rs.byType))
	for t, ds := range rs.byType {
		r := rs.bySHA[ds[0]]
		if r == nil {
			continue
		}
		at := rs.typeAt[t]
		if at.IsZero() {
			at = r.FirstLoaded
		}
		out[t] = Served{File: r.File, At: at}
	}
	return out
}

// servedBefore says whether the module of file, with digest sum, is what served plugin type t
// when the index was last written: the newest revision installed for t was installed from that
// file (byFile), or has that digest (byDigest). Run asks it for the files present at start,
// before it installs any, so that a restart keeps who serves each type.
func (rs *revisions) servedBefore(t, file, sum string) (byFile, byDigest bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	ds := rs.byType[t]
	if len(ds) == 0 {
		return false, false
	}
	r := rs.bySHA[ds[0]]
	return r != nil && r.File == file, ds[0] == sum
}

// previousGoodLocked is the newest revision of t other than digest that was not rolled back
// automatically.
func (rs *revisions) previousGoodLocked(t, digest string) *revision {
	for _, d := range rs.byType[t] {
		if r := rs.bySHA[d]; d != digest && r != nil && r.Bad == "" {
			return r
		}
	}
	return nil
}

// observe counts one plugin call of s in its revision and its probation; a revision on
// probation whose fault rate crosses the threshold is rolled back, once, in the background.
func (s *served) observe(err error) {
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
	h := s.m.h
	rs := h.revs
	if calls < int64(rs.cfg.RollbackMinCalls) || float64(faults) < rs.cfg.RollbackThreshold*float64(calls) {
		return
	}
	if !p.fired.CompareAndSwap(false, true) {
		return
	}
	reason := fmt.Sprintf("%d of its first %d calls trapped or timed out (threshold %.0f%% within %v of loading)",
		faults, calls, rs.cfg.RollbackThreshold*100, rs.cfg.RollbackWindow)
	h.goAsync(func() { rs.autoRollback(s, reason, err) })
}

// autoRollback pins every type s serves to its previous good revision.
func (rs *revisions) autoRollback(s *served, reason string, last error) {
	m := s.m
	rs.pinMu.Lock()
	defer rs.pinMu.Unlock()
	rs.mu.Lock()
	if r := rs.bySHA[m.sum]; r != nil {
		r.Bad = reason
	}
	rs.mu.Unlock()
	for _, t := range m.manifest.PluginTypes {
		th := rs.h.typeHandlerOf(t)
		if th == nil || th.cur.Load() != s || s.pinFor(t) != nil {
			continue
		}
		rs.mu.Lock()
		prev := rs.previousGoodLocked(t, m.sum)
		rs.mu.Unlock()
		if prev == nil {
			rs.h.log.Error("handler revision fails, and there is no earlier good revision to roll back to",
				"plugin_type", t, "handler", m.file, "sha256", m.sum, "reason", reason, "last_error", last)
			continue
		}
		if _, err := rs.pinLocked(rs.h.ctx, t, prev.Digest, true, reason); err != nil {
			rs.h.log.Error("automatic rollback failed; the new revision keeps serving",
				"plugin_type", t, "handler", m.file, "sha256", m.sum, "to_sha256", prev.Digest, "error", err)
			continue
		}
		rs.h.log.Warn("handler revision rolled back automatically", "plugin_type", t, "handler", m.file,
			"from_sha256", m.sum, "to_sha256", prev.Digest, "to_version", prev.Version, "reason", reason, "last_error", last)
	}
	rs.repinned()
}

// changed tells the daemon the handler set changed (a pin, a shadow), as Run does after its
// steps.
func (rs *revisions) changed() {
	if f := rs.h.cfg.OnChange; f != nil {
		f()
	}
}

// repinned is changed for a pin set or cleared: another revision serves the type, so the
// plugins it rejected are asked again (the registry wakes the reconciler).
func (rs *revisions) repinned() {
	rs.changed()
	rs.h.cfg.Registry.Touch()
}

// sync runs after each of Run's steps, on its goroutine, with what serves the handler files
// now (live: their modules, by file): it records the modules Run installed since (installed),
// and clears the pins of files whose revision changed or that are gone.
func (rs *revisions) sync(live map[*served]string) {
	h := rs.h
	for s, file := range live {
		if s.rev.Load() == nil {
			rs.installed(file, s)
		}
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for t, p := range rs.pins {
		if p.fileS != nil && live[p.fileS] == "" {
			h.log.Info("rollback pin cleared: its handler file was replaced or removed", "plugin_type", t, "pinned_sha256", p.SHA256)
			rs.unpinLocked(t)
			rs.writeIndexLocked()
		}
	}
}

// typeHandlerOf returns the registered handler of t when it is one of this host's.
func (h *Host) typeHandlerOf(t string) *typeHandler {
	hd, ok := h.cfg.Registry.Get(t)
	if !ok {
		return nil
	}
	th, _ := hd.(*typeHandler)
	if th == nil || th.cur.Load() == nil || th.cur.Load().m.h != h {
		return nil
	}
	return th
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
	if cur.m.sum == digest {
		rs.mu.Lock()
		rs.unpinLocked(t)
		rs.writeIndexLocked()
		rs.mu.Unlock()
		return r, nil
	}
	if why := rs.h.cfg.Bindings[t].refusal(t, cur.m.file, digest); why != "" {
		return nil, fmt.Errorf("%w: revision %s may not serve: %s", ErrBadModule, short(digest), why)
	}
	bin, err := rs.bytesOf(digest)
	if err != nil {
		return nil, fmt.Errorf("plugin type %s, revision %s: %w", t, short(digest), err)
	}
	m, err := rs.h.load(ctx, cur.m.file, bin, cur.m.stats)
	if err != nil {
		return nil, fmt.Errorf("plugin type %s, revision %s did not load: %w", t, short(digest), err)
	}
	if !slices.Contains(m.manifest.PluginTypes, t) {
		m.retire()
		return nil, fmt.Errorf("%w: revision %s does not declare plugin type %s", ErrNoRevision, short(digest), t)
	}
	ps := &served{m: m, q: cur.q} // the file's quarantine
	ps.rev.Store(r)
	cur.q.reset() // the older revision is not quarantined for what the newer one did
	rs.mu.Lock()
	rs.unpinLocked(t)
	rs.pins[t] = &pinned{Pin: Pin{PluginType: t, SHA256: digest, FileSHA256: cur.m.sum, Auto: auto, Reason: reason, At: time.Now()}, s: ps, fileS: cur}
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
		p.s.m.retire()
	}
}

// Rollback makes plugin type t served by revision digest (a prefix of at least 6 hex digits
// will do), or by the previous good revision when digest is "". It pins t until the handler
// file changes again or Unpin. It returns the revision now serving.
func (h *Host) Rollback(ctx context.Context, t, digest string) (Revision, error) {
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
	serving := th.cur.Load().m.sum
	if ps := th.cur.Load().pinFor(t); ps != nil {
		serving = ps.m.sum
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
		"to_version", r.Version, "handler", th.cur.Load().m.file)
	rs.repinned()
	return rs.view(t, r), nil
}

// revisionChange begins an operator's change of revisions (a rollback, a pin cleared, a
// shadow set): Close waits for it, and it runs alone among them. The caller calls done.
func (h *Host) revisionChange() (done func(), _ error) {
	if !h.beginWork() {
		return nil, ErrClosed
	}
	h.revs.pinMu.Lock()
	return func() {
		h.revs.pinMu.Unlock()
		h.wg.Done()
	}, nil
}

// resolveLocked expands a digest prefix among t's revisions; "" when none or several match.
func (rs *revisions) resolveLocked(t, prefix string) string {
	if len(prefix) < 6 {
		return ""
	}
	found := ""
	for _, d := range rs.byType[t] {
		if len(d) >= len(prefix) && d[:len(prefix)] == prefix {
			if found != "" {
				return ""
			}
			found = d
		}
	}
	return found
}

// Unpin clears a rollback pin of t: the revision the handler file holds serves again.
func (h *Host) Unpin(t string) error {
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

// History returns the revisions kept for plugin type t, newest first, and its pin (if any).
func (h *Host) History(t string) ([]Revision, *Pin) {
	rs := h.revs
	rs.mu.Lock()
	ds := slices.Clone(rs.byType[t])
	var pin *Pin
	if p := rs.pins[t]; p != nil && p.s != nil {
		cp := p.Pin
		pin = &cp
	}
	recs := make([]*revision, 0, len(ds))
	for _, d := range ds {
		if r := rs.bySHA[d]; r != nil {
			recs = append(recs, r)
		}
	}
	rs.mu.Unlock()
	out := make([]Revision, 0, len(recs))
	for _, r := range recs {
		out = append(out, rs.view(t, r))
	}
	return out, pin
}

func (rs *revisions) view(t string, r *revision) Revision {
	rs.mu.Lock()
	v := Revision{
		SHA256: r.Digest, File: r.File, Name: r.Name, Version: r.Version, PluginTypes: slices.Clone(r.Types),
		Size: r.Size, FirstLoaded: r.FirstLoaded, Calls: r.calls.Load(), Failures: r.failures.Load(),
		Traps: r.traps.Load(), Timeouts: r.timeouts.Load(), Bad: r.Bad,
	}
	rs.mu.Unlock()
	if th := rs.h.typeHandlerOf(t); th != nil {
		cur := th.cur.Load()
		v.InFile = cur != nil && cur.m.sum == r.Digest
		if ps := cur.pinFor(t); ps != nil {
			v.Serving, v.Pinned = ps.m.sum == r.Digest, ps.m.sum == r.Digest
		} else {
			v.Serving = v.InFile
		}
	}
	return v
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

// short is a digest as tables show it.
func short(d string) string {
	if len(d) > 12 {
		return d[:12]
	}
	return d
}

// Serves reports whether a handler of this host serves plugin type t.
func (h *Host) Serves(t string) bool { return h.typeHandlerOf(t) != nil }

// Pins returns the rollback pins of the given plugin types, sorted by type.
func (h *Host) Pins(types []string) []Pin { return h.revs.pinsOf(types) }
