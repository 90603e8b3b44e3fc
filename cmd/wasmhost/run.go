package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/sync/errgroup"

	"github.com/wasmhost/wasmhost/internal/admin"
	"github.com/wasmhost/wasmhost/internal/host"
	"github.com/wasmhost/wasmhost/internal/metrics"
	"github.com/wasmhost/wasmhost/internal/reconciler"
	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/registration/registrar"
	"github.com/wasmhost/wasmhost/internal/statecache"
	"github.com/wasmhost/wasmhost/internal/watcher"
)

func newRunCmd() *cobra.Command {
	cfg := defaultConfig()
	var configFile string
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the daemon: watch the socket directory and register plugins",
		Long: `Run the daemon in the foreground. It watches --socket-dir for plugin sockets, loads
the .wasm handlers in --handler-dir (and reloads them as they change), and keeps its
compile cache and admin socket in --state-dir. SIGINT or SIGTERM stops it gracefully,
within --shutdown-timeout.

Settings come from the defaults, then --config, then the flags.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if configFile != "" {
				// The file goes under the flags: re-apply the flags that were set.
				fileCfg := defaultConfig()
				if err := loadConfigFile(configFile, &fileCfg); err != nil {
					return err
				}
				if err := overlayFlags(cmd, &fileCfg); err != nil {
					return err
				}
				cfg = fileCfg
			}
			if err := cfg.validate(); err != nil {
				return fmt.Errorf("invalid configuration:\n%w", err)
			}
			if err := cfg.absolutePaths(); err != nil {
				return err
			}
			log, err := newLogger(os.Stderr, cfg.Log.Format, cfg.Log.Level)
			if err != nil {
				return err
			}
			tuneGC()
			return runWithShutdownDeadline(cmd.Context(), cfg, log)
		},
	}
	bindFlags(cmd, &cfg)
	cmd.Flags().StringVar(&configFile, "config", "", "YAML config file (flags override it); see docs/configuration.md")
	return cmd
}

// bindFlags binds the flags that override the config file onto cfg.
func bindFlags(cmd *cobra.Command, cfg *Config) {
	f := cmd.Flags()
	f.StringVar(&cfg.SocketDir, "socket-dir", cfg.SocketDir, "directory where plugins create their registration sockets")
	f.StringVar(&cfg.HandlerDir, "handler-dir", cfg.HandlerDir, "directory of .wasm handlers, reloaded as it changes")
	f.StringVar(&cfg.StateDir, "state-dir", cfg.StateDir, "directory for the compile cache and the admin socket")
	f.StringVar(&cfg.Log.Format, "log-format", cfg.Log.Format, "log format: auto (coloured text on a terminal, JSON otherwise), text or json")
	f.StringVar(&cfg.Log.Level, "log-level", cfg.Log.Level, "log level: debug, info, warn or error")
	f.Var(&cfg.ShutdownTimeout, "shutdown-timeout", "hard deadline of a graceful shutdown")
	f.Var(&cfg.Handlers.CallTimeout, "handler-timeout", "deadline of every handler call")
	f.Var(&cfg.Handlers.MemoryLimit, "handler-memory-limit", "memory ceiling of each handler instance (e.g. 64MiB)")
	f.BoolVar(&cfg.Handlers.AllowInsecure, "allow-insecure-handlers", cfg.Handlers.AllowInsecure, "load handler files and directories that others than their owner may write")
	f.StringVar(&cfg.Admin.Socket, "admin-socket", cfg.Admin.Socket, "admin API socket (default <state-dir>/admin.sock)")
	f.StringVar(&cfg.Metrics.Listen, "metrics-listen", cfg.Metrics.Listen, "metrics and health endpoints: off, unix:/path or host:port")
}

// overlayFlags copies the flags the user set onto cfg, which was read from the config file.
func overlayFlags(cmd *cobra.Command, cfg *Config) error {
	tmp := &cobra.Command{}
	bindFlags(tmp, cfg)
	var err error
	cmd.Flags().Visit(func(fl *pflag.Flag) {
		if t := tmp.Flags().Lookup(fl.Name); t != nil && err == nil {
			err = t.Value.Set(fl.Value.String())
		}
	})
	return err
}

// daemonGCPercent is the daemon's GOGC unless the environment sets one. A node agent's memory
// is worth more than a little GC work: with 50 instead of Go's 100, peak RSS with 1,000 plugins
// and the Go example handler fell from a median of 66.5 MB to 58 MB over six runs each, with no
// measurable change in the burst's CPU (BenchmarkDaemonProcess/plugins=1000/handler=warm,
// docs/benchmarks.md).
const daemonGCPercent = 50

// tuneGC sets the daemon's GC target, leaving an operator's GOGC alone.
func tuneGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(daemonGCPercent)
	}
}

// runWithShutdownDeadline runs the daemon until ctx is done, then gives it ShutdownTimeout to
// stop gracefully before giving up on it.
func runWithShutdownDeadline(ctx context.Context, cfg Config, log *slog.Logger) error {
	done := make(chan error, 1)
	go func() { done <- runDaemon(ctx, cfg, log) }()
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

// daemon is the pipeline, wired: watcher → desired state → reconciler → registrar → handlers.
type daemon struct {
	cfg      Config
	log      *slog.Logger
	desired  *statecache.Desired
	actual   *statecache.Actual
	registry *registration.Registry
	watcher  *watcher.Watcher
	rec      *reconciler.Reconciler
	host     *host.Host
	admin    *admin.Server
	metrics  *metrics.Metrics
}

// newDaemon builds every part of the daemon. What it opened before a failure is closed
// before the error returns.
func newDaemon(ctx context.Context, cfg Config, log *slog.Logger) (_ *daemon, err error) {
	d := &daemon{
		cfg:      cfg,
		log:      log,
		desired:  statecache.NewDesired(),
		actual:   statecache.NewActual(),
		registry: registration.NewRegistry(),
	}
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
	d.metrics, err = metrics.New(metrics.Config{
		Addr:                cfg.Metrics.Listen,
		Logger:              log.With("component", "metrics"),
		Version:             buildVersion(),
		Ready:               d.Ready,
		Plugins:             d.pluginSamples,
		Handlers:            d.handlerSamples,
		RegistrationRetries: func() uint64 { return d.rec.Counters().Retries },
		WatcherRelists:      func() uint64 { return d.watcher.Stats().Relists },
		WatcherErrors:       func() uint64 { return d.watcher.Stats().Errors },
	})
	if err != nil {
		return nil, err
	}
	reg, err := registrar.New(registrar.Config{
		Handlers:       d.registry,
		Actual:         d.actual,
		Logger:         log.With("component", "registrar"),
		DialTimeout:    time.Duration(cfg.Registration.DialTimeout),
		GetInfoTimeout: time.Duration(cfg.Registration.GetInfoTimeout),
		NotifyTimeout:  time.Duration(cfg.Registration.NotifyTimeout),
		HandlerTimeout: time.Duration(cfg.Handlers.CallTimeout),
		Observer:       observer{d.metrics},
	})
	if err != nil {
		return nil, err
	}
	d.admin, err = admin.New(admin.Config{
		Source:     d,
		SocketPath: cfg.adminSocket(),
		Logger:     log.With("component", "admin"),
		Version:    buildVersion(),
	})
	if err != nil {
		return nil, err
	}
	d.rec = reconciler.New(d.desired, d.actual, d.registry, reg, reconciler.Config{
		MaxConcurrent:  cfg.Reconciler.MaxConcurrent,
		InitialBackoff: time.Duration(cfg.Reconciler.InitialBackoff),
		MaxBackoff:     time.Duration(cfg.Reconciler.MaxBackoff),
		Resync:         time.Duration(cfg.Reconciler.Resync),
		Logger:         log.With("component", "reconciler"),
		OnStatusChange: func(st reconciler.SocketStatus) { d.admin.Publish(d.adminPlugin(st)) },
	})
	// The host comes last: it is the only part that holds resources before Run.
	d.host, err = host.New(ctx, host.Config{
		HandlerDir:    cfg.HandlerDir,
		CacheDir:      filepath.Join(cfg.StateDir, "cache"),
		Registry:      d.registry,
		CallTimeout:   time.Duration(cfg.Handlers.CallTimeout),
		MemoryLimit:   int64(cfg.Handlers.MemoryLimit),
		PoolSize:      cfg.Handlers.PoolSize,
		Grants:        cfg.grants(),
		AllowInsecure: cfg.Handlers.AllowInsecure,
		PluginCaller:  registrar.PluginCaller{},
		Logger:        log.With("component", "host"),
	})
	if err != nil {
		return nil, err
	}
	return d, nil
}

// run runs every part of the daemon until ctx is done or one of them fails, and returns when
// all of them have stopped.
func (d *daemon) run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return d.watcher.Run(gctx) })
	g.Go(func() error {
		// Registrations wait for the handlers present at start: a plugin found before its
		// handler is loaded would be told "no handler for your type", and some plugins (the
		// CSI node-driver-registrar) exit when told no. The watcher lists sockets meanwhile.
		select {
		case <-d.host.Ready():
		case <-gctx.Done():
			return nil
		}
		return d.rec.Run(gctx)
	})
	g.Go(func() error { return d.host.Run(gctx) })
	g.Go(func() error { return d.admin.Run(gctx) })
	g.Go(func() error { return d.metrics.Run(gctx) })
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
	return errors.Join(err, d.host.Close(closeCtx))
}

func runDaemon(ctx context.Context, cfg Config, log *slog.Logger) error {
	d, err := newDaemon(ctx, cfg, log)
	if err != nil {
		return err
	}
	log.Info("wasmhost starting", "version", buildVersion(), "socket_dir", cfg.SocketDir, "handler_dir", cfg.HandlerDir, "state_dir", cfg.StateDir)
	err = d.run(ctx)
	log.Info("wasmhost stopped")
	return err
}
