package daemon

// Handlers from OCI registries (handlers.sources): internal/oci/pulled serves them, on a host
// of their own beside the handler directory's; here the configuration is turned into its.

import (
	"context"
	"path/filepath"
	"sync"
	"time"

	"github.com/wasmhost/wasmhost/internal/config"
	"github.com/wasmhost/wasmhost/internal/host"
	"github.com/wasmhost/wasmhost/internal/oci"
	"github.com/wasmhost/wasmhost/internal/oci/pulled"
)

// publishMu serializes publishHandlers (views.go).
var publishMu sync.Mutex

// newSources builds the host that serves handlers.sources (hcfg is the first host's config),
// its state under <stateDir>/oci and its modules in <stateDir>/handlers-oci, with a compile
// cache of its own. It returns nil when no source is configured.
func (d *Daemon) newSources(ctx context.Context, cfg config.Config, hcfg host.Config) (*pulled.Handlers, error) {
	if len(cfg.Handlers.Sources) == 0 {
		return nil, nil
	}
	store := filepath.Join(cfg.StateDir, "oci")
	hcfg.HandlerDir = filepath.Join(cfg.StateDir, "handlers-oci")
	hcfg.CacheDir = filepath.Join(store, "cache")
	hcfg.Logger = d.log.With("component", "host", "handler_source", "oci")
	var keys []oci.Key
	for _, k := range cfg.Handlers.Trust.Keys {
		key, err := oci.LoadKey(k.PublicKey, k.PluginTypes)
		if err != nil {
			return nil, err
		}
		keys = append(keys, key)
	}
	for _, id := range cfg.Handlers.Trust.Identities {
		key, err := oci.LoadIdentity(id.TrustedRoot, id.Issuer, id.Subject, id.SubjectRegExp, id.PluginTypes)
		if err != nil {
			return nil, err
		}
		keys = append(keys, key)
	}
	log := d.log.With("component", "sources")
	return pulled.New(ctx, pulled.Config{
		Host: hcfg,
		Sources: oci.SourcesConfig{
			Refs:          cfg.Handlers.Sources,
			StoreDir:      store,
			Keys:          keys,
			AllowUnsigned: cfg.Handlers.Trust.AllowUnsigned,
			Remote:        oci.Options{MaxModuleBytes: int64(cfg.Handlers.Limits.MaxModuleSize)},
			Retry:         time.Duration(cfg.Handlers.Pull.Retry),
			PullTimeout:   time.Duration(cfg.Handlers.Pull.Timeout),
			MaxParallel:   cfg.Handlers.Pull.Parallel,
			Logger:        log,
			OnChange:      d.publishHandlers,
			Tracer:        d.tracing.Tracer(),
		},
		Dir:       d.host,
		FirstWait: time.Duration(cfg.Handlers.Pull.FirstWait),
		Logger:    log,
	})
}
