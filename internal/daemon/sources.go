package daemon

// Handlers from OCI registries (handlers.sources): internal/oci pulls, verifies and admits
// them and writes them to <stateDir>/handlers-oci, which a second host follows exactly as the
// first follows the handler directory (same loading, replacement, rollback, registry). The
// second host keeps its own compile cache, so that the two never write one wazero cache
// directory at once.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/wasmhost/wasmhost/internal/config"
	"github.com/wasmhost/wasmhost/internal/host"
	"github.com/wasmhost/wasmhost/internal/oci"
	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/state"
)

// ociSources is the host of the pulled handlers and what feeds it; nil when no source is
// configured (every method takes a nil receiver).
type ociSources struct {
	host    *host.Host
	sources *oci.Sources
	// gate is closed once every source serves a loaded revision or is refused, or after
	// firstWait: readiness waits for it, and so do the plugins of a type that has no handler
	// (HandlersPending), so that a plugin is not told "no handler" for a type whose handler is
	// on its way (a registry that refuses connections or hangs keeps it closed too). When it
	// closes, the registry is touched: those plugins are tried again, and told no if nothing
	// serves their type.
	gate      chan struct{}
	registry  *registration.Registry
	firstWait time.Duration
	log       *slog.Logger
	// preparing is true while Prepare serves what was pulled before (New, before Run).
	preparing atomic.Bool
}

// publishMu serializes publishHandlers (views.go).
var publishMu sync.Mutex

// newSources builds the host that serves handlers.sources (hcfg is the first host's config)
// and serves at once what was pulled before. It returns nil when no source is configured.
func (d *Daemon) newSources(ctx context.Context, cfg config.Config, hcfg host.Config) (_ *ociSources, err error) {
	if len(cfg.Handlers.Sources) == 0 {
		return nil, nil
	}
	store := filepath.Join(cfg.StateDir, "oci")
	hcfg.HandlerDir = filepath.Join(cfg.StateDir, "handlers-oci")
	hcfg.CacheDir = filepath.Join(store, "cache")
	hcfg.AllowInsecure = false // the daemon writes that directory itself, 0700
	hcfg.Logger = d.log.With("component", "host", "handler_source", "oci")
	o := &ociSources{gate: make(chan struct{}), registry: hcfg.Registry, firstWait: time.Duration(cfg.Handlers.Pull.FirstWait), log: d.log.With("component", "sources")}
	o.host, err = host.New(ctx, hcfg)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = o.host.Close(context.WithoutCancel(ctx))
		}
	}()
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
	o.sources, err = oci.NewSources(oci.SourcesConfig{
		Refs:          cfg.Handlers.Sources,
		Dir:           hcfg.HandlerDir,
		StoreDir:      store,
		Keys:          keys,
		AllowUnsigned: cfg.Handlers.Trust.AllowUnsigned,
		PluginTypes:   d.sourcePluginTypes(o.host),
		Remote:        oci.Options{MaxModuleBytes: int64(cfg.Handlers.Limits.MaxModuleSize)},
		Retry:         time.Duration(cfg.Handlers.Pull.Retry),
		PullTimeout:   time.Duration(cfg.Handlers.Pull.Timeout),
		MaxParallel:   cfg.Handlers.Pull.Parallel,
		Logger:        o.log,
		OnChange:      d.publishHandlers,
	})
	if err != nil {
		return nil, err
	}
	return o, nil
}

// prepareSources decides, from the revision stores, which plugin types the handler directory
// served last (it keeps them at start: a source declaring one waits until the directory is
// loaded, then is refused if a file still serves it), then serves what was pulled before.
// Call it once the revision stores have read their indexes, before Run.
func (d *Daemon) prepareSources(ctx context.Context) error {
	if d.oci == nil {
		return nil
	}
	fromSources := d.oci.host.LastServed()
	d.dirOwned = map[string]string{}
	for t, s := range d.host.LastServed() {
		if o, ok := fromSources[t]; ok && !s.At.After(o.At) {
			continue // a source served it last
		}
		d.dirOwned[t] = s.File
	}
	d.oci.preparing.Store(true)
	defer d.oci.preparing.Store(false)
	return d.oci.sources.Prepare(ctx)
}

// sourcePluginTypes reads the plugin types a pulled module declares, as `handler inspect`
// does, and refuses a type that a file of the handler directory serves already.
func (d *Daemon) sourcePluginTypes(h *host.Host) func(ctx context.Context, name string, bin []byte) ([]string, error) {
	return func(ctx context.Context, name string, bin []byte) ([]string, error) {
		r, err := h.Inspect(ctx, name, bin)
		if err != nil {
			return nil, err
		}
		if r.DescribeError != "" {
			return nil, fmt.Errorf("its manifest could not be read: %s", r.DescribeError)
		}
		// A type the handler directory served last is its own at start: the source waits
		// until the directory is loaded (at Run; before it, in Prepare, it is left to pull
		// again), then the check below decides.
		if d.host != nil {
			for _, t := range r.Manifest.PluginTypes {
				file, ok := d.dirOwned[t]
				if !ok {
					continue
				}
				select {
				case <-d.host.Ready():
				default:
					if d.oci.preparing.Load() {
						return nil, fmt.Errorf("plugin type %s was served by %s of the handler directory before the restart: the source waits until that directory is loaded", t, file)
					}
					select {
					case <-d.host.Ready():
					case <-ctx.Done():
						return nil, ctx.Err()
					}
				}
			}
			for _, hs := range d.host.Handlers() {
				for _, t := range r.Manifest.PluginTypes {
					if hs.Serving && slices.Contains(hs.PluginTypes, t) {
						return nil, fmt.Errorf("plugin type %s is served by %s of the handler directory: a plugin type comes from one place", t, hs.File)
					}
				}
			}
		}
		return r.Manifest.PluginTypes, nil
	}
}

// run follows the pulled handlers and pulls what is still to pull, until ctx is done.
func (o *ociSources) run(ctx context.Context) error {
	if o == nil {
		return nil
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return o.host.Run(gctx) })
	g.Go(func() error { return o.sources.Run(gctx) })
	g.Go(func() error {
		defer func() {
			close(o.gate)
			o.registry.Touch()
		}()
		t := time.NewTimer(o.firstWait)
		defer t.Stop()
		// The sources change as they are pulled, the host's handlers as it loads what they
		// write: look again at every change of either, and now and then.
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for !o.settled() {
			select {
			case <-tick.C:
			case <-t.C:
				o.warnUnsettled()
				return nil
			case <-gctx.Done():
				return nil
			}
		}
		return nil
	})
	return g.Wait()
}

// settled reports whether every source is done with at start: each was tried once, and the
// host has loaded (or refused) the revision it has on disk, or it has none and was refused (a
// source that has none and whose registry could not be reached is not settled).
func (o *ociSources) settled() bool {
	for _, ch := range []<-chan struct{}{o.host.Ready(), o.sources.Synced()} {
		select {
		case <-ch:
		default:
			return false
		}
	}
	return len(o.unsettled()) == 0
}

// pullNow has the sources tried at once, and waits until the host has loaded (or refused)
// what the try wrote.
func (o *ociSources) pullNow(ctx context.Context) error {
	if err := o.sources.PullNow(ctx); err != nil {
		return err
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		loading := false
		for _, st := range o.unsettled() {
			if st.ModuleSHA256 != "" {
				loading = true
			}
		}
		if !loading {
			return nil
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// unsettled returns the sources that settled waits for.
func (o *ociSources) unsettled() []oci.SourceStatus {
	byFile := map[string]host.HandlerStatus{}
	for _, hs := range o.host.Handlers() {
		byFile[hs.File] = hs
	}
	var out []oci.SourceStatus
	for _, st := range o.sources.Statuses() {
		if st.ModuleSHA256 == "" {
			if !st.Refused {
				out = append(out, st)
			}
			continue
		}
		hs, ok := byFile[st.File]
		if !ok || !(hs.Serving && hs.SHA256 == st.ModuleSHA256) && hs.LastError == "" {
			out = append(out, st)
		}
	}
	return out
}

// warnUnsettled says which sources the first wait ended without.
func (o *ociSources) warnUnsettled() {
	for _, st := range o.unsettled() {
		why := st.Error
		if why == "" {
			why = "not pulled yet"
		}
		o.log.Warn("handler source not serving when the first wait ended (handlers.pull.firstWait); registrations start without it, and it serves once pulled",
			"source", st.Ref, "wait", o.firstWait, "reason", cmp.Or(st.Reason, oci.ReasonPending), "error", why)
	}
}

// waitReady waits until the handlers from registries are loaded (or the first wait passed), or
// ctx is done.
func (o *ociSources) waitReady(ctx context.Context) error {
	if o == nil {
		return nil
	}
	select {
	case <-o.gate:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// pending reports whether the sources' first pull is still awaited (the gate is open): a
// plugin of a type no handler serves then waits rather than being told no.
func (o *ociSources) pending() bool {
	return o != nil && o.notReady() != nil
}

// hostLoaded waits until the host of the pulled handlers has loaded (or refused) the modules
// pulled before the daemon started. The handler directory's host starts after it, so that a
// plugin type declared by both goes, at every start, to the one that served it first: a
// source is refused at pull time for a type the directory serves, a directory file at run
// time for a type a source serves (host.Config.Bindings decides otherwise).
func (o *ociSources) hostLoaded(ctx context.Context) error {
	if o == nil {
		return nil
	}
	select {
	case <-o.host.Ready():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// notReady says why the pulled handlers are not ready, or nil.
func (o *ociSources) notReady() error {
	if o == nil {
		return nil
	}
	select {
	case <-o.gate:
		return nil
	default:
		return errors.New("the handlers from registries are still being pulled or loaded")
	}
}

// handlers is the pulled handlers' status as the handler directory's is shown: named by
// their source, pinned; a source that serves nothing yet is a row with its error.
func (o *ociSources) handlers() []host.HandlerStatus {
	if o == nil {
		return nil
	}
	byFile := map[string]host.HandlerStatus{}
	for _, hs := range o.host.Handlers() {
		byFile[hs.File] = hs
	}
	var out []host.HandlerStatus
	for _, st := range o.sources.Statuses() {
		hs, ok := byFile[st.File]
		if !ok {
			hs = host.HandlerStatus{}
		}
		hs.File = st.Ref
		if st.Pinned != "" && st.Pinned != st.Ref {
			hs.File = st.Ref + " (serving " + st.Pinned[strings.LastIndexByte(st.Pinned, '@')+1:] + ")"
		}
		if st.Error != "" && (hs.LastError == "" || st.ErrorAt.After(hs.LastErrorAt)) {
			hs.LastError, hs.LastErrorAt, hs.Refusal = st.Error, st.ErrorAt, st.Reason
		}
		if !hs.Serving && hs.LastError == "" {
			hs.Refusal = state.ReasonPending
		}
		out = append(out, hs)
	}
	return out
}

// close closes the pulled handlers' host.
func (o *ociSources) close(ctx context.Context) error {
	if o == nil {
		return nil
	}
	return o.host.Close(ctx)
}
