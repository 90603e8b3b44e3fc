// Command wasmhost is a node agent that discovers kubelet-style plugins by the unix sockets
// they create, speaks the kubelet's plugin-registration protocol to them, and runs the
// per-type handlers as sandboxed WebAssembly modules.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=…"; otherwise the module's
// build information is used.
var version = ""

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCmd().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "wasmhost:", err)
		os.Exit(exitCode(err))
	}
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "wasmhost",
		Short: "Register node plugins through sandboxed WebAssembly handlers",
		Long: `wasmhost watches a directory for the unix sockets of node plugins (CSI drivers, DRA
drivers, device plugins, your own types), speaks the kubelet's plugin-registration
protocol to them, and runs the handler for each plugin type as a sandboxed
WebAssembly module loaded from a directory: drop a .wasm file in, no rebuild.

wasmhost run is the daemon. The commands plugins, handlers, watch and status talk to a
running daemon over its admin socket, <state-dir>/admin.sock (/var/lib/wasmhost/admin.sock by
default); point them at another with --admin-socket or $WASMHOST_ADMIN_SOCKET.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newRunCmd(), newVersionCmd(), newConfigCmd(), newHandlerCmd(), newClusterCmd())
	root.AddCommand(newClientCmds()...)
	return root
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of wasmhost",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintln(cmd.OutOrStdout(), "wasmhost", buildVersion())
			return nil
		},
	}
}

func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		v := bi.Main.Version
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				v += " " + s.Value[:12]
			}
		}
		return v + " (" + bi.GoVersion + ")"
	}
	return "(devel)"
}
