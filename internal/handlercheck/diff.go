package handlercheck

import (
	"context"
	"fmt"
	"slices"

	"github.com/wasmhost/wasmhost/internal/harness"
	"github.com/wasmhost/wasmhost/internal/host"
	"github.com/wasmhost/wasmhost/internal/host/sandbox"
	"github.com/wasmhost/wasmhost/internal/session"
)

// DiffSpec is what handler diff compares: the revisions in the files Old and New, each replaying
// every session of Sessions (read from the files Names, in their order) in the sandbox
// Sandbox (the daemon's, as daemon.SandboxConfig makes it), with Grants given to the sessions'
// plugin types beside the config's.
type DiffSpec struct {
	Old, New string
	Sessions []*session.Session
	Names    []string
	Sandbox  host.Config
	Grants   []string
	CacheDir string // where compiled modules are kept
}

// DiffReport is the result of a handler diff, as -o json and -o yaml print it.
type DiffReport struct {
	Old      string                `json:"old"`
	New      string                `json:"new"`
	Sessions []harness.SessionDiff `json:"sessions"`
	Changed  int                   `json:"changed"`
}

// Diff replays each session against both revisions, each in a harness of its own, and says
// what the new one does differently. Its error is for a revision that does not load, or a
// harness that cannot be made.
func Diff(ctx context.Context, spec DiffSpec) (*DiffReport, error) {
	v := &DiffReport{Old: spec.Old, New: spec.New, Sessions: []harness.SessionDiff{}}
	var types []string
	for _, s := range spec.Sessions {
		types = append(types, s.Plugin.Type)
	}
	var revs [2]harness.Revision
	for i, path := range []string{spec.Old, spec.New} {
		hs, err := harness.New(ctx, replayConfig(spec, types))
		if err != nil {
			return nil, err
		}
		defer hs.Close(context.WithoutCancel(ctx))
		m, err := loadForReplay(ctx, hs, path)
		if err != nil {
			return nil, err
		}
		revs[i] = harness.Revision{Harness: hs, Module: m}
	}
	for i, s := range spec.Sessions {
		sv := harness.Diff(ctx, revs[0], revs[1], s, spec.Names[i])
		if sv.Changed {
			v.Changed++
		}
		v.Sessions = append(v.Sessions, sv)
	}
	return v, nil
}

// replayConfig is the daemon's sandbox with the spec's grants added to types, whose
// plugin_calls no plugin answers (a replay answers them).
func replayConfig(spec DiffSpec, types []string) host.Config {
	sb := spec.Sandbox
	sb.PluginCallPolicy = nil // the sessions stand in for the plugins
	sb.CacheDir = spec.CacheDir
	sb.Grants = make(map[string][]string, len(spec.Sandbox.Grants)) // each harness its own
	for t, gs := range spec.Sandbox.Grants {
		sb.Grants[t] = slices.Clone(gs)
	}
	for _, t := range types {
		for _, g := range spec.Grants {
			if !slices.Contains(sb.Grants[t], g) {
				sb.Grants[t] = append(sb.Grants[t], g)
			}
		}
	}
	return sb
}

// loadForReplay loads path in hs, with the load's error in a sentence.
func loadForReplay(ctx context.Context, hs *harness.Harness, path string) (*sandbox.Module, error) {
	m, _, err := hs.Load(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("%s did not load: %w", path, err)
	}
	return m, nil
}
