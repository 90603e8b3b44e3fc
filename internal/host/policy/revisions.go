package policy

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
	"sync"
	"sync/atomic"
	"time"

	"github.com/wasmhost/wasmhost/internal/host/sandbox"
)

// Revisions: the host keeps the last few good revisions of the handler of each plugin type,
// content-addressed (RevisionConfig.Dir/<sha256>.wasm), so that an operator can go back to one
// (Rollback), and so that a new revision that traps or times out too often in its first minutes
// is rolled back to the previous good one automatically (rollback.go).

// Sentinel errors of revisions. Callers decide with errors.Is.
var (
	// ErrNoRevision: the plugin type has no handler, no such revision is kept, or no earlier
	// good revision is left to go back to.
	ErrNoRevision = errors.New("host: no such revision")
)

// RevisionConfig configures the revisions a Layer keeps and its automatic rollback.
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

// The defaults of RevisionConfig: the one place they are written (config.Default takes them).
const (
	DefaultKeep              = 5
	DefaultRollbackThreshold = 0.5
	DefaultRollbackMinCalls  = 5
)

func (c RevisionConfig) withDefaults() RevisionConfig {
	if c.Keep <= 0 {
		c.Keep = DefaultKeep
	}
	if c.RollbackThreshold <= 0 {
		c.RollbackThreshold = DefaultRollbackThreshold
	}
	if c.RollbackMinCalls <= 0 {
		c.RollbackMinCalls = DefaultRollbackMinCalls
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
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, sandbox.ErrRetired) {
		return callOutcome{}
	}
	o := callOutcome{
		timeout:     errors.Is(err, context.DeadlineExceeded),
		trap:        errors.Is(err, sandbox.ErrTrap) || errors.Is(err, sandbox.ErrBudget),
		quarantined: errors.Is(err, ErrQuarantined),
	}
	o.failed = o.timeout || o.trap || o.quarantined || errors.Is(err, sandbox.ErrHandlerFailed) || errors.Is(err, sandbox.ErrBadResult)
	return o
}

// fault: what a new revision is judged by.
func (o callOutcome) fault() bool { return o.trap || o.timeout || o.quarantined }

// revisions is the host's revision store. Its mu guards the maps; pinMu serializes what loads
// and swaps modules (rollbacks, pins, shadows), which may take a compile.
type revisions struct {
	h     *Layer
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

// newRevisions makes h's store. The reloader tells it what serves after each of its steps (Sync).
func newRevisions(h *Layer) *revisions {
	return &revisions{
		h: h, cfg: RevisionConfig{}.withDefaults(),
		bySHA: make(map[string]*revision), byType: make(map[string][]string), typeAt: make(map[string]time.Time),
		pins: make(map[string]*pinned), shadows: make(map[string]*shadowRun), mem: make(map[string][]byte),
	}
}

// ConfigureRevisions sets how revisions are kept and rolled back, and reads the index kept in
// cfg.Dir (its revisions, and the pins that outlive a restart). Call it before the reloader runs.
func (h *Layer) ConfigureRevisions(cfg RevisionConfig) error {
	rs := h.revs
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.cfg = cfg.withDefaults()
	if rs.cfg.Dir == "" {
		return nil
	}
	if err := sandbox.EnsurePrivateDir(rs.cfg.Dir); err != nil {
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
	b, err := sandbox.ReadOwnFile(rs.indexPath(), -1)
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
		if bin, err = sandbox.ReadOwnFile(rs.binPath(digest), -1); err != nil {
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
func (rs *revisions) recordLocked(m *sandbox.Module, file string) *revision {
	r := rs.bySHA[m.SHA256()]
	if r == nil {
		// Its fields follow from its bytes: they never change (but Bad, under rs.mu).
		r = &revision{Digest: m.SHA256(), File: file, FirstLoaded: m.LoadedAt(), Size: m.Size(),
			Name: m.Manifest().Name, Version: m.Manifest().Version, Types: m.PluginTypes()}
		rs.bySHA[m.SHA256()] = r
	}
	return r
}

// installed is called (from Sync) when s starts serving the plugin types of file (a new file, or a
// new revision of it). It keeps s's bytes and records the revision first in the history of each
// type; it clears the pins the new revision overrides, re-applies a pin the index kept for
// this very revision (a restart), and puts s on probation when it replaces a good revision.
func (rs *revisions) installed(file string, s *Serving) {
	m := s.m
	bin := s.bin
	s.bin = nil
	if bin == nil {
		rs.h.log.Warn("revision not kept: a rollback to it will not be possible", "handler", file, "sha256", m.SHA256())
	} else if err := rs.keepBytes(m.SHA256(), bin); err != nil {
		rs.h.log.Warn("revision not kept: a rollback to it will not be possible", "handler", file, "sha256", m.SHA256(), "error", err)
	}
	rs.mu.Lock()
	r := rs.recordLocked(m, file)
	s.rev.Store(r)
	if r.Bad != "" {
		// Installed again by the operator after it was rolled back: it gets another chance.
		rs.h.log.Info("handler revision installed again after an automatic rollback", "handler", file, "sha256", m.SHA256(), "rolled_back_because", r.Bad)
		r.Bad = ""
	}
	var probationFor, repin []string
	for _, t := range m.PluginTypes() {
		ds := rs.byType[t]
		if len(ds) > 0 && ds[0] != m.SHA256() && rs.previousGoodLocked(t, m.SHA256()) != nil {
			// A new revision where a good one served (not the same one again after a
			// restart): watched in its first minutes.
			probationFor = append(probationFor, t)
		}
		ds = slices.DeleteFunc(slices.Clone(ds), func(d string) bool { return d == m.SHA256() })
		ds = append([]string{m.SHA256()}, ds...)
		if len(ds) > rs.cfg.Keep {
			ds = ds[:rs.cfg.Keep]
		}
		rs.byType[t] = ds
		rs.typeAt[t] = time.Now().UTC()
		switch p := rs.pins[t]; {
		case p == nil:
		case p.FileSHA256 == m.SHA256() && p.SHA256 != m.SHA256():
			repin = append(repin, t)
		default:
			rs.h.log.Info("rollback pin cleared: the handler file holds a new revision", "plugin_type", t,
				"handler", file, "pinned_sha256", p.SHA256, "sha256", m.SHA256())
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
	// Re-applying a pin loads a module: the reloader waits for it (a restart, before plugins are
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
		if _, err := rs.pinLocked(rs.h.sb.Context(), t, p.SHA256, p.Auto, p.Reason); err != nil {
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
func (h *Layer) LastServed() map[string]Served {
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

// ServedBefore says whether the module of file, with digest sum, is what served plugin type t
// when the index was last written: the newest revision installed for t was installed from that
// file (byFile), or has that digest (byDigest). The reloader asks it for the files present at
// start, before it installs any, so that a restart keeps who serves each type.
func (h *Layer) ServedBefore(t, file, sum string) (byFile, byDigest bool) {
	rs := h.revs
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

// changed tells the daemon the handler set changed (a pin, a shadow), as the reloader does
// after its steps.
func (rs *revisions) changed() {
	if f := rs.h.cfg.OnChange; f != nil {
		f()
	}
}

// Sync runs after each of the reloader's steps, on its goroutine, with what serves the handler
// files now (live: their modules, by file): it records the modules installed since (installed),
// and clears the pins of files whose revision changed or that are gone.
func (h *Layer) Sync(live map[*Serving]string) {
	rs := h.revs
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

// revisionChange begins an operator's change of revisions (a rollback, a pin cleared, a
// shadow set): Close waits for it, and it runs alone among them. The caller calls done.
func (h *Layer) revisionChange() (done func(), _ error) {
	if !h.sb.BeginWork() {
		return nil, sandbox.ErrClosed
	}
	h.revs.pinMu.Lock()
	return func() {
		h.revs.pinMu.Unlock()
		h.sb.EndWork()
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

// History returns the revisions kept for plugin type t, newest first, and its pin (if any).
func (h *Layer) History(t string) ([]Revision, *Pin) {
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
		v.InFile = cur != nil && cur.m.SHA256() == r.Digest
		if ps := cur.pinFor(t); ps != nil {
			v.Serving, v.Pinned = ps.m.SHA256() == r.Digest, ps.m.SHA256() == r.Digest
		} else {
			v.Serving = v.InFile
		}
	}
	return v
}

// short is a digest as tables show it.
func short(d string) string {
	if len(d) > 12 {
		return d[:12]
	}
	return d
}
