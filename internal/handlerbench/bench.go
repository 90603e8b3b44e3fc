package handlerbench

// What `wasmhost handler bench` measures, set up as the daemon would run it: the workload
// (recorded sessions, or the three calls for one plugin), the host with the grants, and the
// runs.

import (
	"context"
	"errors"
	"path/filepath"
	"slices"

	"github.com/wasmhost/wasmhost/internal/harness"
	"github.com/wasmhost/wasmhost/internal/host"
	"github.com/wasmhost/wasmhost/internal/registration"
	"github.com/wasmhost/wasmhost/internal/session"
)

// Spec is what a bench measures: the module file at Path (its bytes read as the daemon would,
// Module; nil when they could not be, which the description refuses) in the sandbox Sandbox
// (the daemon's, as daemon.SandboxConfig makes it from the config), with Grants given to the
// workload's plugin types beside the config's (ConfigGrants, config.Config.Grants), run as
// Options say.
type Spec struct {
	Path         string
	Module       []byte
	Sandbox      host.Config
	ConfigGrants map[string][]string
	Grants       []string
	Options      Options
	// SocketDir is the daemon's socket directory, where the plugin's registration socket is
	// taken to be.
	SocketDir string
	// The workload: the calls the sessions recorded, answered from them; without sessions,
	// validate, register and deregister for one plugin of type PluginType ("" for the one the
	// module declares), named Name, offering Versions.
	Sessions         []*session.Session
	PluginType, Name string
	Versions         []string
}

// Bench runs the bench of spec.
func Bench(ctx context.Context, spec Spec) (*Result, error) {
	work, answers, types := SessionWork(spec.Sessions)
	if len(work) == 0 {
		p, err := onePlugin(ctx, spec)
		if err != nil {
			return nil, err
		}
		types = append(types, p.Type)
		for _, op := range []harness.Op{harness.Validate, harness.Register, harness.Deregister} {
			work = append(work, Call{Op: op, Plugin: p})
		}
	}
	grants := spec.ConfigGrants
	for _, t := range types {
		for _, g := range spec.Grants {
			if !slices.Contains(grants[t], g) {
				grants[t] = append(grants[t], g)
			}
		}
	}
	hcfg := spec.Sandbox
	hcfg.HandlerDir = "/nonexistent" // modules are loaded by path
	hcfg.PoolSize = spec.Options.Concurrency
	hcfg.PluginCaller = answers
	hcfg.PluginCallPolicy = nil // the sessions stand in for the plugins
	hcfg.Grants = grants
	h, err := host.New(ctx, hcfg)
	if err != nil {
		return nil, err
	}
	defer h.Close(context.WithoutCancel(ctx))
	return Run(ctx, h, spec.Path, work, spec.Options)
}

// onePlugin is the plugin a bench without sessions calls for, checked as the daemon checks a
// GetInfo answer; its type defaults to the one the module declares.
func onePlugin(ctx context.Context, spec Spec) (registration.PluginInfo, error) {
	probe, err := harness.New(ctx, host.Config{})
	if err != nil {
		return registration.PluginInfo{}, err
	}
	rep, err := probe.Host().Inspect(ctx, spec.Path, spec.Module)
	_ = probe.Close(ctx)
	if err != nil {
		return registration.PluginInfo{}, err
	}
	typ := spec.PluginType
	if typ == "" && len(rep.Manifest.PluginTypes) == 1 {
		typ = rep.Manifest.PluginTypes[0]
	}
	if typ == "" {
		return registration.PluginInfo{}, errors.New("--type is needed: the module does not declare exactly one plugin type")
	}
	socket := filepath.Join(spec.SocketDir, spec.Name+"-reg.sock")
	return registration.ValidateInfo(socket, registration.PluginInfo{Type: typ, Name: spec.Name, Versions: spec.Versions})
}
