package main

// wasmhost handler diff: replay sessions against two revisions of a handler and say what
// changes, per plugin: the offline twin of the daemon's shadow runs.

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/internal/config"
	"github.com/wasmhost/wasmhost/internal/daemon"
	"github.com/wasmhost/wasmhost/internal/handlercheck"
	"github.com/wasmhost/wasmhost/internal/session"
)

// exitError is an error with the exit status it stands for (main uses it).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// exitCode is the exit status of a command that returned err.
func exitCode(err error) int {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 1
}

type handlerDiffOpts struct {
	sandboxOpts
	grants []string
}

func newHandlerDiffCmd() *cobra.Command {
	var o handlerDiffOpts
	cmd := &cobra.Command{
		Use:   "diff OLD.wasm NEW.wasm SESSION...",
		Short: "Replay sessions against two revisions of a handler and show what changes",
		Long: `Replay each session (docs/sessions.md; wasmhost plugins capture takes them from a node,
wasmhost handler test --record makes them) against two revisions of a handler, as
wasmhost handler test --replay does, each in the daemon's sandbox, and report per plugin what
the new revision does differently: a call accepted or rejected, its reason, the facts
register publishes, the plugin calls it makes (method and request), its writes to the
store. It is the offline twin of the daemon's shadow runs (handlers.types.<T>.shadow), for
the CI of a handler repository.

Exit status: 0 when nothing changed, 1 when a session's outcome changed, 2 on trouble (a
module that does not load, a session that does not read).`,
		Example: `  wasmhost handler diff csi-v1.wasm csi-v2.wasm sessions/*.yaml --grant plugin_call
  wasmhost handler diff old.wasm new.wasm sessions/*.yaml -o json | jq '.sessions[] | select(.changed)'`,
		Args: cobra.MinimumNArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			err := runHandlerDiff(cmd, &o, args[0], args[1], args[2:])
			var ee *exitError
			if err != nil && !errors.As(err, &ee) {
				err = &exitError{code: 2, err: err}
			}
			return err
		},
	}
	cmd.Flags().StringArrayVar(&o.grants, "grant", nil, "grant a capability to the sessions' plugin types, e.g. plugin_call (repeatable)")
	o.bind(cmd, true)
	return cmd
}

func runHandlerDiff(cmd *cobra.Command, o *handlerDiffOpts, oldPath, newPath string, files []string) error {
	ctx := cmd.Context()
	cfg, err := o.config(cmd)
	if err != nil {
		return err
	}
	var sessions []*session.Session
	for _, f := range files {
		s, err := session.LoadReplayable(f)
		if err != nil {
			return err
		}
		sessions = append(sessions, s)
	}
	for _, g := range o.grants {
		if _, ok := abi.CapabilityImports[g]; !ok {
			return fmt.Errorf("--grant %q: unknown capability (known: %s)", g, strings.Join(config.KnownCapabilities(), ", "))
		}
	}
	var v *handlercheck.DiffReport
	err = o.withCacheDir(func(cacheDir string) error {
		v, err = handlercheck.Diff(ctx, handlercheck.DiffSpec{Old: oldPath, New: newPath, Sessions: sessions, Names: files,
			Sandbox: daemon.SandboxConfig(cfg), Grants: o.grants, CacheDir: cacheDir})
		return err
	})
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	if o.output != "text" {
		if err := writeStructured(out, o.output, v); err != nil {
			return err
		}
	} else {
		writeHandlerDiff(out, v)
	}
	if v.Changed > 0 {
		return &exitError{code: 1, err: fmt.Errorf("%d of %d sessions changed between %s and %s", v.Changed, len(v.Sessions), oldPath, newPath)}
	}
	return nil
}

func writeHandlerDiff(out io.Writer, v *handlercheck.DiffReport) {
	for _, s := range v.Sessions {
		mark := "same   "
		if s.Changed {
			mark = "CHANGED"
		}
		fmt.Fprintf(out, "%s  %s %s  (%s)\n", mark, s.Type, safeText(s.Plugin), s.Session)
		for _, c := range s.Changes {
			fmt.Fprintf(out, "         %s\n", safeText(c))
		}
	}
	fmt.Fprintf(out, "\n%d of %d sessions changed\n", v.Changed, len(v.Sessions))
}
