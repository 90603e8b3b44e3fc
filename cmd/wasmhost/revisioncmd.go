package main

// The revision commands under `wasmhost handlers`: history, rollback, unpin and shadow ask a
// running daemon over its admin API which revisions of a plugin type's handler it keeps, and
// choose the one that serves and the candidate that shadows it; pull has it try its handler
// sources now.

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/wasmhost/wasmhost/admin/client"
	adminv1 "github.com/wasmhost/wasmhost/admin/v1"
	"github.com/wasmhost/wasmhost/internal/adminview"
)

// newRevisionCmds are the subcommands of `wasmhost handlers`.
func newRevisionCmds() []*cobra.Command {
	return []*cobra.Command{newHistoryCmd(), newRollbackCmd(), newUnpinCmd(), newShadowCmd(), newPullCmd()}
}

func newHistoryCmd() *cobra.Command {
	var o clientOpts
	cmd := &cobra.Command{
		Use:   "history TYPE",
		Short: "List the revisions the daemon keeps of the handler of a plugin type",
		Long: `List the revisions the running daemon keeps of the handler of plugin type TYPE (the last
few it served, handlers.revisions.keep, by SHA-256), newest first: when each was first loaded,
its manifest's name and version, and its calls while it served. STATE says which serves now,
which the handler file holds, and which were rolled back automatically (and why). A rollback
pin and a shadow candidate are shown below the table.`,
		Example: `  wasmhost handlers history CSIPlugin
  wasmhost handlers history CSIPlugin -o json | jq -r '.revisions[0].sha256'`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			resp, err := callAdmin(cmd, o.socket, func(ctx context.Context, c adminv1.AdminClient) (*adminv1.ListRevisionsResponse, error) {
				return c.ListRevisions(ctx, &adminv1.ListRevisionsRequest{PluginType: args[0]})
			})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if o.output == "json" || o.output == "yaml" {
				return writeStructured(out, o.output, adminview.NewHistory(resp))
			}
			return adminview.WriteHistory(out, resp, time.Now())
		},
	}
	o.bind(cmd, "table", "json", "yaml")
	return cmd
}

func newRollbackCmd() *cobra.Command {
	var o clientOpts
	cmd := &cobra.Command{
		Use:   "rollback TYPE [SHA256]",
		Short: "Serve a plugin type with an older revision of its handler",
		Long: `Serve plugin type TYPE with an older revision of its handler: the good one before the
revision serving now, or the one named by its SHA-256 (a prefix of at least 6 digits will do;
see wasmhost handlers history TYPE). Registered plugins stay registered; the next calls of the
type go to that revision.

The handler file still holds the newer bytes: the type is pinned to the older revision until
the file changes again (its new revision then serves, and the pin is gone) or the pin is
cleared with wasmhost handlers unpin TYPE. The pin outlives a restart of the daemon.`,
		Example: `  wasmhost handlers rollback CSIPlugin
  wasmhost handlers rollback CSIPlugin 9f86d081884c`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &adminv1.RollbackRequest{PluginType: args[0]}
			if len(args) == 2 {
				req.Sha256 = strings.TrimPrefix(args[1], "sha256:")
			}
			resp, err := callAdmin(cmd, o.socket, func(ctx context.Context, c adminv1.AdminClient) (*adminv1.RollbackResponse, error) {
				return c.Rollback(ctx, req)
			})
			if err != nil {
				return err
			}
			adminview.SafeMessage(resp)
			r := resp.GetRevision()
			fmt.Fprintf(cmd.OutOrStdout(), "%s: served by revision %s (%s) until its handler file changes again; undo with: wasmhost handlers unpin %s\n",
				args[0], adminview.ShortHash(r.GetSha256()), adminview.NameVersion(r.GetName(), r.GetVersion()), args[0])
			return nil
		},
	}
	o.bind(cmd, "text")
	return cmd
}

func newUnpinCmd() *cobra.Command {
	var o clientOpts
	cmd := &cobra.Command{
		Use:   "unpin TYPE",
		Short: "Clear a rollback pin: the revision the handler file holds serves again",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := callAdmin(cmd, o.socket, func(ctx context.Context, c adminv1.AdminClient) (*adminv1.ClearPinResponse, error) {
				return c.ClearPin(ctx, &adminv1.ClearPinRequest{PluginType: args[0]})
			}); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: the revision its handler file holds serves again\n", args[0])
			return nil
		},
	}
	o.bind(cmd, "text")
	return cmd
}

func newShadowCmd() *cobra.Command {
	var (
		o       clientOpts
		clearIt bool
	)
	cmd := &cobra.Command{
		Use:   "shadow TYPE FILE|SHA256",
		Short: "Run a candidate handler's Validate beside the serving one, for comparison",
		Long: `Name a candidate for plugin type TYPE: a handler file (on the daemon's host; read with the
same checks as the handler directory's), or a revision the daemon keeps, by SHA-256 (a prefix
of at least 6 digits with "sha256:"). On every registration of a plugin of the type, the
candidate's Validate runs beside the serving one, in the same sandbox, in the background: the
plugin never waits for it and its decision has no effect (it may read the type's key-value
store, not change it, and may not call the plugin). Disagreements are counted (wasmhost
handlers, the metric wasmhost_handler_shadow_disagreements_total) and logged with both
decisions. Register and Deregister stay with the serving revision. --clear ends it.`,
		Example: `  wasmhost handlers shadow CSIPlugin /tmp/csi-next.wasm
  wasmhost handlers shadow CSIPlugin sha256:9f86d081884c
  wasmhost handlers shadow CSIPlugin --clear`,
		Args: func(cmd *cobra.Command, args []string) error {
			if clearIt {
				return cobra.ExactArgs(1)(cmd, args)
			}
			return cobra.ExactArgs(2)(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			req := &adminv1.SetShadowRequest{PluginType: args[0]}
			if !clearIt {
				req.Candidate = args[1]
				if isHexDigest(req.Candidate) {
					req.Candidate = "sha256:" + req.Candidate
				} else if !strings.HasPrefix(req.Candidate, "sha256:") {
					abs, err := filepath.Abs(req.Candidate)
					if err != nil {
						return err
					}
					req.Candidate = abs
				}
			}
			resp, err := callAdmin(cmd, o.socket, func(ctx context.Context, c adminv1.AdminClient) (*adminv1.SetShadowResponse, error) {
				return c.SetShadow(ctx, req)
			})
			if err != nil {
				return err
			}
			adminview.SafeMessage(resp)
			if clearIt {
				fmt.Fprintf(cmd.OutOrStdout(), "%s: shadow cleared\n", args[0])
				return nil
			}
			s := resp.GetShadow()
			fmt.Fprintf(cmd.OutOrStdout(), "%s: shadowed by %s (%s); its Validate runs beside the serving one on every registration\n",
				args[0], adminview.ShortHash(s.GetSha256()), adminview.NameVersion(s.GetName(), s.GetVersion()))
			return nil
		},
	}
	cmd.Flags().BoolVar(&clearIt, "clear", false, "end the shadow run of TYPE")
	o.bind(cmd, "text")
	return cmd
}

// isHexDigest: 64 lower-case hex digits.
func isHexDigest(s string) bool {
	return len(s) == 64 && strings.Trim(s, "0123456789abcdef") == ""
}

func newPullCmd() *cobra.Command {
	var o clientOpts
	timeout := 2 * time.Minute
	cmd := &cobra.Command{
		Use:   "pull",
		Short: "Try the handler sources that do not serve their configured revision, now",
		Long: `Have the running daemon try at once every source of handlers.sources that does not serve
its configured revision: one not pulled yet, one whose registry could not be reached (instead
of waiting for the next retry), and one refused (a signature added since, a registry that
serves the right bytes again). It returns when the try is over and prints the sources as
wasmhost handlers does; exit status 1 when one of them still serves nothing.`,
		Example: `  wasmhost handlers pull
  wasmhost handlers pull -o json | jq '.[] | select(.serving | not)'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := client.Dial(o.socket)
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			resp, err := c.PullHandlers(ctx, &adminv1.PullHandlersRequest{})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if o.output == "json" || o.output == "yaml" {
				if err := writeStructured(out, o.output, adminview.Handlers(resp.GetHandlers())); err != nil {
					return err
				}
			} else if err := adminview.WriteHandlers(out, resp.GetHandlers(), o.output == "wide", time.Now()); err != nil {
				return err
			}
			var failed []string
			for _, h := range resp.GetHandlers() {
				if !h.GetServing() {
					failed = append(failed, h.GetFile())
				}
			}
			if len(failed) > 0 {
				return fmt.Errorf("%d of the handler sources not serving: %s", len(failed), strings.Join(failed, ", "))
			}
			return nil
		},
	}
	o.bind(cmd, "table", "wide", "json", "yaml")
	cmd.Flags().DurationVar(&timeout, "timeout", timeout, "how long to wait for the try to end")
	return cmd
}
