// Command plugin is a minimal node plugin that registers itself with wasmhost (or with the
// kubelet: the protocol is the same). Read it as documentation for plugin authors.
//
//	go run ./examples/plugin --socket-dir ./run/plugins_registry --type example.wasmhost.dev --name demo-1 --versions v1
//
// A plugin registers by serving the kubelet's plugin-registration API,
// k8s.io/kubelet/pkg/apis/pluginregistration/v1, on a unix socket in the directory the daemon
// watches. The daemon notices the socket, calls GetInfo to learn the plugin's type, name,
// endpoint and supported versions, lets the handler for that type decide, and then calls
// NotifyRegistrationStatus to tell the plugin whether it is registered. That is the whole
// protocol: there is nothing to call, and no daemon address to know.
//
// Things worth copying:
//   - Remove a stale socket before listening: a plugin killed with SIGKILL leaves its socket
//     file behind, and listening on an existing path fails.
//   - Keep serving after NotifyRegistrationStatus(false): the reason is logged, and the daemon
//     tries again later (for example when a handler for the type is installed). Exiting
//     there, as some plugins do, leaves a dead socket until something restarts the plugin.
//   - Answer NotifyRegistrationStatus at once; the daemon waits for the answer with a deadline.
//   - Remove the socket on a clean exit, so the daemon deregisters the plugin at once.
//   - The daemon may restart and register the plugin again: a second Notify is normal.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	regapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// config is what the flags say.
type config struct {
	socketDir string   // the directory the daemon watches
	pluginTyp string   // selects the daemon's handler, e.g. CSIPlugin, DRAPlugin, or your own
	name      string   // unique among plugins of the same type
	endpoint  string   // where the plugin serves its own API; empty means this socket
	versions  []string // versions of the plugin's own API that it supports
}

func main() {
	var cfg config
	var versions string
	flag.StringVar(&cfg.socketDir, "socket-dir", "./run/plugins_registry", "directory the daemon watches for plugin sockets")
	flag.StringVar(&cfg.pluginTyp, "type", "example.wasmhost.dev", "plugin type (selects the daemon's handler; example.wasmhost.dev is served by handlers-wasm/example)")
	flag.StringVar(&cfg.name, "name", "demo-1", "plugin name; the socket is <socket-dir>/<name>.sock")
	flag.StringVar(&cfg.endpoint, "endpoint", "", "endpoint of the plugin's own API (default: the registration socket)")
	flag.StringVar(&versions, "versions", "v1", "comma-separated supported versions")
	flag.Parse()
	for v := range strings.SplitSeq(versions, ",") {
		if v = strings.TrimSpace(v); v != "" {
			cfg.versions = append(cfg.versions, v)
		}
	}

	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	// SIGINT (Ctrl-C) and SIGTERM (what a service manager or the container runtime sends)
	// cancel ctx; run then stops serving and removes the socket.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, log, nil); err != nil {
		log.Error("plugin failed", "error", err)
		os.Exit(1)
	}
}

// run serves the registration API until ctx is cancelled. ready, when not nil, is called
// with the socket path once the socket accepts connections.
func run(ctx context.Context, cfg config, log *slog.Logger, ready func(socket string)) error {
	if cfg.name == "" || strings.ContainsRune(cfg.name, '/') {
		return fmt.Errorf("invalid --name %q: it names a file in --socket-dir", cfg.name)
	}
	socket := filepath.Join(cfg.socketDir, cfg.name+".sock")
	log = log.With("plugin_type", cfg.pluginTyp, "plugin", cfg.name, "socket", socket)

	if err := os.MkdirAll(cfg.socketDir, 0o755); err != nil {
		return err
	}
	if err := removeStaleSocket(socket); err != nil {
		return err
	}
	// net.Listen calls bind() and listen() back to back. The socket file appears at bind(),
	// so a daemon can see it a moment before it accepts connections; wasmhost retries a
	// refused connection to a new socket promptly.
	ln, err := net.Listen("unix", socket)
	if err != nil {
		return err
	}
	// Only the daemon (same user, usually root) needs to connect. The CSI
	// node-driver-registrar uses 0700 on its registration socket too.
	if err := os.Chmod(socket, 0o700); err != nil {
		ln.Close()
		return err
	}

	srv := grpc.NewServer()
	regapi.RegisterRegistrationServer(srv, &registrationServer{cfg: cfg, log: log})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Info("plugin serving; waiting for the daemon to register it")
	if ready != nil {
		ready(socket)
	}

	select {
	case err := <-served: // Serve failed on its own
		os.Remove(socket)
		return err
	case <-ctx.Done():
	}
	// Stop gracefully (let a registration in progress finish), but not forever.
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		srv.Stop()
		<-stopped
	}
	<-served
	// The listener removed its socket file when it closed; make sure, without complaint if
	// it is already gone. The daemon sees the removal and deregisters the plugin.
	if err := os.Remove(socket); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	log.Info("plugin stopped")
	return nil
}

// removeStaleSocket removes a socket left at path by an earlier run. Anything else at that
// path is an error: better to refuse than to delete someone's file.
func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("%s exists and is not a socket; not removing it", path)
	}
	return os.Remove(path)
}

// registrationServer implements the two calls of the registration API.
type registrationServer struct {
	regapi.UnimplementedRegistrationServer
	cfg config
	log *slog.Logger
}

// GetInfo tells the daemon who this plugin is. The daemon calls it first, every time it
// registers the plugin.
func (s *registrationServer) GetInfo(context.Context, *regapi.InfoRequest) (*regapi.PluginInfo, error) {
	return &regapi.PluginInfo{
		Type:              s.cfg.pluginTyp,
		Name:              s.cfg.name,
		Endpoint:          s.cfg.endpoint,
		SupportedVersions: s.cfg.versions,
	}, nil
}

// NotifyRegistrationStatus tells the plugin the outcome. It answers at once and keeps
// serving either way.
func (s *registrationServer) NotifyRegistrationStatus(_ context.Context, st *regapi.RegistrationStatus) (*regapi.RegistrationStatusResponse, error) {
	if st.GetPluginRegistered() {
		s.log.Info("registered by the daemon")
	} else {
		s.log.Warn("registration refused; still serving, the daemon will try again", "reason", st.GetError())
	}
	return &regapi.RegistrationStatusResponse{}, nil
}
