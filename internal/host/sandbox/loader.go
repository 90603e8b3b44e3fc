package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"

	"github.com/tetratelabs/wazero"
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

// Sandbox is what the modules of a host share: the compile cache and its integrity, the turns
// to run guest code, the memory of live instances, the key-value stores of the plugin types,
// the modules open and the work Close waits for. A Module knows its host by it alone; the
// policy layer (package policy) and the reloader (package host) are over it. Make it with New; it
// is safe for concurrent use.
type Sandbox struct {
	cfg        Config
	log        *slog.Logger
	cache      wazero.CompilationCache
	sums       *cacheSums   // the compile cache's integrity list (cacheintegrity.go); nil without CacheDir
	mcache     moduleCaches // the users of each module's cache directory (cachedirs.go)
	rtCfg      wazero.RuntimeConfig
	limitPages uint32

	gate   *cpuGate   // turns to run guest code, and CPU by plugin type (sandbox.go)
	trimMu sync.Mutex // one trim of the instances' memory at a time (memory.go)

	ctx    context.Context // background work (instance refills); canceled by Close
	cancel context.CancelFunc

	closing   chan struct{} // closed when Close begins: the host's Run returns
	closeOnce sync.Once
	closeErr  error

	mu      sync.Mutex
	closed  bool                 // Close was called: no new modules
	drained bool                 // Close is waiting for work: no new work
	wg      sync.WaitGroup       // work in progress: loads, refills, runtime closes
	modules map[*Module]struct{} // open modules
	kv      map[string]*kvStore  // per plugin type

	// Abandoned compiles (compile.go). The compilation cache is closed by the last of them
	// when Close found some still running: it must outlive their compile.
	compileMu         sync.Mutex
	abandoned         int
	abandonedTotal    uint64
	cacheClosePending bool
}

// New returns the sandbox of a host for cfg, whose defaults the host filled in. ctx is used
// only while it runs.
func New(ctx context.Context, cfg Config) (*Sandbox, error) {
	ensureProcs(cfg.Logger)
	primeWazeroVersion(ctx)
	sb := &Sandbox{
		cfg:        cfg,
		log:        cfg.Logger,
		limitPages: uint32(cfg.MemoryLimit / pageSize),
		closing:    make(chan struct{}),
		modules:    make(map[*Module]struct{}),
		kv:         make(map[string]*kvStore),
		gate:       newCPUGate(cfg.Limits.GuestThreads),
	}
	if cfg.CacheDir != "" {
		if err := EnsurePrivateDir(cfg.CacheDir); err != nil {
			return nil, err
		}
		sb.sums = newCacheSums(cfg.CacheDir, cfg.Logger)
		sb.sums.verify()
		sb.mcache.users = make(map[string]int)
	}
	// On disk, each module has a cache of its own (cachedirs.go); this one, in memory, serves
	// a host without CacheDir.
	sb.cache = wazero.NewCompilationCache()
	sb.rtCfg = wazero.NewRuntimeConfig().
		WithCompilationCache(sb.cache).
		WithMemoryLimitPages(sb.limitPages)
	sb.ctx, sb.cancel = context.WithCancel(context.WithoutCancel(ctx))
	return sb, nil
}

// wazeroVersionOnce makes wazero look up its own version once, before any module loads.
// wazero keeps it in a package variable that it reads and sets without a lock
// (internal/version.GetWazeroVersion, called by NewCompilationCacheWithDir and by every new
// runtime's compiler engine): two modules loading at once, each with its cache directory,
// raced on it (test/interop's kubelet tests load three handlers at once under -race).
var wazeroVersionOnce sync.Once

func primeWazeroVersion(ctx context.Context) {
	wazeroVersionOnce.Do(func() {
		_ = wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig()).Close(ctx)
	})
}

// ReadHandlerFile reads a handler file after checking that only the daemon's user may change
// it (unless AllowInsecure). It never blocks on what is not a regular file: the path is
// stat'ed first (a FIFO, device or socket named .wasm is refused without being opened), then
// opened with O_NONBLOCK and checked again on the open file, so that a FIFO swapped in between
// cannot hold the loader in open() or read(). At most Limits.MaxModuleSize are read.
func (sb *Sandbox) ReadHandlerFile(path string) ([]byte, error) {
	fi, err := os.Stat(path) // follows the symlinks of ConfigMap volumes
	if err != nil {
		return nil, unreadable(path, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, refuse(path, RefusedNotRegular, nil, "not a regular file (%s): only regular files are loaded", fileKind(fi.Mode()))
	}
	f, err := openNonBlocking(path)
	if err != nil {
		return nil, unreadable(path, err)
	}
	defer f.Close()
	ofi, err := f.Stat()
	if err != nil {
		return nil, unreadable(path, err)
	}
	if !ofi.Mode().IsRegular() {
		return nil, refuse(path, RefusedNotRegular, nil, "not a regular file (%s): only regular files are loaded", fileKind(ofi.Mode()))
	}
	if !sb.cfg.AllowInsecure {
		if err := CheckNotShared(path, "handler file", ofi); err != nil {
			return nil, &moduleError{file: path, reason: RefusedInsecure, plain: err}
		}
	}
	limit := int64(sb.cfg.Limits.MaxModuleSize)
	if ofi.Size() > limit {
		return nil, refuse(path, RefusedTooLarge, nil, "file of %d bytes over the limit of %d bytes (handlers.limits.maxModuleSize)", ofi.Size(), limit)
	}
	bin, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, unreadable(path, err)
	}
	if int64(len(bin)) > limit {
		return nil, refuse(path, RefusedTooLarge, nil, "file over the limit of %d bytes (handlers.limits.maxModuleSize)", limit)
	}
	return bin, nil
}

// unreadable is the refusal of a handler file that could not be read.
func unreadable(path string, err error) error {
	return &moduleError{file: path, reason: RefusedUnreadable, plain: fmt.Errorf("host: handler file %s: %w", path, err)}
}

// fileKind names the type of a file that is not a regular file.
func fileKind(m os.FileMode) string {
	switch {
	case m&os.ModeNamedPipe != 0:
		return "a FIFO"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeCharDevice != 0:
		return "a character device"
	case m&os.ModeDevice != 0:
		return "a device"
	case m.IsDir():
		return "a directory"
	case m&os.ModeSymlink != 0:
		return "a symbolic link"
	}
	return "mode " + m.String()
}

// Close closes Closing (the host's Run returns), closes every module (waiting until ctx is
// done for calls in progress to return, then closing them anyway) and the compilation cache.
// It is idempotent.
func (sb *Sandbox) Close(ctx context.Context) error {
	sb.closeOnce.Do(func() {
		close(sb.closing)
		sb.mu.Lock()
		sb.closed = true
		mods := make([]*Module, 0, len(sb.modules))
		for m := range sb.modules {
			mods = append(mods, m)
		}
		sb.mu.Unlock()
		for _, m := range mods {
			m.Retire()
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
		sb.cancel()
		sb.mu.Lock()
		sb.drained = true
		sb.mu.Unlock()
		sb.wg.Wait()
		for _, m := range mods {
			<-m.done
		}
		sb.compileMu.Lock()
		pending := sb.abandoned > 0
		sb.cacheClosePending = pending
		sb.compileMu.Unlock()
		if !pending {
			sb.closeErr = sb.cache.Close(context.Background())
		}
	})
	return sb.closeErr
}

// BeginWork counts work Close must wait for, ended by EndWork; false once Close waits.
func (sb *Sandbox) BeginWork() bool {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.drained {
		return false
	}
	sb.wg.Add(1)
	return true
}

// EndWork ends the work BeginWork counted.
func (sb *Sandbox) EndWork() { sb.wg.Done() }

// Closing returns a channel closed when Close begins.
func (sb *Sandbox) Closing() <-chan struct{} { return sb.closing }

// Context returns the context of background work (a call the host starts on its own): it is
// canceled by Close.
func (sb *Sandbox) Context() context.Context { return sb.ctx }

// GoAsync runs f in a goroutine Close waits for; after Close began waiting, it runs f now.
func (sb *Sandbox) GoAsync(f func()) {
	if !sb.BeginWork() {
		f()
		return
	}
	go func() {
		defer sb.wg.Done()
		f()
	}()
}

// OpenModules returns how many modules are open: loaded and not yet closed.
func (sb *Sandbox) OpenModules() int {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return len(sb.modules)
}

func (sb *Sandbox) track(m *Module) error {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.closed {
		return ErrClosed
	}
	sb.modules[m] = struct{}{}
	return nil
}

func (sb *Sandbox) forget(m *Module) {
	sb.mu.Lock()
	delete(sb.modules, m)
	sb.mu.Unlock()
}

func (sb *Sandbox) kvStore(pluginType string) *kvStore {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	kv := sb.kv[pluginType]
	if kv == nil {
		kv = &kvStore{m: make(map[string][]byte)}
		sb.kv[pluginType] = kv
	}
	return kv
}

func (sb *Sandbox) grantedAnywhere(capName string) bool {
	for t := range sb.cfg.Grants {
		if sb.cfg.granted(t, capName) {
			return true
		}
	}
	return false
}
