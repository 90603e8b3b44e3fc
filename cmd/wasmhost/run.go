package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/wasmhost/wasmhost/internal/config"
	"github.com/wasmhost/wasmhost/internal/daemon"
)

func newRunCmd() *cobra.Command {
	cfg := config.Default()
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
			var warnings []string
			if configFile != "" {
				// The file goes under the flags: re-apply the flags that were set. Its
				// mistakes are reported with the values' below, in one list.
				fileCfg := config.Default()
				var loadErr error
				warnings, loadErr = config.Load(configFile, &fileCfg)
				if err := overlayFlags(cmd, &fileCfg); err != nil {
					return err
				}
				if err := config.Join(configFile, loadErr, fileCfg.Validate()); err != nil {
					return err
				}
				cfg = fileCfg
			} else if err := cfg.Validate(); err != nil {
				return fmt.Errorf("invalid configuration:\n%w", err)
			}
			if err := cfg.AbsolutePaths(); err != nil {
				return err
			}
			log, err := newLogger(os.Stderr, cfg.Log.Format, cfg.Log.Level)
			if err != nil {
				return err
			}
			for _, w := range warnings {
				log.Warn("config: "+w, "config", configFile)
			}
			tuneGC()
			if limit, from := memoryLimit(int64(cfg.MemoryLimit), os.Getenv("GOMEMLIMIT"), cgroupMemoryMax(), int64(cfg.Handlers.Limits.InstanceMemory)); limit > 0 {
				debug.SetMemoryLimit(limit)
				log.Info("soft memory limit set", "bytes", limit, "from", from)
			}
			return daemon.RunWithShutdownDeadline(cmd.Context(), cfg, log, buildVersion())
		},
	}
	bindFlags(cmd, &cfg)
	cmd.Flags().StringVar(&configFile, "config", "", "YAML config file (flags override it); see docs/configuration.md")
	return cmd
}

// bindFlags binds the flags that override the config file onto cfg.
func bindFlags(cmd *cobra.Command, cfg *config.Config) {
	f := cmd.Flags()
	f.StringVar(&cfg.SocketDir, "socket-dir", cfg.SocketDir, "directory where plugins create their registration sockets")
	f.StringVar(&cfg.HandlerDir, "handler-dir", cfg.HandlerDir, "directory of .wasm handlers, reloaded as it changes")
	f.StringVar(&cfg.StateDir, "state-dir", cfg.StateDir, "directory for the compile cache and the admin socket")
	f.StringVar(&cfg.Log.Format, "log-format", cfg.Log.Format, "log format: auto (coloured text on a terminal, JSON otherwise), text or json")
	f.StringVar(&cfg.Log.Level, "log-level", cfg.Log.Level, "log level: debug, info, warn or error")
	f.Var(&cfg.ShutdownTimeout, "shutdown-timeout", "hard deadline of a graceful shutdown")
	f.Var(&cfg.Handlers.CallTimeout, "handler-timeout", "deadline of every handler call")
	f.Var(&cfg.Handlers.MemoryLimit, "handler-memory-limit", "memory ceiling of each handler instance, e.g. 64Mi or 1Gi")
	f.BoolVar(&cfg.Handlers.AllowInsecure, "allow-insecure-handlers", cfg.Handlers.AllowInsecure, "load handler files and directories that others than their owner may write")
	f.StringVar(&cfg.Admin.Socket, "admin-socket", cfg.Admin.Socket, "admin API socket, where wasmhost plugins, handlers, watch and status connect (default <state-dir>/admin.sock)")
	f.StringVar(&cfg.Metrics.Listen, "metrics-listen", cfg.Metrics.Listen, "metrics and health endpoints: off, unix:/path or host:port")
}

// overlayFlags copies the flags the user set onto cfg, which was read from the config file.
func overlayFlags(cmd *cobra.Command, cfg *config.Config) error {
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
// docs/benchmarks-history.md, "GOGC 50").
const daemonGCPercent = 50

// tuneGC sets the daemon's GC target, leaving an operator's GOGC alone.
// memoryLimit returns the soft memory limit to set and where it comes from: the config's
// memoryLimit, else 90% of the cgroup's memory.max (cgroupMax, 0 when there is none) less
// instanceMemory (handlers.limits.instanceMemory), since the handlers' linear memory is mapped
// outside the Go heap that the limit governs, but counts against the same cgroup; never less
// than a quarter of those 90%, so that a small cgroup with a large instanceMemory still gets a
// limit. 0 when GOMEMLIMIT is set in the environment (Go applied it already) or there is
// nothing to go by.
func memoryLimit(configured int64, env string, cgroupMax, instanceMemory int64) (int64, string) {
	switch {
	case env != "":
		return 0, ""
	case configured > 0:
		return configured, "memoryLimit"
	case cgroupMax > 0:
		budget := cgroupMax / 10 * 9
		return max(budget-instanceMemory, budget/4), "cgroup memory.max less handlers.limits.instanceMemory"
	}
	return 0, ""
}

// cgroupMemoryMax reads the memory.max of the daemon's cgroup (v2), 0 when there is none or
// it is "max".
func cgroupMemoryMax() int64 {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "0::"); ok {
			v, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", rest, "memory.max"))
			if err != nil {
				return 0
			}
			n, err := strconv.ParseInt(strings.TrimSpace(string(v)), 10, 64)
			if err != nil {
				return 0 // "max"
			}
			return n
		}
	}
	return 0
}

func tuneGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(daemonGCPercent)
	}
}
