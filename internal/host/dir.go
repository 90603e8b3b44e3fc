package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/wasmhost/wasmhost/internal/host/policy"
	"github.com/wasmhost/wasmhost/internal/host/sandbox"
	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/tracing"
)

// fileEntry is one *.wasm name in the handler directory.
type fileEntry struct {
	name  string
	path  string
	stats *sandbox.Stats
	q     policy.Quarantine // of the module serving: a new version starts afresh
	cur   *policy.Serving   // the module serving; written by Run's goroutine under Host.mu

	// Run's goroutine only.
	types     []string           // the plugin types whose handlers this file's module serves
	ident     fileIdent          // of the file at the last load attempt
	tried     bool               // ident is set
	failedSHA string             // of the last version that failed to load
	conflict  string             // a plugin type another file held when this one was refused
	loadErr   *sandbox.LastError // the last error when it is a refusal of the file, cleared when it loads
	loading   bool
	again     bool // the file changed while it was loading

	// What the directory shows of the name (the desired state), as the last passes saw it.
	seen      fileIdent // the file as last seen
	seenAt    time.Time // when seen was first seen: the file is complete once quiet for Debounce
	seenOK    bool      // seen is set
	retryAt   time.Time // not loaded before then (RefusedCompileBusy)
	goneSince time.Time // zero while the name is in the directory; else when it was first missed (written under Host.mu)
}

// isHandlerName: *.wasm, not hidden (ConfigMap volumes keep their real files in dot-names).
func isHandlerName(name string) bool {
	return !strings.HasPrefix(name, ".") && strings.HasSuffix(name, ".wasm") && len(name) > len(".wasm")
}

// Run loads the handler files in HandlerDir, registers a handler for each plugin type they
// declare, and then follows the directory, level-triggered as the socket watcher is: the
// desired state is the set of complete regular *.wasm files in the directory (symbolic links
// followed, as in a ConfigMap volume), the actual state the modules loaded from them, and every
// pass makes one follow the other, whatever event woke it (inotify events only wake it; a
// periodic re-scan repairs anything missed). A file is complete once it has not changed for
// Debounce; a file that fails to load while it is still changing is tried again quietly.
//
// A file added is loaded (in the background) and serves; replaced, in whatever way (written in
// place, unlinked and created again by install, renamed over, a ConfigMap's ..data swap), it is
// swapped in when it loads, behind the same registered handler (the old version keeps serving
// if it does not load); removed, and not back within RemovalGrace, its plugin types leave the
// registry and are retired after RetireGrace. A handler directory that is deleted counts as the
// removal of every file in it. Run returns when ctx is done or the host is closed, after all
// its goroutines have exited. The handlers stay registered and serving until Close.
func (h *Host) Run(ctx context.Context) error {
	if !h.running.CompareAndSwap(false, true) {
		return errors.New("host: Run called twice")
	}
	defer h.readyOnce.Do(func() { close(h.ready) })
	select {
	case <-h.sb.Closing():
		return sandbox.ErrClosed
	default:
	}
	dir := h.cfg.HandlerDir
	fi, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		// A missing handler directory is made, as the watcher makes the socket directory:
		// the daemon starts with no handler, and one dropped in later is loaded.
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("host: creating handler directory: %w", err)
		}
		fi, err = os.Stat(dir)
	}
	if err != nil {
		return fmt.Errorf("host: handler directory: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("host: handler directory %s is not a directory", dir)
	}
	if !h.cfg.AllowInsecure {
		if err := sandbox.CheckNotShared(dir, "handler directory", fi); err != nil {
			return err
		}
	}
	if h.cfg.FollowDir == nil {
		return errors.New("host: Run needs Config.FollowDir to follow the handler directory (the daemon gives internal/watcher's)")
	}
	// A pass that could not read the directory (missing, insecure) is tried again soon.
	f, err := h.cfg.FollowDir(filepath.Clean(dir), h.cfg.Resync, min(h.cfg.Resync, lostDirRetry))
	if err != nil {
		return fmt.Errorf("host: watching handler directory: %w", err)
	}
	defer f.Close()
	// Watch before listing, so that nothing happens unseen in between.
	if _, err := f.WatchRoot(fi); err != nil {
		return fmt.Errorf("host: watching handler directory %s: %w", dir, err)
	}
	// Without the parent's watch, a directory made again is found by looking every second
	// while it is missing.
	if err := f.WatchParent(); err != nil {
		h.log.Debug("cannot watch the handler directory's parent", "dir", filepath.Dir(filepath.Clean(dir)), "error", err)
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := &reloader{
		f:        f,
		h:        h,
		ctx:      ctx,
		cancel:   cancel,
		dir:      dir,
		handlers: make(map[string]*typeHandler),
		holders:  make(map[*policy.Serving]int),
		results:  make(chan loadResult),
		sem:      make(chan struct{}, runtime.NumCPU()),
		initial:  make(map[string]bool),
	}
	defer r.stop()
	h.log.Info("loading handlers", "dir", dir)
	start := time.Now()
	r.shrinkAt = start.Add(time.Duration(h.cfg.Limits.IdleInstanceTimeout) / 2)
	r.initialBy = start.Add(max(initialWait, 10*h.cfg.Debounce))
	r.rescan(start, true)
	r.flushInitial()

	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		r.stepDone()
		timer.Reset(r.nextWake(time.Now()))
		select {
		case <-ctx.Done():
			return nil
		case <-h.sb.Closing():
			return nil
		case _, ok := <-f.Changed():
			// An event only wakes the pass: what it does depends on what the directory
			// holds now.
			if !ok {
				return errors.New("host: handler directory watcher closed")
			}
			r.rescan(time.Now(), false)
		case err, ok := <-f.Errors():
			if !ok {
				return errors.New("host: handler directory watcher closed")
			}
			h.log.Warn("handler directory watcher error; re-scanning", "dir", dir, "error", err)
			f.Request("watcher error", 0)
		case <-f.Due():
			f.Take()
			r.rescan(time.Now(), false)
		case res := <-r.results:
			r.receive(res)
			if r.dirty {
				r.dirty = false
				r.rescan(time.Now(), false)
			}
		case <-timer.C:
			now := time.Now()
			r.expire(now)
			if !now.Before(r.shrinkAt) {
				r.shrinkPools(now)
			}
			r.rescan(now, false)
		}
	}
}

// DirFollower follows the handler directory for Run: the watch on the directory and on its
// parent, and when a pass is due. Its events only wake a pass (Changed, any number of them
// folded into one), any error of its means "look again" (Errors), and its one timer says when a
// pass is due (Due, then Take; Done after each pass, Request to ask for one soon). The daemon
// gives internal/watcher's (Config.FollowDir): the host does not import a file watcher, so that
// what builds a host only to load modules by path (the conformance kit, `wasmhost handler
// test`) links none.
type DirFollower interface {
	// Changed receives when something may have changed; it is closed if the follower stopped.
	Changed() <-chan struct{}
	// Errors delivers the follower's errors: events may have been missed.
	Errors() <-chan error
	// Due delivers when a pass is due; Take says why (requested or a retry: urgent, with
	// the requests it answers; or the periodic resync).
	Due() <-chan time.Time
	Take() (reason string, urgent bool, requests int)
	// Request asks for a pass within delay; Done, after a pass, schedules the next one: a
	// retry if err is not nil (it returns the wait), else the periodic resync.
	Request(reason string, delay time.Duration)
	Done(err error) (retryIn time.Duration)
	// Root stats the directory (a symbolic link followed) and says whether it is the one
	// watched; WatchRoot moves the watch to fi, saying whether another had been watched;
	// UnwatchRoot drops it, saying whether one had been; WatchParent watches the parent, so
	// that the directory deleted or made again is seen.
	Root() (fi fs.FileInfo, watched bool, err error)
	WatchRoot(fi fs.FileInfo) (moved bool, err error)
	UnwatchRoot() bool
	WatchParent() error
	// Close stops the follower and returns once its goroutines have exited.
	Close() error
}

// reloader is Run's state; only Run's goroutine uses it.
//
// It follows the directory on the socket watcher's engine (a DirFollower: watch before
// listing, the parent watched, events only wake a pass, a pass soon after any watcher error,
// retried while the directory cannot be read, and on a slow timer), with decisions of its own:
// the watcher keeps the unix sockets of a tree by identity, without following links, ignoring
// writes, and re-creates its directory; this follows the regular files of one flat directory
// through symbolic links (ConfigMap volumes), needs writes (a file written in place), decides on
// the bytes (a digest), and never re-creates the directory, whose removal is the removal of its
// files.
type reloader struct {
	f        DirFollower
	lost     bool        // the watched directory went away
	insecure bool        // the watched directory's mode or owner became insecure
	refused  os.FileInfo // a directory found in its place but refused (insecure), logged once
	h        *Host
	ctx      context.Context // of Run; canceled before Run waits for its loads
	cancel   context.CancelFunc
	dir      string
	handlers map[string]*typeHandler // the registered handler of each plugin type
	holders  map[*policy.Serving]int // how many of handlers a module serves (at zero, it is retired)
	retiring []retiringHandler
	results  chan loadResult
	sem      chan struct{} // bounds concurrent loads
	inflight int
	initial  map[string]bool // files present at start whose load has not returned yet
	pending  []loadResult    // their results, applied together
	held     []loadResult    // results waiting for the loads of files before them (applyHeld)
	// startOwners: while the files present at start are applied, the file that served each
	// plugin type before the restart, when it is among them.
	startOwners map[string]*fileEntry
	ready       bool
	dirty       bool      // a file changed while it was loading: re-scan
	initialBy   time.Time // files still being written at start are waited for until then
	dueAt       time.Time // the next time a file becomes complete or its removal grace ends
	shrinkAt    time.Time // the next look for idle instances (idle.go)
}

// typeHandler is the reloader's hold on the registered handler of a plugin type (the policy
// layer's TypeHandler, which is what the registry holds): the file whose module serves it.
type typeHandler struct {
	*policy.TypeHandler
	file *fileEntry
}

type retiringHandler struct {
	t  *typeHandler
	at time.Time
}

type loadResult struct {
	e           *fileEntry
	m           *sandbox.Module
	bin         []byte // m's bytes, for the revision store
	sum         string
	unchanged   bool // the file has the serving version's bytes
	sameFailure bool // the file has the bytes that failed last time
	changed     bool // the file changed while it was read: the result is dropped, quietly
	err         error
}

// rescan is one pass of the reconcile: it lists the directory (the desired state) and makes
// the loaded files follow it. A file that is new or changed is loaded once it is complete (it
// has not changed for Debounce); a file that is gone is removed once it has stayed gone for
// RemovalGrace, so that a file replaced by unlinking and creating it again (install), or a
// directory deleted and made again, is a replacement and not a removal.
func (r *reloader) rescan(now time.Time, initial bool) {
	r.dueAt = time.Time{}
	present, ok, err := r.list()
	r.f.Done(err)
	if !ok {
		return // the directory cannot be read for now: nothing is known to be gone
	}
	// Removals first: a plugin type they free may be claimed by a file refused for it.
	for name, e := range r.h.files {
		if _, ok := present[name]; ok {
			continue
		}
		if e.goneSince.IsZero() {
			r.setGone(e, now)
			if e.cur != nil {
				r.h.log.Info("handler file gone; its plugin types are removed unless it is back within the removal grace",
					"handler", e.path, "plugin_types", e.types, "grace", r.h.cfg.RemovalGrace)
			}
		}
		switch due := e.goneSince.Add(r.h.cfg.RemovalGrace); {
		case e.loading:
			e.again = true
		case e.cur == nil || !now.Before(due):
			r.remove(e)
		default:
			r.due(due)
		}
	}
	names := slices.Sorted(maps.Keys(present))
	for _, name := range names {
		fi := present[name]
		e := r.h.files[name]
		if e == nil {
			e = &fileEntry{name: name, path: filepath.Join(r.dir, name), stats: new(sandbox.Stats)}
			r.h.mu.Lock()
			r.h.files[name] = e
			r.h.mu.Unlock()
		}
		if !e.goneSince.IsZero() {
			r.setGone(e, time.Time{})
			if e.cur != nil {
				r.h.log.Info("handler file is back; its plugin types were kept", "handler", e.path)
			}
		}
		id := identOf(fi)
		if !e.seenOK || id != e.seen {
			e.seen, e.seenAt, e.seenOK = id, now, true
		}
		if initial {
			r.initial[name] = true
		}
		// Complete once it has not changed for Debounce: since its modification time, or
		// since it was first seen so (a modification time in the future proves nothing).
		if complete := minTime(e.seenAt, fi.ModTime()).Add(r.h.cfg.Debounce); complete.After(now) {
			r.due(complete)
			continue
		}
		if e.loading {
			e.again = true
			continue
		}
		if e.retryAt.After(now) {
			r.due(e.retryAt)
			continue
		}
		// A file refused for a plugin type another file held is tried again once it is free.
		force := e.conflict != "" && r.free(e.conflict)
		if e.tried && id == e.ident && !force {
			continue
		}
		e.ident, e.tried = id, true
		r.startLoad(e, force)
	}
	if !r.ready {
		for name := range r.initial {
			e := r.h.files[name]
			// Gone, or still being written long after start: loaded when it is complete,
			// but the handlers present at start do not wait for it.
			if e == nil || !e.goneSince.IsZero() || (!e.loading && !now.Before(r.initialBy)) {
				delete(r.initial, name)
			}
		}
		if len(r.initial) > 0 {
			r.due(r.initialBy)
		}
		r.flushInitial()
	}
}

// setGone records when e went from the directory (zero: it is there).
func (r *reloader) setGone(e *fileEntry, t time.Time) {
	r.h.mu.Lock()
	e.goneSince = t
	r.h.mu.Unlock()
}

// due asks for a pass at t.
func (r *reloader) due(t time.Time) {
	if r.dueAt.IsZero() || t.Before(r.dueAt) {
		r.dueAt = t
	}
}

// shrinkPools shrinks the pools of the modules Run serves (Run's goroutine).
func (r *reloader) shrinkPools(now time.Time) {
	timeout := time.Duration(r.h.cfg.Limits.IdleInstanceTimeout)
	r.shrinkAt = now.Add(timeout / 2)
	for _, e := range r.h.files {
		if e.cur == nil {
			continue
		}
		if n := e.cur.Module().Shrink(now, timeout); n > 0 {
			r.h.log.Debug("idle handler instances closed", "handler", e.path, "closed", n, "idle_for", timeout)
		}
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// list returns the handler files the directory holds now, by name, with what stat says of
// them (symbolic links followed); a name whose stat fails (a dangling link, for a moment, in a
// ConfigMap update) is not there. ok is false when the directory cannot be read, or may not be
// read: then nothing is known to be gone. A directory that does not exist holds nothing. err
// says that the directory is to be looked at again soon (missing, insecure, unreadable).
func (r *reloader) list() (map[string]os.FileInfo, bool, error) {
	if !r.rewatch() {
		return nil, r.lost, errNotFollowed
	}
	entries, err := os.ReadDir(r.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, true, nil // deleted since rewatch looked: the next pass sees it lost
	}
	if err != nil {
		r.h.log.Error("reading handler directory; keeping the handlers loaded", "dir", r.dir, "error", err)
		return nil, false, err
	}
	present := make(map[string]os.FileInfo, len(entries))
	for _, de := range entries {
		name := de.Name()
		if !isHandlerName(name) {
			continue
		}
		if fi, err := os.Stat(filepath.Join(r.dir, name)); err == nil {
			present[name] = fi
		}
	}
	return present, true, nil
}

// stepDone ends a step of following the directory: the revision store is told what serves
// now (it records the revisions installed since, and clears the pins of files replaced or
// gone), then Config.OnChange.
func (r *reloader) stepDone() {
	live := make(map[*policy.Serving]string)
	r.h.mu.Lock()
	for _, e := range r.h.files {
		if e.cur != nil {
			live[e.cur] = e.path
		}
	}
	r.h.mu.Unlock()
	r.h.Sync(live)
	if r.h.cfg.OnChange != nil {
		r.h.cfg.OnChange()
	}
}

func (r *reloader) startLoad(e *fileEntry, force bool) {
	e.loading = true
	r.inflight++
	curSHA := ""
	if e.cur != nil {
		curSHA = e.cur.Module().SHA256()
	}
	failedSHA, ident := e.failedSHA, e.ident
	go func() {
		res := loadResult{e: e}
		select {
		case r.sem <- struct{}{}:
			_, span := tracing.StartRoot(r.ctx, r.h.cfg.Tracer, tracing.SpanReload)
			res = r.load(e, ident, curSHA, failedSHA, force)
			endReload(span, res)
			<-r.sem
		case <-r.ctx.Done():
			res.err = r.ctx.Err()
		}
		r.results <- res
	}()
}

// endReload ends the span of a load of a handler file (read, compile, checks) with its outcome:
// loaded (to be installed, unless another file holds its types), unchanged, changed (read
// while written: the next pass loads it), or refused with the reason.
func endReload(span trace.Span, res loadResult) {
	if span.IsRecording() {
		outcome := "loaded"
		switch {
		case res.changed:
			outcome = "changed"
		case res.unchanged:
			outcome = "unchanged"
		case res.sameFailure || res.err != nil:
			outcome = "refused"
		}
		span.SetAttributes(attribute.String(tracing.AttrFile, res.e.path), attribute.String(tracing.AttrOutcome, outcome))
		if res.sum != "" {
			span.SetAttributes(attribute.String(tracing.AttrRevision, "sha256:"+res.sum))
		}
	}
	tracing.End(span, res.err, sandbox.RefusalReason(res.err))
}

func (r *reloader) load(e *fileEntry, ident fileIdent, curSHA, failedSHA string, force bool) loadResult {
	res := loadResult{e: e}
	if !r.h.sb.BeginWork() {
		res.err = sandbox.ErrClosed
		return res
	}
	defer r.h.sb.EndWork()
	bin, err := r.h.sb.ReadHandlerFile(e.path)
	// The bytes are the file's only if it did not change while they were read (a writer
	// between two writes, a rename over it): else the result is dropped and the next pass
	// tries again once the file is complete.
	if fi, serr := os.Stat(e.path); serr != nil || identOf(fi) != ident {
		res.changed = true
		return res
	}
	if err != nil {
		res.err = err
		return res
	}
	sum := sha256.Sum256(bin)
	res.sum = hex.EncodeToString(sum[:])
	switch {
	case res.sum == curSHA:
		res.unchanged = true
	case res.sum == failedSHA && !force:
		res.sameFailure = true
	default:
		res.m, res.err = r.h.sb.Load(r.ctx, e.path, bin, e.stats)
		if res.m != nil {
			res.bin = bin
		}
	}
	return res
}

// receive takes the result of a load. The files present at start are applied together, in
// name order, so that of two files that claim one plugin type the first by name wins, as it
// would had they arrived in that order.
func (r *reloader) receive(res loadResult) {
	r.inflight--
	e := res.e
	e.loading = false
	if e.again || res.changed {
		e.again, r.dirty = false, true
	}
	if !r.ready && r.initial[e.name] {
		delete(r.initial, e.name)
		r.pending = append(r.pending, res)
		r.flushInitial()
		return
	}
	r.held = append(r.held, res)
	r.applyHeld()
}

// applyHeld applies the results held back, in name order. A new file that loaded waits while a
// new file before it by name is still loading: of files that arrive together and declare one
// plugin type, the first by name takes it, as at start.
func (r *reloader) applyHeld() {
	slices.SortFunc(r.held, func(a, b loadResult) int { return strings.Compare(a.e.name, b.e.name) })
	keep := r.held[:0]
	for _, res := range r.held {
		if r.mustWait(res) {
			keep = append(keep, res)
			continue
		}
		r.apply(res)
	}
	clear(r.held[len(keep):])
	r.held = keep
}

func (r *reloader) mustWait(res loadResult) bool {
	if res.m == nil || res.e.cur != nil {
		return false
	}
	for _, o := range r.h.files {
		if o != res.e && o.name < res.e.name && o.loading && o.cur == nil {
			return true
		}
	}
	return false
}

// flushInitial applies the results of the files present at start once they are all in, in
// name order, and then says the host is ready.
func (r *reloader) flushInitial() {
	if r.ready || len(r.initial) > 0 {
		return
	}
	slices.SortFunc(r.pending, func(a, b loadResult) int { return strings.Compare(a.e.name, b.e.name) })
	// A file that served a plugin type before the restart (the revision store remembers)
	// keeps it, as it would have kept it had the daemon run on; the first by name takes a
	// type nobody served.
	// The file it served from first; else a file with the bytes that served it.
	r.startOwners = make(map[string]*fileEntry)
	for _, sameFile := range []bool{true, false} {
		for _, res := range r.pending {
			if res.m == nil {
				continue
			}
			for _, t := range res.m.PluginTypes() {
				byFile, byDigest := r.h.ServedBefore(t, res.e.path, res.m.SHA256())
				if r.startOwners[t] == nil && ((sameFile && byFile) || (!sameFile && byDigest)) {
					r.startOwners[t] = res.e
				}
			}
		}
	}
	for _, res := range r.pending {
		r.apply(res)
	}
	r.pending, r.startOwners = nil, nil
	r.checkReady()
	r.applyHeld()
}

// apply installs the result of a load, or logs why it failed.
func (r *reloader) apply(res loadResult) {
	e := res.e
	if r.h.files[e.name] != e || !e.goneSince.IsZero() || res.changed {
		// Removed, gone or changed while it loaded: the next pass looks again.
		if res.m != nil {
			res.m.Retire()
		}
		return
	}
	switch {
	case res.unchanged:
		// The file has the serving bytes again: a refusal of other bytes is past.
		e.failedSHA = ""
		r.clearLoadError(e)
	case res.sameFailure:
	case sandbox.RefusalReason(res.err) == sandbox.RefusedCompileBusy:
		// Not the file's fault: tried again soon, as if it had changed.
		e.tried, e.retryAt = false, time.Now().Add(compileBusyRetry)
		r.due(e.retryAt)
		r.h.countRefusal(sandbox.RefusedCompileBusy)
		r.h.log.Warn("handler file not loaded for now", "handler", e.path, "error", res.err)
		r.setLoadError(e, res.err)
	case res.err != nil:
		// Counted and logged before the status shows it: whoever sees the error in the
		// status finds the count and the log line too.
		e.failedSHA = res.sum
		r.h.countRefusal(sandbox.RefusalReason(res.err))
		if e.cur != nil {
			r.h.log.Error("handler file update refused; the previous version keeps serving",
				"handler", e.path, "serving_sha256", e.cur.Module().SHA256(), "error", res.err)
		} else {
			r.h.log.Error("handler file refused", "handler", e.path, "error", res.err)
		}
		r.setLoadError(e, res.err)
	default:
		m := res.m
		if t, why, reason, held := r.owner(e, m); why != "" {
			err := sandbox.Refuse(e.path, reason, why)
			e.conflict, e.failedSHA = "", res.sum
			if held {
				e.conflict = t // tried again once the type is free
			}
			r.h.countRefusal(reason)
			if e.cur != nil {
				r.h.log.Error("handler file update refused; the previous version keeps serving",
					"handler", e.path, "plugin_type", t, "serving_sha256", e.cur.Module().SHA256(), "error", err)
			} else if held {
				r.h.log.Error("handler file refused", "handler", e.path, "plugin_type", t, "error", err,
					"hint", fmt.Sprintf("the first to serve a plugin type keeps it, across restarts; handlers.types.%s.file or .digest in the config decides", t))
			} else {
				r.h.log.Error("handler file refused", "handler", e.path, "plugin_type", t, "error", err)
			}
			r.setLoadError(e, err)
			m.Retire()
			return
		}
		e.conflict, e.failedSHA = "", ""
		r.install(e, r.h.NewServing(m, &e.q, res.bin))
	}
}

// owner decides whether m, loaded from e, may serve the plugin types it declares: a type
// bound (Config.Bindings) to another file or digest may not, nor one that another handler
// serves already, of this host or another on the same registry (the handlers pulled from OCI
// registries): a newcomer never displaces the one serving. It returns the first type refused,
// why (or ""), the refusal's reason (RefusedNotBound or RefusedConflict), and whether it is
// refused because it is held, which may change.
func (r *reloader) owner(e *fileEntry, m *sandbox.Module) (pluginType, why, reason string, held bool) {
	for _, t := range m.PluginTypes() {
		if why := r.h.cfg.Bindings[t].Refusal(t, e.path, m.SHA256()); why != "" {
			return t, why, RefusedNotBound, false
		}
		if th := r.handlers[t]; th != nil && th.file != e && th.file.goneSince.IsZero() {
			return t, fmt.Sprintf("plugin type %s is already handled by %s", t, th.file.path), RefusedConflict, true
		}
		if o := r.startOwners[t]; o != nil && o != e {
			return t, fmt.Sprintf("plugin type %s is already handled by %s (it served it before the restart)", t, o.path), RefusedConflict, true
		}
		if r.handlers[t] == nil {
			if other, ok := r.h.cfg.Registry.Get(t); ok {
				return t, fmt.Sprintf("plugin type %s is already handled by %s", t, policy.HandlerName(other)), RefusedConflict, true
			}
		}
	}
	return "", "", "", false
}

// free reports whether a file refused for pluginType may try again: no handler serves the
// type, or the file serving it is gone from the directory (it hands the type over).
func (r *reloader) free(pluginType string) bool {
	if th := r.handlers[pluginType]; th != nil {
		return !th.file.goneSince.IsZero()
	}
	return !r.h.cfg.Registry.Has(pluginType)
}

// setLoadError records why e's file was not loaded as its last error.
func (r *reloader) setLoadError(e *fileEntry, err error) {
	e.loadErr = &sandbox.LastError{Msg: err.Error(), At: time.Now(), Refusal: sandbox.RefusalReason(err)}
	e.stats.SetLast(e.loadErr)
}

// clearLoadError forgets the last error when it is a refusal of e's file (not a failed call).
func (r *reloader) clearLoadError(e *fileEntry) {
	if e.loadErr != nil {
		e.stats.ClearLast(e.loadErr)
		e.loadErr = nil
	}
}

// install makes s serve e's plugin types: the handlers of types e already served switch to
// s, new types get a handler in the registry, and types s no longer declares are retired.
func (r *reloader) install(e *fileEntry, s *policy.Serving) {
	m := s.Module()
	old := e.cur
	swapped := false
	for _, t := range m.PluginTypes() {
		r.holders[s]++
		if th := r.handlers[t]; th != nil {
			if th.file != e {
				r.handOver(th, e)
			}
			if prev := th.Swap(s); prev != nil {
				r.release(prev)
				swapped = true
			}
			continue
		}
		th := &typeHandler{TypeHandler: policy.NewTypeHandler(t, s), file: e}
		if other, claimed := r.h.cfg.Registry.Claim(t, th.TypeHandler); !claimed {
			// Another host took the type since owner looked: it keeps it.
			r.holders[s]--
			r.h.log.Error("plugin type not served: another handler took it meanwhile",
				"handler", e.path, "plugin_type", t, "serving", policy.HandlerName(other))
			continue
		}
		r.handlers[t] = th
	}
	if r.holders[s] == 0 {
		delete(r.holders, s)
		m.Retire()
		return
	}
	if swapped {
		// Behind the same registered handler a new revision now answers: the plugins the
		// old one rejected are asked again (the registry did not change, so say so).
		defer r.h.cfg.Registry.Touch()
	}
	for _, t := range e.types {
		if !slices.Contains(m.PluginTypes(), t) {
			r.retireType(t, fmt.Sprintf("handler file %s no longer declares it", e.path))
		}
	}
	e.types = m.PluginTypes()
	r.h.mu.Lock()
	e.cur = s
	r.h.mu.Unlock()
	e.q.Reset() // a new version is not quarantined for what the old one did
	// Nor does it carry what went wrong before it: a refused update, the old version's
	// failed calls.
	e.stats.SetLast(nil)
	e.loadErr = nil
	if old != nil {
		r.h.log.Info("handler replaced", "handler", e.path, "plugin_types", e.types,
			"old_sha256", old.Module().SHA256(), "sha256", m.SHA256(), "size", m.Size())
	} else {
		r.h.log.Info("handler serving", "handler", e.path, "plugin_types", e.types, "sha256", m.SHA256(), "size", m.Size())
	}
}

// handOver gives the handler of a plugin type served by a file that is gone to e, whose module
// then serves it behind the same registered handler: renaming a handler file, or replacing it
// by a file of another name, is a replacement too. The gone file keeps its other types, if
// any; with none left it serves nothing, and is loaded anew if it comes back.
func (r *reloader) handOver(th *typeHandler, e *fileEntry) {
	old := th.file
	old.types = slices.DeleteFunc(slices.Clone(old.types), func(t string) bool { return t == th.PluginType() })
	th.file = e
	if len(old.types) == 0 {
		r.h.mu.Lock()
		old.cur = nil
		r.h.mu.Unlock()
		old.tried = false
		r.dirty = true // the next pass forgets it
	}
	r.h.log.Info("plugin type handed over from a handler file that is gone", "plugin_type", th.PluginType(),
		"from", old.path, "to", e.path)
}

// release drops one handler's hold on s; the last one retires its module (it closes when its
// calls have returned).
func (r *reloader) release(s *policy.Serving) {
	r.holders[s]--
	if r.holders[s] <= 0 {
		delete(r.holders, s)
		s.Module().Retire()
	}
}

// retireType takes pluginType's handler out of the registry; it keeps serving (so that the
// plugins of the type can be deregistered through it) until RetireGrace has passed.
func (r *reloader) retireType(pluginType, why string) {
	th := r.handlers[pluginType]
	if th == nil {
		return
	}
	delete(r.handlers, pluginType)
	r.dirty = true // a file refused for this type may load now
	if cur, ok := r.h.cfg.Registry.Get(pluginType); ok && cur == registration.Handler(th.TypeHandler) {
		r.h.cfg.Registry.Remove(pluginType)
	}
	th.Retire(why)
	r.retiring = append(r.retiring, retiringHandler{t: th, at: time.Now().Add(r.h.cfg.RetireGrace)})
	r.h.log.Info("plugin type handler retired", "plugin_type", pluginType, "reason", why, "grace", r.h.cfg.RetireGrace)
}

// expire closes the retired handlers whose grace has passed.
func (r *reloader) expire(now time.Time) {
	r.retiring = slices.DeleteFunc(r.retiring, func(rh retiringHandler) bool {
		if rh.at.After(now) {
			return false
		}
		if s := rh.t.Swap(nil); s != nil {
			r.release(s)
		}
		// Its key-value store goes with it, unless another file serves the type now.
		if r.handlers[rh.t.PluginType()] == nil {
			r.h.sb.DropStore(rh.t.PluginType())
		}
		return true
	})
}

// remove takes a file that is gone out of the handler set: its plugin types are retired.
func (r *reloader) remove(e *fileEntry) {
	served := e.cur != nil
	for _, t := range e.types {
		r.retireType(t, fmt.Sprintf("handler file %s was removed", e.path))
	}
	e.types = nil
	r.h.mu.Lock()
	delete(r.h.files, e.name)
	e.cur = nil
	r.h.mu.Unlock()
	if served {
		r.h.log.Info("handler file removed", "handler", e.path, "gone_for", time.Since(e.goneSince).Round(time.Millisecond))
		_, span := tracing.StartRoot(r.ctx, r.h.cfg.Tracer, tracing.SpanReload)
		if span.IsRecording() {
			span.SetAttributes(attribute.String(tracing.AttrFile, e.path), attribute.String(tracing.AttrOutcome, "removed"))
		}
		span.End()
	}
}

// lostDirRetry is how soon the handler directory is looked at again while it is missing (or
// insecure).
const lostDirRetry = time.Second

var errNotFollowed = errors.New("host: handler directory missing or refused")

// compileBusyRetry is how soon a file refused for RefusedCompileBusy is tried again.
const compileBusyRetry = time.Second

// rewatch puts the watch back on the handler directory when the directory there is not the one
// watched: deleted and made again, or replaced by a rename (inotify's watch follows the old
// directory, or is gone with it). It reports whether the directory can be read: it exists and,
// unless AllowInsecure, only its owner may write it.
func (r *reloader) rewatch() bool {
	fi, same, err := r.f.Root()
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false // not known to be gone (a parent not searchable): nothing is removed
	}
	if err != nil || !fi.IsDir() {
		if watched := r.f.UnwatchRoot(); watched || !r.lost {
			r.h.log.Warn("handler directory is gone; its handlers are removed unless it is back within the removal grace",
				"dir", r.dir, "grace", r.h.cfg.RemovalGrace)
		}
		r.lost = true
		return false
	}
	if same {
		// The same directory, but its mode or owner may have changed: the rules of the start
		// hold all along. While it is insecure no file is read from it; the handlers loaded
		// keep serving (their bytes were read while it was not).
		if !r.h.cfg.AllowInsecure {
			if err := sandbox.CheckNotShared(r.dir, "handler directory", fi); err != nil {
				if !r.insecure {
					r.insecure = true
					r.h.countRefusal(RefusedDirectory)
					r.h.log.Error("handler directory is insecure now; no handler file is loaded from it until it is fixed, the handlers loaded keep serving",
						"dir", r.dir, "error", err)
					r.h.setDirError(err)
				}
				return false
			}
			if r.insecure {
				r.insecure = false
				r.h.setDirError(nil)
				r.h.log.Info("handler directory is secure again; loading from it", "dir", r.dir)
			}
		}
		return true
	}
	if !r.h.cfg.AllowInsecure {
		if err := sandbox.CheckNotShared(r.dir, "handler directory", fi); err != nil {
			if r.refused == nil || !os.SameFile(fi, r.refused) {
				r.h.log.Error("handler directory refused; keeping the handlers loaded", "dir", r.dir, "error", err)
				r.h.countRefusal(RefusedDirectory)
				r.h.setDirError(err)
			}
			r.refused, r.lost = fi, false // what it holds is not known: nothing is gone
			return false
		}
	}
	if r.refused != nil || r.insecure {
		r.h.setDirError(nil)
	}
	r.refused, r.insecure = nil, false
	moved, err := r.f.WatchRoot(fi)
	if err != nil {
		r.h.log.Error("watching handler directory again", "dir", r.dir, "error", err)
		return false
	}
	if moved || r.lost {
		r.h.log.Info("handler directory is back; watching it again", "dir", r.dir)
	}
	r.lost = false
	return true
}

func (r *reloader) nextWake(now time.Time) time.Duration {
	next := r.shrinkAt
	if !r.dueAt.IsZero() && r.dueAt.Before(next) {
		next = r.dueAt
	}
	for _, rh := range r.retiring {
		if rh.at.Before(next) {
			next = rh.at
		}
	}
	return max(next.Sub(now), time.Millisecond)
}

func (r *reloader) checkReady() {
	if !r.ready && len(r.initial) == 0 {
		r.ready = true
		if n := r.h.sb.PruneCache(); n > 0 {
			r.h.log.Info("compile cache pruned: modules no longer loaded", "removed", n)
		}
		r.h.readyOnce.Do(func() { close(r.h.ready) })
		r.h.log.Info("initial handlers loaded", "dir", r.dir, "plugin_types", len(r.handlers))
	}
}

// stop waits for the loads in progress and closes what they loaded.
func (r *reloader) stop() {
	r.cancel()
	for r.inflight > 0 {
		res := <-r.results
		r.inflight--
		r.pending = append(r.pending, res)
	}
	for _, res := range append(r.pending, r.held...) {
		if res.m != nil {
			res.m.Retire()
		}
	}
}

// initialWait is how long Run's readiness waits at least for the files present at start that
// are still being written (10 × Debounce when that is longer).
const initialWait = time.Second
