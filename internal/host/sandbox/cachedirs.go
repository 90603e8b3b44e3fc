package sandbox

// The compile cache on disk is kept per module: CacheDir/modules/<sha256 of the module>/ holds
// what wazero wrote compiling that module, and nothing else. So the cache holds the modules
// loaded and no others: the directory of a module is removed when the last module loaded from
// those bytes is closed (replaced, removed, retired; not when the host closes, so that a
// restart finds it) and when its load fails (a module refused
// after compiling is not kept), and, once the handlers present at start are loaded, the
// directories of modules that no longer load are removed too. A restart with the same files
// compiles nothing again; the cache never grows past the handlers in use.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sync"

	"github.com/tetratelabs/wazero"
)

// moduleCacheDir is CacheDir's subdirectory of the per-module directories.
const moduleCacheDir = "modules"

var sumName = regexp.MustCompile(`^[0-9a-f]{64}$`)

// moduleCaches counts the users (loads and loaded modules) of each module's cache directory.
type moduleCaches struct {
	mu    sync.Mutex
	users map[string]int // sha256 hex → loads and modules using its directory
}

// moduleRuntimeConfig returns the runtime configuration to compile and run the module whose
// bytes have sha256 sum, and release, which the caller calls once after closing the runtime.
// Without CacheDir, the host's in-memory cache serves every module.
func (sb *Sandbox) moduleRuntimeConfig(sum string) (wazero.RuntimeConfig, func(), error) {
	if sb.cfg.CacheDir == "" {
		return sb.rtCfg, func() {}, nil
	}
	return sb.cacheDirRuntimeConfig(sum, false)
}

// describeRuntimeConfig returns the runtime configuration to describe the module whose bytes
// have sha256 sum (Inspect), and its release. The module is described, not kept: it compiles
// with no cache unless the directory of these bytes is in the cache already (the module is
// loaded, or was before a restart, as a pulled module is when the daemon starts again), whose
// entry it then reads rather than compiling again. The directory is neither made nor removed
// for a description.
func (sb *Sandbox) describeRuntimeConfig(sum string) (wazero.RuntimeConfig, func()) {
	none := sb.rtCfg.WithCompilationCache(nil)
	if sb.cfg.CacheDir == "" {
		return none, func() {}
	}
	rtCfg, release, err := sb.cacheDirRuntimeConfig(sum, true)
	if err != nil {
		return none, func() {}
	}
	return rtCfg, release
}

// errNoCacheDir: a description found no cache directory of its module's bytes.
var errNoCacheDir = errors.New("host: no compile cache directory of these bytes")

// cacheDirRuntimeConfig returns the runtime configuration with the cache directory of sum,
// made unless describe (errNoCacheDir then when there is none), and its release, which
// removes the directory when its last user goes, unless describe.
func (sb *Sandbox) cacheDirRuntimeConfig(sum string, describe bool) (wazero.RuntimeConfig, func(), error) {
	dir := filepath.Join(sb.cfg.CacheDir, moduleCacheDir, sum)
	// Counted before the directory is made or opened: the last module of these bytes closing
	// meanwhile (a rollback or a revision put back right after it was replaced) must not
	// remove the directory under this load.
	sb.mcache.mu.Lock()
	sb.mcache.users[sum]++
	sb.mcache.mu.Unlock()
	unuse := func() {
		sb.mcache.mu.Lock()
		if sb.mcache.users[sum]--; sb.mcache.users[sum] <= 0 {
			delete(sb.mcache.users, sum)
		}
		sb.mcache.mu.Unlock()
	}
	if describe {
		if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
			unuse()
			return nil, nil, errNoCacheDir
		}
	}
	if err := EnsurePrivateDir(dir); err != nil {
		unuse()
		return nil, nil, err
	}
	for _, p := range sweepIrregular(dir) {
		sb.log.Warn("removed from the compile cache: not a regular file", "path", p)
	}
	cache, err := wazero.NewCompilationCacheWithDir(dir)
	if err != nil {
		unuse()
		return nil, nil, fmt.Errorf("host: compilation cache %s: %w", dir, err)
	}
	// wazero keeps its files in a subdirectory it may have just made: check it too.
	subs, _ := filepath.Glob(filepath.Join(dir, "wazero-*"))
	for _, sub := range subs {
		if err := checkPrivateDir(sub); err != nil {
			_ = cache.Close(context.Background())
			unuse()
			return nil, nil, err
		}
	}
	var once sync.Once
	release := func() {
		once.Do(func() {
			_ = cache.Close(context.Background())
			sb.mcache.mu.Lock()
			defer sb.mcache.mu.Unlock()
			if sb.mcache.users[sum]--; sb.mcache.users[sum] > 0 {
				return
			}
			delete(sb.mcache.users, sum)
			if describe {
				return // a description leaves the directory as it found it
			}
			select {
			case <-sb.closing:
				// The host closes: what it had loaded is kept for the next start.
			default:
				sb.removeModuleCache(sum)
			}
		})
	}
	return sb.rtCfg.WithCompilationCache(cache), release, nil
}

// removeModuleCache removes the cache directory of sum; the caller holds mcache.mu and has
// checked that nothing uses it.
func (sb *Sandbox) removeModuleCache(sum string) {
	dir := filepath.Join(sb.cfg.CacheDir, moduleCacheDir, sum)
	if err := os.RemoveAll(dir); err != nil {
		sb.log.Warn("removing a compile cache directory no module uses", "dir", dir, "error", err)
		return
	}
	sb.log.Debug("compile cache directory removed: no module of these bytes is loaded", "sha256", sum)
}

// PruneCache removes the cache directories of the modules that are not loaded, nor being
// loaded, and what the cache's former layout left at its top (wazero's own subdirectories).
// The host's Run calls it once the handlers present at start have loaded. It returns how many
// directories it removed.
func (sb *Sandbox) PruneCache() int {
	if sb.cfg.CacheDir == "" {
		return 0
	}
	n := 0
	legacy, _ := filepath.Glob(filepath.Join(sb.cfg.CacheDir, "wazero-*"))
	for _, dir := range legacy {
		if os.RemoveAll(dir) == nil {
			n++
		}
	}
	ents, _ := os.ReadDir(filepath.Join(sb.cfg.CacheDir, moduleCacheDir))
	sb.mcache.mu.Lock()
	defer sb.mcache.mu.Unlock()
	for _, e := range ents {
		if !sumName.MatchString(e.Name()) || sb.mcache.users[e.Name()] > 0 {
			continue
		}
		sb.removeModuleCache(e.Name())
		n++
	}
	if n > 0 {
		sb.sums.record() // forget the entries removed
	}
	return n
}
