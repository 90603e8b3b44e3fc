package main

// wasmhost plugins capture: the sessions a running daemon keeps of the last registrations
// (handlers.capture), written as session files for `wasmhost handler test --replay`.

import (
	"context"
	"errors"
	"fmt"
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
			taken := map[string]bool{}
			for _, s := range resp.GetSessions() {
				// What the daemon sent is checked as any session file is read.
				if _, err := session.Unmarshal(s.GetYaml()); err != nil {
					return fmt.Errorf("the session of %s from the daemon: %w", safeText(s.GetSocket()), err)
				}
				base := fileSafe(s.GetPluginType()) + "-" + fileSafe(s.GetPluginName())
				name := base + ".yaml"
				for i := 2; taken[name]; i++ {
					name = fmt.Sprintf("%s-%d.yaml", base, i)
				}
				taken[name] = true
				path := filepath.Join(dir, name)
				if err := os.WriteFile(path, s.GetYaml(), 0o600); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s\t%s\n", path, safeText(s.GetSocket()))
			}
			if len(resp.GetSessions()) == 0 && all {
				fmt.Fprintln(cmd.ErrOrStderr(), "No session kept: no plugin registered since the daemon started, or capture is opted out for every type.")
			}
			if m := resp.GetMissing(); len(m) > 0 {
				return fmt.Errorf("no session kept for %s (none registered since the daemon started, or its type opted out of capture)", safeText(strings.Join(m, ", ")))
			}
			return nil
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

// fileSafe makes s a file name: what is not a letter, digit, '.', '-' or '_' becomes '_'.
func fileSafe(s string) string {
	s = strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '-', r == '_':
			return r
		}
		return '_'
	}, s)
	if s == "" || s[0] == '.' {
		s = "_" + s
	}
	return s
}
