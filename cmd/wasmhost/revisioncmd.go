package main

// The revision commands under `wasmhost handlers`: history, rollback, unpin and shadow ask a
// running daemon over its admin API which revisions of a plugin type's handler it keeps, and
// choose the one that serves and the candidate that shadows it; pull has it try its handler
// sources now.

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/wasmhost/wasmhost/admin/client"
	adminv1 "github.com/wasmhost/wasmhost/admin/v1"
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
				return writeStructured(out, o.output, newHistoryView(resp))
			}
			return writeHistory(out, resp, time.Now())
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
			safeMessage(resp)
			r := resp.GetRevision()
			fmt.Fprintf(cmd.OutOrStdout(), "%s: served by revision %s (%s) until its handler file changes again; undo with: wasmhost handlers unpin %s\n",
				args[0], shortHash(r.GetSha256()), nameVersion(r.GetName(), r.GetVersion()), args[0])
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
			safeMessage(resp)
			if clearIt {
				fmt.Fprintf(cmd.OutOrStdout(), "%s: shadow cleared\n", args[0])
				return nil
			}
			s := resp.GetShadow()
			fmt.Fprintf(cmd.OutOrStdout(), "%s: shadowed by %s (%s); its Validate runs beside the serving one on every registration\n",
				args[0], shortHash(s.GetSha256()), nameVersion(s.GetName(), s.GetVersion()))
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

func nameVersion(name, version string) string {
	switch {
	case name == "" && version == "":
		return "no name or version in its manifest"
	case version == "":
		return name
	}
	return strings.TrimSpace(name + " " + version)
}

type historyView struct {
	PluginType string         `json:"pluginType"`
	Revisions  []revisionView `json:"revisions"`
	Pin        *pinView       `json:"pin,omitempty"`
	Shadow     *shadowView    `json:"shadow,omitempty"`
}

type revisionView struct {
	SHA256      string     `json:"sha256"`
	File        string     `json:"file"`
	Name        string     `json:"name,omitempty"`
	Version     string     `json:"version,omitempty"`
	PluginTypes []string   `json:"pluginTypes"`
	Size        int64      `json:"size"`
	FirstLoaded *time.Time `json:"firstLoaded,omitempty"`
	Calls       uint64     `json:"calls"`
	Failures    uint64     `json:"failures"`
	Traps       uint64     `json:"traps"`
	Timeouts    uint64     `json:"timeouts"`
	Serving     bool       `json:"serving"`
	Pinned      bool       `json:"pinned"`
	InFile      bool       `json:"inFile"`
	RolledBack  string     `json:"rolledBack,omitempty"`
}

type pinView struct {
	PluginType string     `json:"pluginType"`
	SHA256     string     `json:"sha256"`
	FileSHA256 string     `json:"fileSHA256"`
	Auto       bool       `json:"auto"`
	Reason     string     `json:"reason,omitempty"`
	Since      *time.Time `json:"since,omitempty"`
}

type shadowView struct {
	PluginType       string     `json:"pluginType"`
	SHA256           string     `json:"sha256"`
	File             string     `json:"file,omitempty"`
	Name             string     `json:"name,omitempty"`
	Version          string     `json:"version,omitempty"`
	Since            *time.Time `json:"since,omitempty"`
	Runs             uint64     `json:"runs"`
	Disagreements    uint64     `json:"disagreements"`
	Failures         uint64     `json:"failures"`
	Skipped          uint64     `json:"skipped"`
	LastDisagreement string     `json:"lastDisagreement,omitempty"`
}

func newHistoryView(resp *adminv1.ListRevisionsResponse) historyView {
	v := historyView{PluginType: resp.GetPluginType(), Revisions: []revisionView{},
		Pin: newPinView(resp.GetPin()), Shadow: newShadowView(resp.GetShadow())}
	for _, r := range resp.GetRevisions() {
		v.Revisions = append(v.Revisions, revisionView{
			SHA256: r.GetSha256(), File: r.GetFile(), Name: r.GetName(), Version: r.GetVersion(),
			PluginTypes: r.GetPluginTypes(), Size: r.GetSize(), FirstLoaded: timeOrNil(r.GetFirstLoaded()),
			Calls: r.GetCalls(), Failures: r.GetFailures(), Traps: r.GetTraps(), Timeouts: r.GetTimeouts(),
			Serving: r.GetServing(), Pinned: r.GetPinned(), InFile: r.GetInFile(), RolledBack: r.GetRolledBack(),
		})
	}
	return v
}

func newPinView(p *adminv1.Pin) *pinView {
	if p == nil {
		return nil
	}
	return &pinView{PluginType: p.GetPluginType(), SHA256: p.GetSha256(), FileSHA256: p.GetFileSha256(),
		Auto: p.GetAuto(), Reason: p.GetReason(), Since: timeOrNil(p.GetSince())}
}

func newShadowView(s *adminv1.Shadow) *shadowView {
	if s == nil {
		return nil
	}
	return &shadowView{PluginType: s.GetPluginType(), SHA256: s.GetSha256(), File: s.GetFile(),
		Name: s.GetName(), Version: s.GetVersion(), Since: timeOrNil(s.GetSince()), Runs: s.GetRuns(),
		Disagreements: s.GetDisagreements(), Failures: s.GetFailures(), Skipped: s.GetSkipped(),
		LastDisagreement: s.GetLastDisagreement()}
}

// writeHistory prints the revisions of a type as a table, its pin and shadow below.
func writeHistory(w io.Writer, resp *adminv1.ListRevisionsResponse, now time.Time) error {
	safeMessage(resp)
	tw := newTable()
	tw.row("SHA256", "NAME", "VERSION", "FIRST-LOADED", "CALLS", "FAILURES", "TRAPS", "TIMEOUTS", "STATE")
	for _, r := range resp.GetRevisions() {
		var state []string
		switch {
		case r.GetPinned():
			state = append(state, "serving (pinned)")
		case r.GetServing():
			state = append(state, "serving")
		}
		if r.GetInFile() {
			state = append(state, "in "+filepath.Base(r.GetFile()))
		}
		if rb := r.GetRolledBack(); rb != "" {
			state = append(state, "rolled back: "+truncate(oneLine(rb), 70))
		}
		first := "-"
		if t := r.GetFirstLoaded(); t != nil {
			first = t.AsTime().Local().Format("2006-01-02 15:04:05") + " (" + age(t, nil, now) + ")"
		}
		tw.row(shortHash(r.GetSha256()), orDash(r.GetName()), orDash(r.GetVersion()), first,
			strconv.FormatUint(r.GetCalls(), 10), strconv.FormatUint(r.GetFailures(), 10),
			strconv.FormatUint(r.GetTraps(), 10), strconv.FormatUint(r.GetTimeouts(), 10),
			orDash(strings.Join(state, ", ")))
	}
	if err := tw.writeTo(w); err != nil {
		return err
	}
	writePinLine(w, resp.GetPin())
	writeShadowLine(w, resp.GetShadow())
	return nil
}

// writePinLine says which revision a pinned type serves, instead of which, why, and how to undo.
func writePinLine(w io.Writer, p *adminv1.Pin) {
	if p == nil {
		return
	}
	who := "by the operator"
	if p.GetAuto() {
		who = "automatically: " + oneLine(p.GetReason())
	}
	fmt.Fprintf(w, "PINNED  %s serves %s, not its file's %s: rolled back %s (undo: wasmhost handlers unpin %s)\n",
		p.GetPluginType(), shortHash(p.GetSha256()), shortHash(p.GetFileSha256()), who, p.GetPluginType())
}

// writeShadowLine says what a type's shadow candidate found.
func writeShadowLine(w io.Writer, s *adminv1.Shadow) {
	if s == nil {
		return
	}
	line := fmt.Sprintf("SHADOW  %s candidate %s (%s): %d runs, %d disagreements, %d failures",
		s.GetPluginType(), shortHash(s.GetSha256()), nameVersion(s.GetName(), s.GetVersion()),
		s.GetRuns(), s.GetDisagreements(), s.GetFailures())
	if n := s.GetSkipped(); n > 0 {
		line += fmt.Sprintf(", %d skipped (the candidate was busy)", n)
	}
	if d := s.GetLastDisagreement(); d != "" {
		line += "; last: " + oneLine(d)
	}
	fmt.Fprintln(w, line)
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
				views := make([]handlerView, 0, len(resp.GetHandlers()))
				for _, h := range resp.GetHandlers() {
					views = append(views, newHandlerView(h))
				}
				if err := writeStructured(out, o.output, views); err != nil {
					return err
				}
			} else if err := writeHandlerTable(out, resp.GetHandlers(), o.output == "wide", time.Now()); err != nil {
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
