package main

// wasmhost handler diff: replay sessions against two revisions of a handler and say what
// changes, per plugin: the offline twin of the daemon's shadow runs.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/internal/config"
	"github.com/wasmhost/wasmhost/internal/daemon"
	"github.com/wasmhost/wasmhost/internal/harness"
	"github.com/wasmhost/wasmhost/internal/host/sandbox"
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

// diffView is the result of a handler diff (-o json, -o yaml).
type diffView struct {
	Old      string                `json:"old"`
	New      string                `json:"new"`
	Sessions []harness.SessionDiff `json:"sessions"`
	Changed  int                   `json:"changed"`
}

// sandboxHarness returns a harness in the daemon's sandbox for cfg, with grants added to
// types, whose plugin_calls no plugin answers (a replay answers them).
func sandboxHarness(ctx context.Context, cfg config.Config, grants []string, types []string, cacheDir string) (*harness.Harness, error) {
	for _, g := range grants {
		if _, ok := abi.CapabilityImports[g]; !ok {
			return nil, fmt.Errorf("--grant %q: unknown capability (known: %s)", g, strings.Join(config.KnownCapabilities(), ", "))
		}
	}
	sandbox := daemon.SandboxConfig(cfg)
	sandbox.PluginCallPolicy = nil // the sessions stand in for the plugins
	sandbox.CacheDir = cacheDir
	for _, t := range types {
		for _, g := range grants {
			if !slices.Contains(sandbox.Grants[t], g) {
				sandbox.Grants[t] = append(sandbox.Grants[t], g)
			}
		}
	}
	return harness.New(ctx, sandbox)
}

// loadForReplay loads path in hs, with the load's error in a sentence.
func loadForReplay(ctx context.Context, hs *harness.Harness, path string) (*sandbox.Module, error) {
	m, _, err := hs.Load(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("%s did not load: %w", path, err)
	}
	return m, nil
}

func runHandlerDiff(cmd *cobra.Command, o *handlerDiffOpts, oldPath, newPath string, files []string) error {
	ctx := cmd.Context()
	cfg, err := o.config(cmd)
	if err != nil {
		return err
	}
	var sessions []*session.Session
	var types []string
	for _, f := range files {
		s, err := session.LoadReplayable(f)
		if err != nil {
			return err
		}
		sessions = append(sessions, s)
		types = append(types, s.Plugin.Type)
	}
	v := diffView{Old: oldPath, New: newPath, Sessions: []harness.SessionDiff{}}
	err = o.withCacheDir(func(cacheDir string) error {
		var mods [2]*sandbox.Module
		var hss [2]*harness.Harness
		for i, path := range []string{oldPath, newPath} {
			hs, err := sandboxHarness(ctx, cfg, o.grants, types, cacheDir)
			if err != nil {
				return err
			}
			defer hs.Close(context.WithoutCancel(ctx))
			if mods[i], err = loadForReplay(ctx, hs, path); err != nil {
				return err
			}
			hss[i] = hs
		}
		for i, s := range sessions {
			sv := harness.Diff(ctx, harness.Revision{Harness: hss[0], Module: mods[0]}, harness.Revision{Harness: hss[1], Module: mods[1]}, s, files[i])
			if sv.Changed {
				v.Changed++
			}
			v.Sessions = append(v.Sessions, sv)
		}
		return nil
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
		writeHandlerDiff(out, &v)
	}
	if v.Changed > 0 {
		return &exitError{code: 1, err: fmt.Errorf("%d of %d sessions changed between %s and %s", v.Changed, len(v.Sessions), oldPath, newPath)}
	}
	return nil
}

func writeHandlerDiff(out io.Writer, v *diffView) {
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
