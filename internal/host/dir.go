package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/wasmhost/wasmhost/internal/registration"
)

// typeHandler is the registration.Handler of one plugin type: a stable object registered
// once, behind which the module that serves the type is swapped atomically.
type typeHandler struct {
	pluginType string
	cur        atomic.Pointer[Module] // nil once retired
	gone       atomic.Pointer[string] // why it was taken out of the registry
	file       *fileEntry             // Run's goroutine only
}

// module returns the module serving the type, counted in, or ErrRetired.
func (t *typeHandler) module() (*Module, error) {
	for {
		m := t.cur.Load()
		if m == nil {
			why := "retired"
			if p := t.gone.Load(); p != nil {
				why = *p
			}
			return nil, fmt.Errorf("%w: plugin type %s: %s", ErrRetired, t.pluginType, why)
		}
		if m.enter() {
			return m, nil
		}
		// m was swapped out and retired between the load and enter: take the new one.
		if t.cur.Load() == m {
			return nil, fmt.Errorf("%w: plugin type %s: handler %s is closed", ErrRetired, t.pluginType, m.file)
		}
	}
}

func (t *typeHandler) ValidatePlugin(ctx context.Context, p registration.PluginInfo) error {
	m, err := t.module()
	if err != nil {
		return err
	}
	defer m.leave()
	_, err = m.invoke(ctx, fnValidate, t.pluginType, p)
	return err
}

func (t *typeHandler) RegisterPlugin(ctx context.Context, p registration.PluginInfo) (map[string]string, error) {
	m, err := t.module()
	if err != nil {
		return nil, err
	}
	defer m.leave()
	return m.invoke(ctx, fnRegister, t.pluginType, p)
}

func (t *typeHandler) DeRegisterPlugin(ctx context.Context, p registration.PluginInfo) error {
	m, err := t.module()
	if err != nil {
		return err
	}
	defer m.leave()
	_, err = m.invoke(ctx, fnDeregister, t.pluginType, p)
	return err
}

// fileEntry is one *.wasm name in the handler directory.
type fileEntry struct {
	name  string
	path  string
	stats *stats
	cur   *Module // the module serving; written by Run's goroutine under Host.mu

	// Run's goroutine only.
	types     []string  // the plugin types whose handlers this file's module serves
	ident     fileIdent // of the file at the last load attempt
	tried     bool      // ident is set
	failedSHA string    // of the last version that failed to load
	conflict  string    // a plugin type another file held when this one was refused
	loading   bool
	again     bool // the file changed while it was loading
}

// isHandlerName: *.wasm, not hidden (ConfigMap volumes keep their real files in dot-names).
func isHandlerName(name string) bool {
	return !strings.HasPrefix(name, ".") && strings.HasSuffix(name, ".wasm") && len(name) > len(".wasm")
}

// Run loads the handler files in HandlerDir, registers a handler for each plugin type they
// declare, and then follows the directory: a *.wasm file added is loaded (in the background)
// and serves; replaced, it is swapped in when it loads (the old version keeps serving if it
// does not); removed, its plugin types leave the registry and are retired after RetireGrace.
// Run returns when ctx is done or the host is closed, after all its goroutines have exited.
// The handlers stay registered and serving until Close.
func (h *Host) Run(ctx context.Context) error {
	if !h.running.CompareAndSwap(false, true) {
		return errors.New("host: Run called twice")
	}
	defer h.readyOnce.Do(func() { close(h.ready) })
	select {
	case <-h.closing:
		return ErrClosed
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
		if err := checkNotShared(dir, "handler directory", fi); err != nil {
			return err
		}
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("host: watching handler directory: %w", err)
	}
	defer w.Close()
	// Watch before listing, so that nothing happens unseen in between.
	if err := w.Add(dir); err != nil {
		return fmt.Errorf("host: watching handler directory %s: %w", dir, err)
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := &reloader{
		w:        w,
		watched:  fi,
		h:        h,
		ctx:      ctx,
		cancel:   cancel,
		dir:      dir,
		handlers: make(map[string]*typeHandler),
		quiet:    make(map[string]time.Time),
		results:  make(chan loadResult),
		sem:      make(chan struct{}, runtime.NumCPU()),
		initial:  make(map[string]bool),
	}
	defer r.stop()
	h.log.Info("loading handlers", "dir", dir)
	r.shrinkAt = time.Now().Add(h.cfg.Limits.IdleInstanceTimeout / 2)
	r.rescan(time.Now(), true)
	r.checkReady()

	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if h.cfg.OnChange != nil {
			h.cfg.OnChange()
		}
		timer.Reset(r.nextWake(time.Now()))
		select {
		case <-ctx.Done():
			return nil
		case <-h.closing:
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return errors.New("host: handler directory watcher closed")
			}
			now := time.Now()
			r.event(ev, now)
		drain:
			for range 4096 {
				select {
				case ev, ok := <-w.Events:
					if !ok {
						break drain
					}
					r.event(ev, now)
				default:
					break drain
				}
			}
			r.rescan(now, false)
		case err, ok := <-w.Errors:
			if !ok {
				return errors.New("host: handler directory watcher closed")
			}
			h.log.Warn("handler directory watcher error; re-scanning", "dir", dir, "error", err)
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

// reloader is Run's state; only Run's goroutine uses it.
type reloader struct {
	w        *fsnotify.Watcher
	watched  os.FileInfo // the directory the watch is on; nil when it is lost
	lost     bool        // the watched directory went away
	insecure bool        // the watched directory's mode or owner became insecure
	refused  os.FileInfo // a directory found in its place but refused (insecure), logged once
	h        *Host
	ctx      context.Context // of Run; canceled before Run waits for its loads
	cancel   context.CancelFunc
	dir      string
	handlers map[string]*typeHandler // the registered handler of each plugin type
	retiring []retiringHandler
	quiet    map[string]time.Time // a file written to recently is loaded after this time
	results  chan loadResult
	sem      chan struct{} // bounds concurrent loads
	inflight int
	initial  map[string]bool // files present at start whose load has not returned yet
	pending  []loadResult    // their results, applied together
	ready    bool
	dirty    bool // a file changed while it was loading: re-scan
	resyncAt time.Time
	shrinkAt time.Time // the next look for idle instances (idle.go)
}

type retiringHandler struct {
	t  *typeHandler
	at time.Time
}

type loadResult struct {
	e           *fileEntry
	m           *Module
	sum         string
	unchanged   bool // the file has the serving version's bytes
	sameFailure bool // the file has the bytes that failed last time
	err         error
}

func (r *reloader) event(ev fsnotify.Event, now time.Time) {
	name := filepath.Base(ev.Name)
	if !isHandlerName(name) {
		return // it still makes Run re-scan: a ConfigMap update swaps "..data"
	}
	switch {
	case ev.Has(fsnotify.Write):
		r.quiet[name] = now.Add(r.h.cfg.Debounce)
	case ev.Has(fsnotify.Create):
		// Created empty: it is being written; created whole: it arrived by rename.
		if fi, err := os.Stat(ev.Name); err == nil && fi.Size() == 0 {
			r.quiet[name] = now.Add(r.h.cfg.Debounce)
		}
	case ev.Has(fsnotify.Remove), ev.Has(fsnotify.Rename):
		delete(r.quiet, name)
	}
}

// rescan compares the directory with what is loaded: it starts loads of new and changed
// files and retires removed ones.
func (r *reloader) rescan(now time.Time, initial bool) {
	r.resyncAt = now.Add(r.h.cfg.Resync)
	if !r.rewatch() {
		r.resyncAt = now.Add(min(r.h.cfg.Resync, lostDirRetry))
		return
	}
	entries, err := os.ReadDir(r.dir)
	if err != nil {
		r.h.log.Error("reading handler directory; keeping the handlers loaded", "dir", r.dir, "error", err)
		r.resyncAt = now.Add(min(r.h.cfg.Resync, lostDirRetry))
		return
	}
	var names []string
	seen := make(map[string]bool, len(entries))
	for _, de := range entries {
		if name := de.Name(); isHandlerName(name) {
			names = append(names, name)
			seen[name] = true
		}
	}
	// Removals first: a plugin type they free may be claimed by a file refused for it.
	for name, e := range r.h.files {
		if !seen[name] {
			r.remove(e)
		}
	}
	for _, name := range names {
		e := r.h.files[name]
		if e == nil {
			e = &fileEntry{name: name, path: filepath.Join(r.dir, name), stats: new(stats)}
			r.h.mu.Lock()
			r.h.files[name] = e
			r.h.mu.Unlock()
		}
		if q, ok := r.quiet[name]; ok {
			if q.After(now) {
				continue
			}
			delete(r.quiet, name)
		}
		if e.loading {
			e.again = true
			continue
		}
		fi, err := os.Stat(e.path) // follows the symlinks of ConfigMap volumes
		if err != nil {
			continue // gone or dangling for a moment: an event follows
		}
		id := identOf(fi)
		force := e.conflict != "" && r.handlers[e.conflict] == nil
		if e.tried && id == e.ident && !force {
			continue
		}
		e.ident, e.tried = id, true
		r.startLoad(e, force)
		if initial {
			r.initial[name] = true
		}
	}
}

func (r *reloader) startLoad(e *fileEntry, force bool) {
	e.loading = true
	r.inflight++
	curSHA := ""
	if e.cur != nil {
		curSHA = e.cur.sum
	}
	failedSHA := e.failedSHA
	go func() {
		res := loadResult{e: e}
		select {
		case r.sem <- struct{}{}:
			res = r.load(e, curSHA, failedSHA, force)
			<-r.sem
		case <-r.ctx.Done():
			res.err = r.ctx.Err()
		}
		r.results <- res
	}()
}

func (r *reloader) load(e *fileEntry, curSHA, failedSHA string, force bool) loadResult {
	res := loadResult{e: e}
	if !r.h.beginWork() {
		res.err = ErrClosed
		return res
	}
	defer r.h.wg.Done()
	bin, err := r.h.readHandlerFile(e.path)
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
		res.m, res.err = r.h.load(r.ctx, e.path, bin, e.stats)
	}
	return res
}

// receive takes the result of a load. The files present at start are applied together, in
// name order, so that of two files that claim one plugin type the first by name wins.
func (r *reloader) receive(res loadResult) {
	r.inflight--
	e := res.e
	e.loading = false
	if e.again {
		e.again, r.dirty = false, true
	}
	if r.ready {
		r.apply(res)
		return
	}
	if r.initial[e.name] {
		delete(r.initial, e.name)
		r.pending = append(r.pending, res)
	} else {
		r.apply(res)
	}
	if len(r.initial) == 0 {
		slices.SortFunc(r.pending, func(a, b loadResult) int { return strings.Compare(a.e.name, b.e.name) })
		for _, res := range r.pending {
			r.apply(res)
		}
		r.pending = nil
		r.checkReady()
	}
}

// apply installs the result of a load, or logs why it failed.
func (r *reloader) apply(res loadResult) {
	e := res.e
	if r.h.files[e.name] != e { // removed while it loaded
		if res.m != nil {
			res.m.retire()
		}
		return
	}
	switch {
	case res.unchanged:
		e.failedSHA = ""
	case res.sameFailure:
	case RefusalReason(res.err) == RefusedCompileBusy:
		// Not the file's fault: tried again soon, as if it had changed.
		e.tried = false
		if soon := time.Now().Add(compileBusyRetry); soon.Before(r.resyncAt) {
			r.resyncAt = soon
		}
		e.stats.setLast(res.err)
		r.h.countRefusal(RefusedCompileBusy)
		r.h.log.Warn("handler file not loaded for now", "handler", e.path, "error", res.err)
	case res.err != nil:
		e.failedSHA = res.sum
		e.stats.setLast(res.err)
		r.h.countRefusal(RefusalReason(res.err))
		if e.cur != nil {
			r.h.log.Error("handler file update refused; the previous version keeps serving",
				"handler", e.path, "serving_sha256", e.cur.sum, "error", res.err)
		} else {
			r.h.log.Error("handler file refused", "handler", e.path, "error", res.err)
		}
	default:
		m := res.m
		for _, t := range m.manifest.PluginTypes {
			if th := r.handlers[t]; th != nil && th.file != e {
				err := refuse(e.path, RefusedConflict, nil, "plugin type %s is already handled by %s", t, th.file.path)
				e.conflict, e.failedSHA = t, res.sum
				e.stats.setLast(err)
				r.h.countRefusal(RefusedConflict)
				r.h.log.Error("handler file refused", "handler", e.path, "plugin_type", t, "error", err)
				m.retire()
				return
			}
		}
		e.conflict, e.failedSHA = "", ""
		r.install(e, m)
	}
}

// install makes m serve e's plugin types: the handlers of types e already served switch to
// m, new types get a handler in the registry, and types m no longer declares are retired.
func (r *reloader) install(e *fileEntry, m *Module) {
	old := e.cur
	for _, t := range m.manifest.PluginTypes {
		m.holders++
		if th := r.handlers[t]; th != nil {
			if prev := th.cur.Swap(m); prev != nil {
				r.release(prev)
			}
			continue
		}
		th := &typeHandler{pluginType: t, file: e}
		th.cur.Store(m)
		r.handlers[t] = th
		r.h.cfg.Registry.Set(t, th)
	}
	for _, t := range e.types {
		if !slices.Contains(m.manifest.PluginTypes, t) {
			r.retireType(t, fmt.Sprintf("handler file %s no longer declares it", e.path))
		}
	}
	e.types = slices.Clone(m.manifest.PluginTypes)
	r.h.mu.Lock()
	e.cur = m
	r.h.mu.Unlock()
	e.stats.q.reset() // a new version is not quarantined for what the old one did
	if old != nil {
		r.h.log.Info("handler replaced", "handler", e.path, "plugin_types", e.types,
			"old_sha256", old.sum, "sha256", m.sum, "size", m.size)
	} else {
		r.h.log.Info("handler serving", "handler", e.path, "plugin_types", e.types, "sha256", m.sum, "size", m.size)
	}
}

// release drops one handler's hold on m; the last one retires it (it closes when its calls
// have returned).
func (r *reloader) release(m *Module) {
	m.holders--
	if m.holders == 0 {
		m.retire()
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
	if cur, ok := r.h.cfg.Registry.Get(pluginType); ok && cur == registration.Handler(th) {
		r.h.cfg.Registry.Remove(pluginType)
	}
	th.gone.Store(&why)
	r.retiring = append(r.retiring, retiringHandler{t: th, at: time.Now().Add(r.h.cfg.RetireGrace)})
	r.h.log.Info("plugin type handler retired", "plugin_type", pluginType, "reason", why, "grace", r.h.cfg.RetireGrace)
}

// expire closes the retired handlers whose grace has passed.
func (r *reloader) expire(now time.Time) {
	r.retiring = slices.DeleteFunc(r.retiring, func(rh retiringHandler) bool {
		if rh.at.After(now) {
			return false
		}
		if m := rh.t.cur.Swap(nil); m != nil {
			r.release(m)
		}
		// Its key-value store goes with it, unless another file serves the type now.
		if r.handlers[rh.t.pluginType] == nil {
			r.h.dropStore(rh.t.pluginType)
		}
		return true
	})
}

func (r *reloader) remove(e *fileEntry) {
	for _, t := range e.types {
		r.retireType(t, fmt.Sprintf("handler file %s was removed", e.path))
	}
	e.types = nil
	r.h.mu.Lock()
	delete(r.h.files, e.name)
	e.cur = nil
	r.h.mu.Unlock()
	delete(r.quiet, e.name)
	r.h.log.Info("handler file removed", "handler", e.path)
}

// lostDirRetry is how soon the handler directory is looked at again while it is missing (or
// insecure).
const lostDirRetry = time.Second

// compileBusyRetry is how soon a file refused for RefusedCompileBusy is tried again.
const compileBusyRetry = time.Second

// rewatch puts the watch back on the handler directory when the directory there is not the one
// watched: deleted and made again, or replaced by a rename (inotify's watch follows the old
// directory, or is gone with it). It reports whether the directory can be read: it exists and,
// unless AllowInsecure, only its owner may write it.
func (r *reloader) rewatch() bool {
	fi, err := os.Stat(r.dir)
	if err != nil || !fi.IsDir() {
		if r.watched != nil {
			r.h.log.Warn("handler directory is gone; keeping the handlers loaded until it is back", "dir", r.dir)
			_ = r.w.Remove(r.dir)
			r.watched, r.lost = nil, true
		}
		return false
	}
	if r.watched != nil && os.SameFile(fi, r.watched) {
		// The same directory, but its mode or owner may have changed: the rules of the start
		// hold all along. While it is insecure no file is read from it; the handlers loaded
		// keep serving (their bytes were read while it was not).
		if !r.h.cfg.AllowInsecure {
			if err := checkNotShared(r.dir, "handler directory", fi); err != nil {
				if !r.insecure {
					r.insecure = true
					r.h.countRefusal(RefusedDirectory)
					r.h.setDirError(err)
					r.h.log.Error("handler directory is insecure now; no handler file is loaded from it until it is fixed, the handlers loaded keep serving",
						"dir", r.dir, "error", err)
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
		if err := checkNotShared(r.dir, "handler directory", fi); err != nil {
			if r.refused == nil || !os.SameFile(fi, r.refused) {
				r.h.log.Error("handler directory refused; keeping the handlers loaded", "dir", r.dir, "error", err)
				r.h.countRefusal(RefusedDirectory)
				r.h.setDirError(err)
			}
			r.refused = fi
			return false
		}
	}
	if r.refused != nil || r.insecure {
		r.h.setDirError(nil)
	}
	r.refused, r.insecure = nil, false
	_ = r.w.Remove(r.dir)
	if err := r.w.Add(r.dir); err != nil {
		r.h.log.Error("watching handler directory again", "dir", r.dir, "error", err)
		return false
	}
	if r.watched != nil || r.lost {
		r.h.log.Info("handler directory is back; watching it again", "dir", r.dir)
	}
	r.watched, r.lost = fi, false
	return true
}

func (r *reloader) nextWake(now time.Time) time.Duration {
	next := r.resyncAt
	if r.shrinkAt.Before(next) {
		next = r.shrinkAt
	}
	for _, q := range r.quiet {
		if q.Before(next) {
			next = q
		}
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
	for _, res := range r.pending {
		if res.m != nil {
			res.m.retire()
		}
	}
}
