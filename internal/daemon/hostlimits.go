package daemon

import (
	"path/filepath"
	"time"

	"github.com/wasmhost/wasmhost/internal/config"
	"github.com/wasmhost/wasmhost/internal/host"
	"github.com/wasmhost/wasmhost/internal/host/policy"
	"github.com/wasmhost/wasmhost/internal/watcher"
)

// SandboxConfig is the part of the host's configuration that decides what a handler may do and
// cost, turned from cfg: its deadline, memory, limits, grants and plugin_call policy. The
// daemon builds its host on it, and so do `wasmhost handler test` and `handler inspect`, so
// that a module passes there if and only if it passes in the daemon with the same config.
func SandboxConfig(cfg config.Config) host.Config {
	return host.Config{
		CallTimeout:      time.Duration(cfg.Handlers.CallTimeout),
		MemoryLimit:      int64(cfg.Handlers.MemoryLimit),
		Grants:           cfg.Grants(),
		AllowInsecure:    cfg.Handlers.AllowInsecure,
		Limits:           cfg.Handlers.Limits,
		PluginCallPolicy: pluginCallPolicy(cfg),
	}
}

// hostBindings turns handlers.types.<T>.file and .digest into the host's bindings: a file is a
// name in the handler directory, so that no module pulled from a registry (served from
// another directory) matches it.
func hostBindings(cfg config.Config) map[string]policy.Binding {
	out := make(map[string]policy.Binding)
	for typ, tc := range cfg.Handlers.Types {
		if tc.File == "" && tc.Digest == "" {
			continue
		}
		b := policy.Binding{Digest: tc.Digest}
		if tc.File != "" {
			b.File = filepath.Join(cfg.HandlerDir, tc.File)
		}
		out[typ] = b
	}
	return out
}

// followDir is how the host follows a handler directory: on the socket watcher's engine
// (inotify), which the host itself does not import.
func followDir(dir string, resync, retry time.Duration) (host.DirFollower, error) {
	f, err := watcher.FollowDir(dir, resync, retry)
	if err != nil {
		return nil, err
	}
	return f, nil
}
