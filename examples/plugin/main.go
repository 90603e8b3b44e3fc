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
//
// With --csi-node-id it also plays a CSI driver, for the daemon's CSI handler
// (handlers-wasm/csi): it answers CSI's NodeGetInfo on its socket, which the handler calls
// when it registers the driver (see csi.go):
//
//	go run ./examples/plugin --socket-dir ./run/plugins_registry --type CSIPlugin --name csi.example.com \
//	    --versions 1.5.0 --csi-node-id node-1 --csi-max-volumes 16 --csi-topology topology.example.com/zone=z1
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
	csi       *csiNode // when not nil, CSI NodeGetInfo is served on the socket with this answer
}

func main() {
	cfg, err := parseArgs(os.Args[1:])
	switch {
	case errors.Is(err, flag.ErrHelp): // -h: the usage is printed
		return
	case errors.Is(err, errFlags): // the flag package has printed the error and the usage
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
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

// errFlags: the command line does not parse; the flag package has said why.
var errFlags = errors.New("invalid command line")

// parseArgs turns the command line into a config.
func parseArgs(args []string) (config, error) {
	var cfg config
	var versions, topology, nodeID string
	var maxVolumes int64
	flags := flag.NewFlagSet("plugin", flag.ContinueOnError)
	flags.StringVar(&cfg.socketDir, "socket-dir", "./run/plugins_registry", "directory the daemon watches for plugin sockets")
	flags.StringVar(&cfg.pluginTyp, "type", "example.wasmhost.dev", "plugin type (selects the daemon's handler; example.wasmhost.dev is served by handlers-wasm/example)")
	flags.StringVar(&cfg.name, "name", "demo-1", "plugin name; the socket is <socket-dir>/<name>.sock")
	flags.StringVar(&cfg.endpoint, "endpoint", "", "endpoint of the plugin's own API (default: the registration socket)")
	flags.StringVar(&versions, "versions", "v1", "comma-separated supported versions")
	flags.StringVar(&nodeID, "csi-node-id", "", "serve CSI NodeGetInfo on the socket, answering this node_id (for --type CSIPlugin)")
	flags.Int64Var(&maxVolumes, "csi-max-volumes", 0, "NodeGetInfo's max_volumes_per_node (0: no limit); needs --csi-node-id")
	flags.StringVar(&topology, "csi-topology", "", "NodeGetInfo's accessible topology, key=value,key=value; needs --csi-node-id")
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return config{}, err
		}
		return config{}, fmt.Errorf("%w: %v", errFlags, err)
	}
	if flags.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments %q", flags.Args())
	}
	for v := range strings.SplitSeq(versions, ",") {
		if v = strings.TrimSpace(v); v != "" {
			cfg.versions = append(cfg.versions, v)
		}
	}

	topo, err := parseTopology(topology)
	switch {
	case err != nil:
		return config{}, err
	case nodeID == "" && (maxVolumes != 0 || topo != nil):
		return config{}, errors.New("--csi-max-volumes and --csi-topology need --csi-node-id")
	case maxVolumes < 0:
		return config{}, fmt.Errorf("invalid --csi-max-volumes %d: CSI allows 0 (no limit) or more", maxVolumes)
	case nodeID != "":
		cfg.csi = &csiNode{nodeID: nodeID, maxVolumes: maxVolumes, topology: topo}
	}
	return cfg, nil
}

// run serves the registration API (and CSI NodeGetInfo, when cfg.csi is set) until ctx is
// cancelled. ready, when not nil, is called
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

	var opts []grpc.ServerOption
	if cfg.csi != nil {
		// The CSI call goes to the server's unknown-service handler, with a codec that passes
		// its hand-encoded messages through (csi.go).
		opts = append(opts, grpc.UnknownServiceHandler(cfg.csi.serve), grpc.ForceServerCodecV2(newRawCodec()))
		log.Info("serving CSI NodeGetInfo", "node_id", cfg.csi.nodeID,
			"max_volumes_per_node", cfg.csi.maxVolumes, "topology", formatTopology(cfg.csi.topology))
		if cfg.endpoint != "" && cfg.endpoint != socket && cfg.endpoint != "unix://"+socket {
			log.Warn("--endpoint is not this socket: the daemon's CSI handler calls NodeGetInfo there, and this plugin does not serve it there", "endpoint", cfg.endpoint)
		}
	}
	srv := grpc.NewServer(opts...)
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
