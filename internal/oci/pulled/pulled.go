// Package pulled serves the handlers pulled from OCI registries (handlers.sources): package
// oci pulls, verifies and admits them and writes them to a directory, which a host of their
// own follows exactly as the daemon's first host follows the handler directory (same loading,
// replacement, rollback, registry). It decides, with the handler directory's host, which of
// the two serves a plugin type both declare, and when the sources have settled at start (the
// gate readiness and the plugins of a type with no handler wait for).
package pulled

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/wasmhost/wasmhost/internal/host"
	"github.com/wasmhost/wasmhost/internal/oci"
	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/state"
)

// Config configures Handlers.
type Config struct {
	// Host is the config of the pulled handlers' host: the handler directory's host's (its
	// limits, grants, registry, OnChange), with a HandlerDir, a CacheDir (the two hosts never
	// write one wazero cache directory at once) and a Logger of its own. New refuses files
	// others may write there (AllowInsecure false): the sources write that directory, 0700.
	Host host.Config
	// Sources configures the sources, but for Dir (Host.HandlerDir) and PluginTypes, which
	// New sets. Its OnChange, if set, is called after a source's status changed.
	Sources oci.SourcesConfig
	// Dir is the handler directory's host: a plugin type a file there serves is refused to a
	// source, and one it served last before the restart waits until it has loaded. nil: none.
	Dir *host.Host
	// FirstWait is the longest the gate stays closed at start (handlers.pull.firstWait).
	FirstWait time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Handlers is the host of the pulled handlers and the sources that feed it. A nil *Handlers
// (no source configured) is usable: it serves nothing and is always ready.
type Handlers struct {
	host    *host.Host
	sources *oci.Sources
	dir     *host.Host
	// gate is closed once every source serves a loaded revision or its registry answered no
	// (refused, or a digest it does not have: fetching), or after firstWait: readiness waits for it, and so do the plugins of a type that has no handler
	// (Pending), so that a plugin is not told "no handler" for a type whose handler is on its
	// way (a registry that refuses connections or hangs keeps it closed too). When it closes,
	// the registry is touched: those plugins are tried again, and told no if nothing serves
	// their type.
	gate      chan struct{}
	registry  *registration.Registry
	firstWait time.Duration
	log       *slog.Logger
	// changes is told of every change of the sources' statuses and of the host's handlers:
	// what the gate and PullNow wait on.
	changes notifier
	// dirOwned are the plugin types the handler directory served last, at start: their file
	// (Prepare).
	dirOwned map[string]string
	// preparing is true while Prepare serves what was pulled before (before Run).
	preparing atomic.Bool
}

// New builds the host of the pulled handlers and its sources. Close it when done.
func New(ctx context.Context, cfg Config) (_ *Handlers, err error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	p := &Handlers{dir: cfg.Dir, gate: make(chan struct{}), registry: cfg.Host.Registry, firstWait: cfg.FirstWait, log: log}
	hcfg := cfg.Host
	hcfg.AllowInsecure = false // the sources write that directory, 0700
	hcfg.OnChange = p.changes.after(hcfg.OnChange)
	p.host, err = host.New(ctx, hcfg)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = p.host.Close(context.WithoutCancel(ctx))
		}
	}()
	scfg := cfg.Sources
	scfg.Dir = hcfg.HandlerDir
	scfg.PluginTypes = p.PluginTypes
	scfg.OnChange = p.changes.after(scfg.OnChange)
	if p.sources, err = oci.NewSources(scfg); err != nil {
		return nil, err
	}
	return p, nil
}

// Host is the host of the pulled handlers (nil for a nil Handlers).
func (p *Handlers) Host() *host.Host {
	if p == nil {
		return nil
	}
	return p.host
}

// Sources are the sources that feed the host.
func (p *Handlers) Sources() *oci.Sources { return p.sources }

// Gate is closed once the sources have settled at start, or the first wait passed.
func (p *Handlers) Gate() <-chan struct{} { return p.gate }

// Prepare decides, from the revision stores, which plugin types the handler directory served
// last (it keeps them at start: a source declaring one waits until the directory is loaded,
// then is refused if a file still serves it), then serves what was pulled before. Call it
// once the revision stores have read their indexes, before Run.
func (p *Handlers) Prepare(ctx context.Context) error {
	if p == nil {
		return nil
	}
	p.dirOwned = map[string]string{}
	if p.dir != nil {
		fromSources := p.host.LastServed()
		for t, s := range p.dir.LastServed() {
			if o, ok := fromSources[t]; ok && !s.At.After(o.At) {
				continue // a source served it last
			}
			p.dirOwned[t] = s.File
		}
	}
	p.preparing.Store(true)
	defer p.preparing.Store(false)
	return p.sources.Prepare(ctx)
}

// PluginTypes reads the plugin types a pulled module declares, as `handler inspect` does, and
// refuses a type that a file of the handler directory serves already: the sources admit a
// module by it (oci.SourcesConfig.PluginTypes).
func (p *Handlers) PluginTypes(ctx context.Context, name string, bin []byte) ([]string, error) {
	r, err := p.host.Inspect(ctx, name, bin)
	if err != nil {
		return nil, err
	}
	if r.DescribeError != "" {
		return nil, fmt.Errorf("its manifest could not be read: %s", r.DescribeError)
	}
	if p.dir == nil {
		return r.Manifest.PluginTypes, nil
	}
	// A type the handler directory served last is its own at start: the source waits until
	// the directory is loaded (at Run; before it, in Prepare, it is left to pull again), then
	// the check below decides.
	for _, t := range r.Manifest.PluginTypes {
		file, ok := p.dirOwned[t]
		if !ok {
			continue
		}
		select {
		case <-p.dir.Ready():
		default:
			if p.preparing.Load() {
				return nil, fmt.Errorf("plugin type %s was served by %s of the handler directory before the restart: the source waits until that directory is loaded", t, file)
			}
			select {
			case <-p.dir.Ready():
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	}
	for _, hs := range p.dir.Handlers() {
		for _, t := range r.Manifest.PluginTypes {
			if hs.Serving && slices.Contains(hs.PluginTypes, t) {
				return nil, fmt.Errorf("plugin type %s is served by %s of the handler directory: a plugin type comes from one place", t, hs.File)
			}
		}
	}
	return r.Manifest.PluginTypes, nil
}

// Run follows the pulled handlers and pulls what is still to pull, until ctx is done.
func (p *Handlers) Run(ctx context.Context) error {
	if p == nil {
		return nil
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return p.host.Run(gctx) })
	g.Go(func() error { return p.sources.Run(gctx) })
	g.Go(func() error {
		defer func() {
			close(p.gate)
			p.registry.Touch()
		}()
		t := time.NewTimer(p.firstWait)
		defer t.Stop()
		// The sources change as they are pulled, the host's handlers as it loads what they
		// write: look again at every change of either, and when the host has loaded what was
		// there at start or the sources have been tried once.
		for {
			changed := p.changes.wait()
			if p.settled() {
				return nil
			}
			select {
			case <-changed:
			case <-open(p.host.Ready()):
			case <-open(p.sources.Synced()):
			case <-t.C:
				p.warnUnsettled()
				return nil
			case <-gctx.Done():
				return nil
			}
		}
	})
	return g.Wait()
}

// open returns ch while it is open, and nil (which a select never picks) once it is closed.
func open(ch <-chan struct{}) <-chan struct{} {
	select {
	case <-ch:
		return nil
	default:
		return ch
	}
}

// settled reports whether every source is done with at start: each was tried once, and the
// host has loaded (or refused) the revision it has on disk, or it has none and was refused (a
// source that has none and whose registry could not be reached is not settled).
func (p *Handlers) settled() bool {
	if open(p.host.Ready()) != nil || open(p.sources.Synced()) != nil {
		return false
	}
	return len(p.unsettled()) == 0
}

// PullNow has the sources tried at once, and waits until the host has loaded (or refused)
// what the try wrote.
func (p *Handlers) PullNow(ctx context.Context) error {
	if err := p.sources.PullNow(ctx); err != nil {
		return err
	}
	for {
		changed := p.changes.wait()
		loading := false
		for _, st := range p.unsettled() {
			if st.ModuleSHA256 != "" {
				loading = true
			}
		}
		if !loading {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// unsettled returns the sources that settled waits for.
func (p *Handlers) unsettled() []oci.SourceStatus {
	byFile := map[string]host.HandlerStatus{}
	for _, hs := range p.host.Handlers() {
		byFile[hs.File] = hs
	}
	var out []oci.SourceStatus
	for _, st := range p.sources.Statuses() {
		if st.ModuleSHA256 == "" {
			if fetching(st) {
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

// fetching reports whether a source that has no module yet is still being fetched: not tried
// yet, or its registry did not answer (unreachable, or not in time). One the registry answered
// no (a digest it does not have, content that does not match its digest, a module refused for
// its signature or its plugin types) cannot serve until its configuration or its registry
// changes: the first wait is not for it, and its status says why it does not serve.
func fetching(st oci.SourceStatus) bool {
	switch st.Reason {
	case "", oci.ReasonPending, oci.ReasonUnreachable:
		return !st.Refused
	}
	return false
}

// warnUnsettled says which sources the first wait ended without.
func (p *Handlers) warnUnsettled() {
	for _, st := range p.unsettled() {
		why := st.Error
		if why == "" {
			why = "not pulled yet"
		}
		p.log.Warn("handler source not serving when the first wait ended (handlers.pull.firstWait); registrations start without it, and it serves once pulled",
			"source", st.Ref, "wait", p.firstWait, "reason", cmp.Or(st.Reason, oci.ReasonPending), "error", why)
	}
}

// WaitReady waits until the handlers from registries are loaded (or the first wait passed), or
// ctx is done.
func (p *Handlers) WaitReady(ctx context.Context) error {
	if p == nil {
		return nil
	}
	select {
	case <-p.gate:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Pending reports whether the sources' first pull is still awaited (the gate is open): a
// plugin of a type no handler serves then waits rather than being told no.
func (p *Handlers) Pending() bool {
	if p == nil {
		return false
	}
	select {
	case <-p.gate:
		return false
	default:
		return true
	}
}

// HostLoaded waits until the host of the pulled handlers has loaded (or refused) the modules
// pulled before the daemon started. The handler directory's host starts after it, so that a
// plugin type declared by both goes, at every start, to the one that served it first: a
// source is refused at pull time for a type the directory serves, a directory file at run
// time for a type a source serves (host.Config.Bindings decides otherwise).
func (p *Handlers) HostLoaded(ctx context.Context) error {
	if p == nil {
		return nil
	}
	select {
	case <-p.host.Ready():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// NotReady says why the pulled handlers are not ready, or nil.
func (p *Handlers) NotReady() error {
	if p == nil {
		return nil
	}
	select {
	case <-p.gate:
		return nil
	default:
	}
	var waits []string
	for _, st := range p.unsettled() {
		why := "loading"
		if st.ModuleSHA256 == "" {
			why = cmp.Or(st.Reason, oci.ReasonPending)
		}
		waits = append(waits, st.Ref+" ("+why+")")
	}
	if len(waits) == 0 {
		return errors.New("the handlers from registries are still being pulled or loaded")
	}
	return fmt.Errorf("the handlers from registries are still being pulled or loaded: %s (at most handlers.pull.firstWait, %s)", strings.Join(waits, ", "), p.firstWait)
}

// Statuses are the pulled handlers' status as the handler directory's is shown: named by
// their source, pinned; a source that serves nothing yet is a row with its error.
func (p *Handlers) Statuses() []host.HandlerStatus {
	if p == nil {
		return nil
	}
	byFile := map[string]host.HandlerStatus{}
	for _, hs := range p.host.Handlers() {
		byFile[hs.File] = hs
	}
	var out []host.HandlerStatus
	for _, st := range p.sources.Statuses() {
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

// Close closes the pulled handlers' host.
func (p *Handlers) Close(ctx context.Context) error {
	if p == nil {
		return nil
	}
	return p.host.Close(ctx)
}

// notifier tells its waiters of a change: wait returns a channel closed at the next notify.
// A waiter takes the channel before it looks at what changes, so that a change between the
// look and the wait is not missed.
type notifier struct {
	mu sync.Mutex
	ch chan struct{}
}

func (n *notifier) wait() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ch == nil {
		n.ch = make(chan struct{})
	}
	return n.ch
}

func (n *notifier) notify() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ch != nil {
		close(n.ch)
		n.ch = nil
	}
}

// after returns f followed by a notify (a notify alone when f is nil).
func (n *notifier) after(f func()) func() {
	return func() {
		if f != nil {
			f()
		}
		n.notify()
	}
}
