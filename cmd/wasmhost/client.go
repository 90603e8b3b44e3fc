package main

// The client commands: plugins, handlers, watch and status ask a running daemon over its admin
// API (package adminv1) on the admin unix socket, through package admin/client, and print
// what package adminview makes of the answers.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/wasmhost/wasmhost/admin/client"
	adminv1 "github.com/wasmhost/wasmhost/admin/v1"
	"github.com/wasmhost/wasmhost/internal/adminview"
)

// envAdminSocket overrides the default of --admin-socket for the client commands.
const envAdminSocket = "WASMHOST_ADMIN_SOCKET"

// clientCallTimeout bounds one list or status call.
const clientCallTimeout = 10 * time.Second

// newClientCmds returns the commands that talk to a running daemon.
func newClientCmds() []*cobra.Command {
	cmds := []*cobra.Command{newPluginsCmd(), newHandlersCmd(), newWatchCmd(), newStatusCmd()}
	for _, c := range cmds {
		hintOtherSocket(c)
	}
	return cmds
}

// socketHint is what a client command adds when no daemon listens on the socket it tried.
const socketHint = "; a daemon with another admin socket: pass --admin-socket PATH or set $" + envAdminSocket +
	" (a daemon listens on <its --state-dir>/admin.sock unless it was started with --admin-socket)"

// hintOtherSocket makes cmd and its subcommands that take --admin-socket say how to point
// them at another daemon's socket when none listens on the one they tried.
func hintOtherSocket(cmd *cobra.Command) {
	for _, c := range cmd.Commands() {
		hintOtherSocket(c)
	}
	run := cmd.RunE
	if run == nil || cmd.Flags().Lookup("admin-socket") == nil {
		return
	}
	cmd.RunE = func(c *cobra.Command, args []string) error {
		err := run(c, args)
		if errors.Is(err, client.ErrNotRunning) {
			return fmt.Errorf("%w%s", err, socketHint)
		}
		return err
	}
}

// clientOpts are the flags every client command has.
type clientOpts struct {
	socket string
	output string
}

func (o *clientOpts) bind(cmd *cobra.Command, formats ...string) {
	def := os.Getenv(envAdminSocket)
	if def == "" {
		def = client.DefaultSocketPath
	}
	cmd.Flags().StringVar(&o.socket, "admin-socket", def,
		"the running daemon's admin socket: <its --state-dir>/admin.sock unless it was started with --admin-socket (default from $"+envAdminSocket+" when set)")
	cmd.PreRunE = func(*cobra.Command, []string) error {
		if o.socket == "" {
			return errors.New("--admin-socket is empty")
		}
		return nil
	}
	bindOutput(cmd, &o.output, formats...)
}

func newPluginsCmd() *cobra.Command {
	var o clientOpts
	cmd := &cobra.Command{
		Use:   "plugins",
		Short: "List the plugin sockets a running daemon knows, and their state",
		Long: `List every plugin socket the running wasmhost daemon knows, whatever its state:

  registered           the plugin's handler registered it and the plugin was notified
  pending              seen; registration has not finished yet
  failing              the last attempt failed (LAST-ERROR); retried with backoff
  waiting-for-handler  no handler is loaded for the plugin's type; it is registered as
                       soon as one is

When plugins are forwarded to the kubelet (forward.types), KUBELET says what the kubelet
made of the plugin its handler admitted: pending (not answered yet), registered, refused:
and the kubelet's own reason, or timeout (it did not answer; retried with backoff); - for
a plugin that is not forwarded.

SOCKET is relative to the directory the sockets have in common (-o wide shows the full
path); AGE is the time since the plugin entered its state. -o wide adds the endpoint,
attempts, next retry, the handler's file and SHA-256, and what of the plugin's published
keys did not reach the cluster as asked (NOT-PUBLISHED: too large, over its type's share, not
a label); -o json and -o yaml print everything.`,
		Example: `  wasmhost plugins
  wasmhost plugins -o wide
  wasmhost plugins -o json | jq -r '.[] | select(.state == "failing") | .socket'
  wasmhost plugins -o yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			resp, err := callAdmin(cmd, o.socket, func(ctx context.Context, c adminv1.AdminClient) (*adminv1.ListPluginsResponse, error) {
				ps, err := client.ListAllPlugins(ctx, c)
				return &adminv1.ListPluginsResponse{Plugins: ps}, err
			})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			switch o.output {
			case "json", "yaml":
				return writeStructured(out, o.output, adminview.Plugins(resp.Plugins))
			default:
				if len(resp.Plugins) == 0 {
					fmt.Fprintln(cmd.ErrOrStderr(), "No plugin sockets found.")
					return nil
				}
				return adminview.WritePlugins(out, resp.Plugins, o.output == "wide", adminview.UseColor(out), time.Now())
			}
		},
	}
	o.bind(cmd, "table", "wide", "json", "yaml")
	cmd.AddCommand(newCaptureCmd())
	return cmd
}

func newHandlersCmd() *cobra.Command {
	var o clientOpts
	cmd := &cobra.Command{
		Use:   "handlers",
		Short: "List the handlers a running daemon has loaded",
		Long: `List the handlers the running wasmhost daemon has loaded, one per module file (built-in
handlers have none), with the plugin types each serves and what its calls did since it
was loaded: CALLS, FAILURES, and of the failures TRAPS (the module crashed; the instance
was thrown away) and TIMEOUTS (the call ran out of time). NAME and VERSION are the module
manifest's. AGE is the time since it was loaded. -o wide adds the file's full path,
SHA-256 and size, and the capabilities the handler was granted; -o json and -o yaml print
everything.

A plugin type served by an older revision than its file holds (a rollback: wasmhost
handlers rollback, or an automatic one) is marked "(pinned)" in TYPES and explained below
the table, as is a type's shadow candidate (wasmhost handlers shadow).`,
		Example: `  wasmhost handlers
  wasmhost handlers -o json | jq '.[] | {file, traps, lastError}'
  wasmhost handlers history CSIPlugin
  wasmhost handlers rollback CSIPlugin`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			resp, err := callAdmin(cmd, o.socket, func(ctx context.Context, c adminv1.AdminClient) (*adminv1.ListHandlersResponse, error) {
				hs, err := client.ListAllHandlers(ctx, c)
				return &adminv1.ListHandlersResponse{Handlers: hs}, err
			})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			switch o.output {
			case "json", "yaml":
				return writeStructured(out, o.output, adminview.Handlers(resp.Handlers))
			default:
				if len(resp.Handlers) == 0 {
					fmt.Fprintln(cmd.ErrOrStderr(), "No handlers loaded.")
					return nil
				}
				return adminview.WriteHandlers(out, resp.Handlers, o.output == "wide", time.Now())
			}
		},
	}
	o.bind(cmd, "table", "wide", "json", "yaml")
	cmd.AddCommand(newRevisionCmds()...)
	return cmd
}

func newWatchCmd() *cobra.Command {
	var o clientOpts
	cmd := &cobra.Command{
		Use:   "watch",
		Short: "Print plugin changes as they happen",
		Long: `Print the plugins the running daemon knows, then every change as it happens, until
interrupted (Ctrl-C).

Each line is an event: ADDED (a plugin socket appeared; first, one for each plugin that
exists), SYNCED (the list so far is complete), MODIFIED (a plugin changed state, or
failed again), DELETED (its socket is gone). RESET means this client fell behind and
missed events: forget what was printed so far; a fresh list follows.

-o json prints one JSON object per line, for jq or a program; -o yaml one YAML document
per event, each starting with ---.`,
		Example: `  wasmhost watch
  wasmhost watch -o json | jq -c 'select(.type == "MODIFIED") | .plugin | {socket, state}'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := client.Dial(o.socket)
			if err != nil {
				return err
			}
			defer c.Close()
			ctx := cmd.Context()
			stream, err := c.WatchPlugins(ctx, &adminv1.WatchPluginsRequest{})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			color := adminview.UseColor(out)
			if o.output == "table" {
				fmt.Fprintf(out, "%-12s  %-8s  %-19s  %s\n", "TIME", "EVENT", "STATE", "SOCKET  TYPE/NAME  LAST-ERROR")
			}
			listed := 0
			for {
				ev, err := stream.Recv()
				if err != nil {
					if ctx.Err() != nil || errors.Is(err, io.EOF) {
						return nil // interrupted, or the daemon ended the stream cleanly
					}
					if status.Code(err) == codes.Unavailable && strings.Contains(err.Error(), "shutting down") {
						return fmt.Errorf("the daemon at %s is shutting down", o.socket)
					}
					return err
				}
				if o.output != "table" {
					if err := writeStreamed(out, o.output, adminview.NewEvent(ev)); err != nil {
						return err
					}
					continue
				}
				switch ev.Type {
				case adminv1.EventType_EVENT_TYPE_ADDED:
					listed++
				case adminv1.EventType_EVENT_TYPE_RESET:
					listed = 0
				}
				adminview.WriteEvent(out, ev, listed, color)
			}
		},
	}
	o.bind(cmd, "table", "json", "yaml")
	return cmd
}

func newStatusCmd() *cobra.Command {
	var o clientOpts
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show whether a running daemon is ready, with its version, uptime and counts",
		Long: `Show the running daemon's version and uptime, whether it is ready (it has listed the
socket directory once and loaded the handlers it found at start-up), and how many plugin
sockets it knows by state, handlers it runs and clients watching it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := callAdmin(cmd, o.socket, func(ctx context.Context, c adminv1.AdminClient) (*adminv1.Status, error) {
				return c.GetStatus(ctx, &adminv1.GetStatusRequest{})
			})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if o.output != "text" {
				return writeStructured(out, o.output, adminview.NewStatus(st))
			}
			adminview.WriteStatus(out, st)
			return nil
		},
	}
	o.bind(cmd, "text", "json", "yaml")
	return cmd
}

// callAdmin makes one unary call to the daemon on socket within clientCallTimeout; its error
// says what is wrong and what to do (package admin/client explains it).
func callAdmin[T any](cmd *cobra.Command, socket string, call func(context.Context, adminv1.AdminClient) (T, error)) (T, error) {
	var zero T
	c, err := client.Dial(socket)
	if err != nil {
		return zero, err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(cmd.Context(), clientCallTimeout)
	defer cancel()
	resp, err := call(ctx, c)
	if err != nil {
		return zero, err
	}
	return resp, nil
}
