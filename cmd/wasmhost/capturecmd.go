package main

// wasmhost plugins capture: the sessions a running daemon keeps of the last registrations
// (handlers.capture), written as session files for `wasmhost handler test --replay`.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/wasmhost/wasmhost/admin/client"
	adminv1 "github.com/wasmhost/wasmhost/admin/v1"
	"github.com/wasmhost/wasmhost/internal/session"
)

func newCaptureCmd() *cobra.Command {
	var socket, dir string
	var all bool
	cmd := &cobra.Command{
		Use:   "capture [NAME...|--all] -o DIR",
		Short: "Write what handlers saw when plugins last registered, as session files",
		Long: `Ask the running daemon for what the handler saw when each plugin named last registered, and
write it to DIR as one session file per plugin (docs/sessions.md): the plugin's GetInfo
answer, each handler call (validate, register) with what it saw of the key-value store, its
plugin_call requests and answers and kv_* reads and writes, and its result (status,
reason, published facts).

A NAME is a plugin name, a socket path or a plugin type. The daemon keeps the last
handlers.capture.sessions registrations per type, with what handlers.capture.redact
matches replaced by '*'; a type with handlers.types.<T>.capture: false is never captured.

Replay a session against a module with wasmhost handler test --replay FILE.`,
		Example: `  wasmhost plugins capture csi.example.com -o sessions/
  wasmhost plugins capture --all -o sessions/
  wasmhost handler test new-csi.wasm --replay sessions/CSIPlugin-csi.example.com.yaml`,
		RunE: func(cmd *cobra.Command, names []string) error {
			if socket == "" {
				return errors.New("--admin-socket is empty")
			}
			if dir == "" {
				return errors.New("-o DIR is required: the directory to write the session files to")
			}
			if all == (len(names) > 0) {
				return errors.New("name the plugins to capture, or give --all")
			}
			resp, err := callAdmin(cmd, socket, func(ctx context.Context, c adminv1.AdminClient) (*adminv1.CaptureSessionsResponse, error) {
				return c.CaptureSessions(ctx, &adminv1.CaptureSessionsRequest{Names: names})
			})
			if err != nil {
				return err
			}
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return err
			}
			failed := writeSessions(cmd.OutOrStdout(), cmd.ErrOrStderr(), dir, resp.GetSessions())
			if len(resp.GetSessions()) == 0 && all {
				fmt.Fprintln(cmd.ErrOrStderr(), "No session kept: no plugin registered since the daemon started, or capture is opted out for every type.")
			}
			var errs []error
			if failed > 0 {
				errs = append(errs, fmt.Errorf("%d of the %d sessions were not written (named above)", failed, len(resp.GetSessions())))
			}
			if m := resp.GetMissing(); len(m) > 0 {
				errs = append(errs, fmt.Errorf("no session kept for %s (none registered since the daemon started, or its type opted out of capture)", safeText(strings.Join(m, ", "))))
			}
			return errors.Join(errs...)
		},
	}
	def := os.Getenv(envAdminSocket)
	if def == "" {
		def = client.DefaultSocketPath
	}
	cmd.Flags().StringVar(&socket, "admin-socket", def, "the daemon's admin socket (also from $"+envAdminSocket+")")
	cmd.Flags().StringVarP(&dir, "output", "o", "", "the directory to write the session files to (made if missing)")
	cmd.Flags().BoolVar(&all, "all", false, "every session the daemon keeps")
	return cmd
}

// writeSessions writes each session to its own file in dir, named by session.FileNamer (a
// name too long for the file system is shortened, and stays unique), and prints each path
// written to out. A session it cannot write (the daemon sent one that does not read, or the
// file system refused the file) is named on errOut, and the others are written all the same;
// it returns how many were not.
func writeSessions(out, errOut io.Writer, dir string, sessions []*adminv1.CapturedSession) (failed int) {
	var names session.FileNamer
	for _, s := range sessions {
		who := safeText(s.GetPluginType() + " " + s.GetPluginName() + " (" + s.GetSocket() + ")")
		// What the daemon sent is checked as any session file is read.
		parsed, err := session.Unmarshal(s.GetYaml())
		if err != nil {
			fmt.Fprintf(errOut, "not written: the session of %s from the daemon: %s\n", who, safeText(err.Error()))
			failed++
			continue
		}
		path := filepath.Join(dir, names.Name(s.GetPluginType(), s.GetPluginName()))
		if err := os.WriteFile(path, s.GetYaml(), 0o600); err != nil {
			fmt.Fprintf(errOut, "not written: the session of %s: %s\n", who, safeText(err.Error()))
			failed++
			continue
		}
		fmt.Fprintf(out, "%s\t%s\n", path, safeText(s.GetSocket()))
		if t := parsed.Truncated; t != nil {
			fmt.Fprintf(errOut, "%s: truncated at the capture's bounds, %d host calls (%d bytes) left out: a replay refuses it (docs/sessions.md, \"Bounds\")\n",
				path, t.Exchanges, t.Bytes)
		}
	}
	return failed
}
