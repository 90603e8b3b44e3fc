// Package daemon is wasmhost's composition root: a configuration in, the pipeline wired and
// running out (socket → watcher → state → reconciler → registration → host), with the admin
// API and the metrics beside it. cmd/wasmhost, the end-to-end tests, the benchmarks and
// test/interop all build their daemon here. Not a stable API.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/wasmhost/wasmhost/internal/admin"
	"github.com/wasmhost/wasmhost/internal/capture"
	"github.com/wasmhost/wasmhost/internal/config"
	"github.com/wasmhost/wasmhost/internal/host"
	"github.com/wasmhost/wasmhost/internal/kube"
	"github.com/wasmhost/wasmhost/internal/metrics"
	"github.com/wasmhost/wasmhost/internal/oci/pulled"
	"github.com/wasmhost/wasmhost/internal/publish"
	"github.com/wasmhost/wasmhost/internal/reconciler"
	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/registration/forward"
	"github.com/wasmhost/wasmhost/internal/registration/liveness"
	"github.com/wasmhost/wasmhost/internal/registration/registrar"
	"github.com/wasmhost/wasmhost/internal/state"
	"github.com/wasmhost/wasmhost/internal/tracing"
	"github.com/wasmhost/wasmhost/internal/typeslots"
	"github.com/wasmhost/wasmhost/internal/watcher"
)

// RunWithShutdownDeadline builds a daemon for cfg and runs it until ctx is done, then gives it
// cfg.ShutdownTimeout to stop gracefully before giving up on it (the process is about to exit).
func RunWithShutdownDeadline(ctx context.Context, cfg config.Config, log *slog.Logger, version string) error {
	done := make(chan error, 1)
	go func() { done <- run(ctx, cfg, log, version) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down", "deadline", time.Duration(cfg.ShutdownTimeout))
	select {
	case err := <-done:
		return err
	case <-time.After(time.Duration(cfg.ShutdownTimeout)):
		return fmt.Errorf("shutdown did not finish within %s; exiting anyway", time.Duration(cfg.ShutdownTimeout))
	}
}

// Daemon is the pipeline, wired: watcher → desired state → reconciler → registrar → handlers.
type Daemon struct {
	cfg      config.Config
	version  string
	log      *slog.Logger
	state    *state.Store
	desired  *state.Desired
	actual   *state.Actual
	registry *registration.Registry
	watcher  *watcher.Watcher
	rec      *reconciler.Reconciler
	host     *host.Host
	oci      *pulled.Handlers // the handlers of handlers.sources (sources.go); nil without
	admin    *admin.Server
	metrics  *metrics.Metrics
	liveness *liveness.Monitor
	forward  *forward.Forwarder // presents plugins to the kubelet (forward.*); nil when off
	pub      *publish.Publisher // takes what handlers publish to the cluster (publish.go); nil when off
	events   *kube.Recorder     // Events on the Node; nil when off
	capture  *capture.Ring      // the sessions of the last registrations (capture.go); nil when off
	tracing  *tracing.Provider  // exports the spans of registrations (tracing.*); off by default
}

// New builds every part of the daemon for cfg (checked and made absolute by the caller);
// version is what the admin API and the metrics report. A nil log discards. What New opened
// before a failure is closed before the error returns.
func New(ctx context.Context, cfg config.Config, log *slog.Logger, version string) (_ *Daemon, err error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := &Daemon{
		cfg:      cfg,
		version:  version,
		log:      log,
		state:    state.New(),
		registry: registration.NewRegistry(),
	}
	d.desired, d.actual = d.state.Desired(), d.state.Actual()
	tcfg := cfg.Tracing.Tracing(version)
	tcfg.Logger = log.With("component", "tracing")
	if d.tracing, err = tracing.New(ctx, tcfg); err != nil {
		return nil, err
	}
	tracer := d.tracing.Tracer() // nil when off: nothing is traced
	defer func() {
		if err != nil {
			_ = d.tracing.Shutdown(context.WithoutCancel(ctx))
		}
		if err != nil && d.liveness != nil {
			d.liveness.Close()
		}
		if err != nil && d.forward != nil {
			d.forward.Close()
		}
	}()
	resync := time.Duration(cfg.Watcher.Resync)
	if resync == 0 {
		resync = -1 // 0 in the config file means off; in the watcher, a negative value does
	}
	w, err := watcher.New(watcher.Config{
		Dir:     cfg.SocketDir,
		Desired: d.desired,
		Resync:  resync,
		Logger:  log.With("component", "watcher"),
	})
	if err != nil {
		return nil, err
	}
	d.watcher = w
	if d.pub, err = d.newPublisher(cfg); err != nil {
		return nil, err
	}
	mcfg := metrics.Config{
		Addr:                cfg.Metrics.Listen,
		MaxConnections:      cfg.Metrics.MaxConnections,
		Logger:              log.With("component", "metrics"),
		Version:             d.version,
		Ready:               d.Ready,
		Problems:            d.problems,
		NotServing:          d.notServingSamples,
		Plugins:             d.pluginSamples,
		Handlers:            d.handlerSamples,
		Refusals:            func() map[string]uint64 { return d.host.Refusals() },
		RegistrationRetries: func() uint64 { return d.rec.Counters().Retries },
		WatcherRelists:      func() uint64 { return d.watcher.Stats().Relists },
		WatcherErrors:       func() uint64 { return d.watcher.Stats().Errors },
	}
	if d.capture, err = newCapture(cfg); err != nil {
		return nil, err
	}
	acfg := admin.Config{
		Store:      d.state,
		Control:    revisionControl{d},
		Ready:      d.Ready,
		Problems:   d.problems,
		Pull:       d.pullSources,
		SocketPath: cfg.AdminSocket(),
		Logger:     log.With("component", "admin"),
		Version:    d.version,
	}
	if d.capture != nil {
		acfg.Capture = d.capture.Sessions
	}
	if d.pub != nil {
		mcfg.Publish, mcfg.PublishRefused = d.publishSamples, func() int { return d.pub.Status().Refused }
		acfg.Publish, acfg.NotPublished = d.publishStatus, d.notPublished
	}
	if d.events != nil {
		mcfg.Events = d.eventCounts
	}
	d.metrics, err = metrics.New(mcfg)
	if err != nil {
		return nil, err
	}
	// One slot count per plugin type and one across types, shared: the registrar takes a slot
	// after GetInfo, the reconciler queues a socket whose type had none behind its type.
	typeSlots := typeslots.New(cfg.Reconciler.MaxPerType, cfg.Reconciler.MaxConcurrent)
	fdLimit, fdErr := raiseFDLimit()
	if fdErr != nil {
		log.Warn("descriptor limit", "limit", fdLimit, "error", fdErr)
	}
	inFlight := inFlightWithin(MaxInFlight, fdLimit)
	if inFlight < MaxInFlight {
		log.Warn("operations in flight bounded by a quarter of the descriptor limit: raise it (LimitNOFILE, ulimit -n) to allow more", "most", MaxInFlight, "using", inFlight, "fd_limit", fdLimit)
	}
	// A registered plugin whose server goes while its socket stays is marked dead in the
	// desired state: the reconciler deregisters it.
	d.liveness, err = liveness.New(liveness.Config{
		OnDead: func(path string, id state.Identity) { d.desired.MarkDead(path, id) },
		Logger: log.With("component", "liveness"),
	})
	if err != nil {
		return nil, err
	}
	rcfg := registrar.Config{
		TypeSlots: typeSlots,
		Liveness:  d.liveness,
		Handlers:  d.registry,
		// Plugins of the other types register at once: only a type without a handler waits
		// for the sources' first pull (pulled.Handlers.Gate), not told no meanwhile.
		HandlersPending: func() bool { return d.oci.Pending() },
		Actual:          d.actual,
		Logger:          log.With("component", "registrar"),
		DialTimeout:     time.Duration(cfg.Registration.DialTimeout),
		GetInfoTimeout:  time.Duration(cfg.Registration.GetInfoTimeout),
		NotifyTimeout:   time.Duration(cfg.Registration.NotifyTimeout),
		HandlerTimeout:  time.Duration(cfg.Handlers.CallTimeout),
		Observer:        observer{d.metrics},
		Tracer:          tracer,
		ErrorType:       resultOf,
	}
	if f := cfg.Forward; (f.KubeletDir == "") != (len(f.Types) == 0) {
		log.Warn("forwarding to the kubelet is off: it needs both forward.kubeletDir and forward.types", "kubelet_dir", f.KubeletDir, "types", f.Types)
	}
	if cfg.Forward.On() {
		// Before the reconciler's first pass: the sockets an earlier run left in the
		// kubelet's directory are removed here.
		d.forward, err = forward.New(forward.Config{
			Dir:       cfg.Forward.KubeletDir,
			Types:     cfg.Forward.Types,
			RecordDir: filepath.Join(cfg.StateDir, "forward"),
			Status:    d.state,
			Logger:    log.With("component", "forward"),
		})
		if err != nil {
			return nil, err
		}
		rcfg.Forward = d.forward
	}
	reg, err := registrar.New(rcfg)
	if err != nil {
		return nil, err
	}
	d.admin, err = admin.New(acfg)
	if err != nil {
		return nil, err
	}
	d.rec = reconciler.New(d.desired, d.actual, d.registry, reg, reconciler.Config{
		MaxConcurrent:   cfg.Reconciler.MaxConcurrent,
		MaxInFlight:     inFlight,
		StalledAfter:    StalledAfter,
		TypeSlots:       typeSlots,
		MaxRetrying:     MaxRetrying,
		RecheckRejected: time.Duration(cfg.Reconciler.RejectedRecheck),
		Jitter:          BackoffJitter,
		InitialBackoff:  time.Duration(cfg.Reconciler.InitialBackoff),
		MaxBackoff:      time.Duration(cfg.Reconciler.MaxBackoff),
		Resync:          time.Duration(cfg.Reconciler.Resync),
		Logger:          log.With("component", "reconciler"),
		Status:          d.state,
		Tracer:          tracer,
	})
	// The host comes last: it is the only part that holds resources before Run.
	hcfg := SandboxConfig(cfg)
	hcfg.HandlerDir = cfg.HandlerDir
	hcfg.CacheDir = filepath.Join(cfg.StateDir, "cache")
	hcfg.Registry = d.registry
	hcfg.PoolSize = cfg.Handlers.PoolSize
	hcfg.RemovalGrace = time.Duration(cfg.Handlers.RemovalGrace)
	hcfg.Bindings = hostBindings(cfg)
	hcfg.Quarantine = &cfg.Handlers.Quarantine
	hcfg.PluginCaller = registrar.PluginCaller{Tracer: tracer}
	hcfg.Tracer = tracer
	hcfg.OnChange = d.publishHandlers
	hcfg.FollowDir = followDir
	if d.capture != nil {
		hcfg.Recorder = d.capture
	}
	hcfg.Logger = log.With("component", "host")
	d.host, err = host.New(ctx, hcfg)
	if err != nil {
		return nil, err
	}
	if d.oci, err = d.newSources(ctx, cfg, hcfg); err != nil {
		_ = d.host.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	if err := d.setUpRevisions(ctx, cfg); err != nil {
		_ = d.host.Close(context.WithoutCancel(ctx))
		_ = d.oci.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	if err := d.oci.Prepare(ctx); err != nil {
		_ = d.host.Close(context.WithoutCancel(ctx))
		_ = d.oci.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	d.state.SetHandlerCounters(d.handlerCounters)
	return d, nil
}

// Run runs every part of the daemon until ctx is done or one of them fails, and returns when
// all of them have stopped and the handlers are closed. Call it once.
func (d *Daemon) Run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return d.watcher.Run(gctx) })
	g.Go(func() error {
		// Registrations wait for the handlers present at start: a plugin found before its
		// handler is loaded would be told "no handler for your type", and some plugins (the
		// CSI node-driver-registrar) exit when told no. The watcher lists sockets meanwhile.
		// The handlers still being pulled from registries hold only the plugins of a type that
		// has no handler (HandlersPending), not the others.
		select {
		case <-d.host.Ready():
		case <-gctx.Done():
			return nil
		}
		return d.rec.Run(gctx)
	})
	g.Go(func() error {
		select {
		case <-d.host.Ready():
		case <-gctx.Done():
			return nil
		}
		if d.oci.WaitReady(gctx) == nil {
			d.warnNothingServes()
		}
		return nil
	})
	g.Go(func() error {
		if d.oci.HostLoaded(gctx) != nil {
			return nil
		}
		return d.host.Run(gctx)
	})
	g.Go(func() error { return d.liveness.Run(gctx) })
	if d.forward != nil {
		g.Go(func() error { return d.forward.Run(gctx) })
	}
	g.Go(func() error { return d.oci.Run(gctx) })
	g.Go(func() error { return d.admin.Run(gctx) })
	g.Go(func() error { return d.metrics.Run(gctx) })
	if d.pub != nil {
		g.Go(func() error { return d.pub.Run(gctx) })
	}
	if d.events != nil {
		g.Go(func() error { return d.events.Run(gctx) })
	}
	g.Go(func() error {
		select {
		case <-d.watcher.Synced():
			d.log.Info("socket directory listed", "socket_dir", d.watcher.Dir(), "sockets", d.desired.Len())
		case <-gctx.Done():
		}
		return nil
	})
	err := g.Wait()
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		err = nil
	}
	// The reconciler has stopped calling handlers: the modules can go.
	closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err = errors.Join(err, d.host.Close(closeCtx), d.oci.Close(closeCtx))
	// Last, the spans still queued: a collector that is down costs at most twice the export
	// timeout here (tracing.Provider.Shutdown), and an error only a warning.
	if terr := d.tracing.Shutdown(context.WithoutCancel(ctx)); terr != nil {
		d.log.Warn("tracing: spans not exported at shutdown", "endpoint", d.cfg.Tracing.Endpoint, "error", terr)
	}
	return err
}

func run(ctx context.Context, cfg config.Config, log *slog.Logger, version string) error {
	d, err := New(ctx, cfg, log, version)
	if err != nil {
		return err
	}
	log.Info("wasmhost starting", "version", version, "socket_dir", cfg.SocketDir, "handler_dir", cfg.HandlerDir, "state_dir", cfg.StateDir)
	err = d.Run(ctx)
	log.Info("wasmhost stopped")
	return err
}

// SetHandler serves pluginType with a native handler besides the .wasm ones (tests and
// benchmarks measure the pipeline without WebAssembly this way). Call it before Run.
func (d *Daemon) SetHandler(pluginType string, h registration.Handler) {
	d.registry.Set(pluginType, h)
}

// AdminSocket is where the admin API listens.
func (d *Daemon) AdminSocket() string { return d.admin.SocketPath() }

// State is the daemon's state store: what the admin API, the metrics and tests read.
func (d *Daemon) State() *state.Store { return d.state }
