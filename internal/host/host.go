// Package host runs the WebAssembly handlers of wasmhost: it loads handler modules (.wasm
// files that implement the ABI of package abi) with wazero, validates them before they
// serve, and registers one registration.Handler per plugin type in a registration.Registry.
// Run keeps the registry in step with a handler directory: modules added, replaced or
// removed there are loaded, swapped or retired while the daemon runs.
//
// Every module runs in its own wazero runtime with a memory limit, every call has a deadline,
// and a module gets no filesystem, environment, network or real clock; host functions that
// reach outside (plugin_call) are granted per plugin type by configuration.
//
// This package is part of the wasmhost daemon, not a stable API.
package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"

	"github.com/wasmhost/wasmhost/internal/registration"
)

// Sentinel errors. Callers decide with errors.Is.
var (
	// ErrBadModule: a module was refused at load (not WebAssembly, a missing or mistyped
	// export, an unsupported ABI version, a bad manifest, an unknown import, ...).
	ErrBadModule = errors.New("host: bad module")
	// ErrNotGranted: a module imports a host function of a capability that is not granted to
	// its plugin types. A load error with it also matches ErrBadModule.
	ErrNotGranted = errors.New("host: capability not granted")
	// ErrInsecure: a handler file or directory, or the cache directory, may be changed by
	// other users (or read, for the cache).
	ErrInsecure = errors.New("host: insecure permissions")
	// ErrTrap: the guest trapped (unreachable, out of bounds, out of memory, a Go panic), or
	// handed a host function a bad pointer. The instance is thrown away.
	ErrTrap = errors.New("host: wasm trap")
	// ErrBadResult: the guest returned an unknown status or an oversized result.
	ErrBadResult = errors.New("host: bad result")
	// ErrHandlerFailed: the guest returned abi.StatusError; the error carries its reason.
	ErrHandlerFailed = errors.New("host: handler failed")
	// ErrRetired: the handler's module was removed (after its grace period) or closed.
	ErrRetired = errors.New("host: handler retired")
	// ErrClosed: the host is closed.
	ErrClosed = errors.New("host: closed")
)

// maxModuleBytes caps the size of a handler file.
const maxModuleBytes = 64 << 20

// Host loads and runs handler modules. Create it with New; it is safe for concurrent use.
type Host struct {
	cfg        Config
	log        *slog.Logger
	cache      wazero.CompilationCache
	rtCfg      wazero.RuntimeConfig
	limitPages uint32

	ctx    context.Context // background work (instance refills); canceled by Close
	cancel context.CancelFunc

	ready     chan struct{}
	readyOnce sync.Once
	closing   chan struct{}
	closeOnce sync.Once
	closeErr  error
	running   atomic.Bool

	mu      sync.Mutex
	closed  bool                  // Close was called: no new modules
	drained bool                  // Close is waiting for work: no new work
	wg      sync.WaitGroup        // work in progress: loads, refills, runtime closes
	modules map[*Module]struct{}  // open modules
	files   map[string]*fileEntry // Run's handler files by name
	kv      map[string]*kvStore   // per plugin type
}

// New returns a Host for cfg. ctx is used only while New runs.
func New(ctx context.Context, cfg Config) (*Host, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	h := &Host{
		cfg:        cfg,
		log:        cfg.Logger,
		limitPages: uint32(cfg.MemoryLimit / pageSize),
		ready:      make(chan struct{}),
		closing:    make(chan struct{}),
		modules:    make(map[*Module]struct{}),
		files:      make(map[string]*fileEntry),
		kv:         make(map[string]*kvStore),
	}
	if cfg.CacheDir != "" {
		if err := ensurePrivateDir(cfg.CacheDir); err != nil {
			return nil, err
		}
		if h.cache, err = wazero.NewCompilationCacheWithDir(cfg.CacheDir); err != nil {
			return nil, fmt.Errorf("host: compilation cache %s: %w", cfg.CacheDir, err)
		}
		// wazero keeps its files in a subdirectory it may have just created: check it too.
		subs, _ := filepath.Glob(filepath.Join(cfg.CacheDir, "wazero-*"))
		for _, sub := range subs {
			if err := checkPrivateDir(sub); err != nil {
				_ = h.cache.Close(ctx)
				return nil, err
			}
		}
	} else {
		h.cache = wazero.NewCompilationCache()
	}
	h.rtCfg = wazero.NewRuntimeConfig().
		WithCompilationCache(h.cache).
		WithMemoryLimitPages(h.limitPages).
		WithCloseOnContextDone(true)
	h.ctx, h.cancel = context.WithCancel(context.WithoutCancel(ctx))
	return h, nil
}

// Registry returns the registry the host registers its handlers in.
func (h *Host) Registry() *registration.Registry { return h.cfg.Registry }

// Ready returns a channel closed once Run has loaded or refused the handler files present
// when it started (or has returned).
func (h *Host) Ready() <-chan struct{} { return h.ready }

// LoadFile loads the module at path: it checks the file's permissions, compiles it,
// checks its exports and imports, instantiates it once and reads its ABI version and
// manifest. The Module is not registered anywhere; it handles calls for its plugin types
// until the caller closes it (or the host is closed).
func (h *Host) LoadFile(ctx context.Context, path string) (*Module, error) {
	if !h.beginWork() {
		return nil, ErrClosed
	}
	defer h.wg.Done()
	bin, err := h.readHandlerFile(path)
	if err != nil {
		return nil, err
	}
	return h.load(ctx, path, bin, new(stats))
}

// readHandlerFile reads a handler file after checking that only the daemon's user may change
// it (unless AllowInsecure).
func (h *Host) readHandlerFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("host: handler file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("host: handler file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, badModule(path, nil, "not a regular file (%v)", fi.Mode().Type())
	}
	if !h.cfg.AllowInsecure {
		if err := checkNotShared(path, "handler file", fi); err != nil {
			return nil, err
		}
	}
	if fi.Size() > maxModuleBytes {
		return nil, badModule(path, nil, "file of %d bytes over the limit of %d bytes", fi.Size(), maxModuleBytes)
	}
	bin, err := io.ReadAll(io.LimitReader(f, maxModuleBytes+1))
	if err != nil {
		return nil, fmt.Errorf("host: handler file %s: %w", path, err)
	}
	if len(bin) > maxModuleBytes {
		return nil, badModule(path, nil, "file over the limit of %d bytes", maxModuleBytes)
	}
	return bin, nil
}

// Close stops Run, closes every module (waiting until ctx is done for calls in progress
// to return, then closing them anyway) and the compilation cache. It is idempotent.
func (h *Host) Close(ctx context.Context) error {
	h.closeOnce.Do(func() {
		close(h.closing)
		h.mu.Lock()
		h.closed = true
		mods := make([]*Module, 0, len(h.modules))
		for m := range h.modules {
			mods = append(mods, m)
		}
		h.mu.Unlock()
		for _, m := range mods {
			m.retire()
		}
		for _, m := range mods {
			select {
			case <-m.done:
			case <-ctx.Done():
			}
		}
		for _, m := range mods {
			m.forceClose()
		}
		h.cancel()
		h.mu.Lock()
		h.drained = true
		h.mu.Unlock()
		h.wg.Wait()
		for _, m := range mods {
			<-m.done
		}
		h.closeErr = h.cache.Close(context.Background())
	})
	return h.closeErr
}

// beginWork counts work the host must wait for on Close; false once Close waits.
func (h *Host) beginWork() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.drained {
		return false
	}
	h.wg.Add(1)
	return true
}

// goAsync runs f in a goroutine Close waits for; after Close began waiting, it runs f now.
func (h *Host) goAsync(f func()) {
	if !h.beginWork() {
		f()
		return
	}
	go func() {
		defer h.wg.Done()
		f()
	}()
}

func (h *Host) track(m *Module) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return ErrClosed
	}
	h.modules[m] = struct{}{}
	return nil
}

func (h *Host) forget(m *Module) {
	h.mu.Lock()
	delete(h.modules, m)
	h.mu.Unlock()
}

func (h *Host) kvStore(pluginType string) *kvStore {
	h.mu.Lock()
	defer h.mu.Unlock()
	kv := h.kv[pluginType]
	if kv == nil {
		kv = &kvStore{m: make(map[string][]byte)}
		h.kv[pluginType] = kv
	}
	return kv
}

func (h *Host) grantedAnywhere(capName string) bool {
	for t := range h.cfg.Grants {
		if h.cfg.granted(t, capName) {
			return true
		}
	}
	return false
}

// HandlerStatus describes one handler file of the handler directory.
type HandlerStatus struct {
	File         string    // path of the file
	PluginTypes  []string  // the types it handles (none when it never loaded)
	Name         string    // the manifest's name
	Version      string    // the manifest's version
	SHA256       string    // of the module serving (hex)
	Size         int64     // of the module serving, in bytes
	ABIVersion   uint32    // of the module serving
	Capabilities []string  // granted and used by the module serving
	LoadedAt     time.Time // when the module serving was loaded
	PoolSize     int       // the most instances of the module at once
	Instances    int       // instances now alive
	Serving      bool      // a module of this file serves calls
	Calls        uint64    // calls into validate, register, deregister (all versions)
	Rejected     uint64    // calls that returned abi.StatusRejected
	Failures     uint64    // calls that returned abi.StatusError or a bad result
	Traps        uint64    // calls that trapped
	Timeouts     uint64    // calls that ran over the deadline
	LastError    string    // the last load or call error, if any
	LastErrorAt  time.Time // when
}

// Handlers returns the status of the handler files Run manages, sorted by file.
func (h *Host) Handlers() []HandlerStatus {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]HandlerStatus, 0, len(h.files))
	for _, e := range h.files {
		s := HandlerStatus{
			File:     e.path,
			PoolSize: h.cfg.PoolSize,
			Calls:    e.stats.calls.Load(),
			Rejected: e.stats.rejected.Load(),
			Failures: e.stats.failures.Load(),
			Traps:    e.stats.traps.Load(),
			Timeouts: e.stats.timeouts.Load(),
		}
		if m := e.cur; m != nil {
			s.PluginTypes = m.PluginTypes()
			s.Name, s.Version = m.manifest.Name, m.manifest.Version
			s.SHA256, s.Size, s.ABIVersion = m.sum, m.size, m.abiVersion
			s.Capabilities = m.Capabilities()
			s.LoadedAt = m.loadedAt
			s.Instances = len(m.slots)
			s.Serving = true
		}
		if last := e.stats.last.Load(); last != nil {
			s.LastError, s.LastErrorAt = last.msg, last.at
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].File < out[j].File })
	return out
}
