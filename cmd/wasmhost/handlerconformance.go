package main

// handler conformance: the conformance kit (package conformance) on a built module, from the
// command line, for handler authors who do not write Go tests (C, Rust, AssemblyScript).

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/conformance"
	"github.com/wasmhost/wasmhost/internal/config"
)

type handlerConformanceOpts struct {
	pluginType  string
	valid       conformance.Plugin
	invalid     []string
	grants      []string
	fixture     string
	keepsState  bool
	timeout     config.Duration
	memoryLimit config.ByteSize
	cacheDir    string
}

func newHandlerConformanceCmd() *cobra.Command {
	var o handlerConformanceOpts
	def := config.Default()
	o.timeout, o.memoryLimit = def.Handlers.CallTimeout, def.Handlers.MemoryLimit
	cmd := &cobra.Command{
		Use:   "conformance FILE.wasm",
		Short: "Run the conformance kit on a handler module",
		Long: `Run the conformance kit (package conformance, which Go handlers run from go test) on a
built module, in the daemon's host: its exports, imports, ABI version and manifest, that it
loads, that a plugin it must accept (--name, --versions) passes validate, register and
deregister, that register is idempotent and deregister works in a fresh instance (what it
needs is in the store, not in memory), that deregistering an unknown plugin does not fail,
that each --invalid plugin is refused by validate with a reason, and that no call traps or
comes near its deadline.

--invalid NAME=V1,V2 describes a plugin validate must refuse: its name and the versions it
sends (repeatable). --grant and --call-fixture are those of 'wasmhost handler test'.

Exit status: 0 when every check passed, 1 when one failed.`,
		Example: `  wasmhost handler conformance example.wasm --name demo --versions v1 --invalid old=v0`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts := conformance.Options{PluginType: o.pluginType, Valid: o.valid, KeepsState: o.keepsState,
				Timeout: time.Duration(o.timeout), MemoryLimit: int64(o.memoryLimit), CacheDir: o.cacheDir}
			if opts.Valid.Name == "" {
				return fmt.Errorf("--name must not be empty")
			}
			for _, s := range o.invalid {
				name, versions, _ := strings.Cut(s, "=")
				if name == "" {
					return fmt.Errorf("--invalid %q: want NAME=V1,V2 (the versions may be left out: NAME)", s)
				}
				p := conformance.Plugin{Name: name}
				if versions != "" {
					p.Versions = strings.Split(versions, ",")
				}
				opts.Invalid = append(opts.Invalid, p)
			}
			for _, g := range o.grants {
				if _, ok := abi.CapabilityImports[g]; !ok {
					return fmt.Errorf("--grant %q: unknown capability (known: %s)", g, strings.Join(config.KnownCapabilities(), ", "))
				}
			}
			if len(o.grants) > 0 {
				if o.pluginType == "" {
					return fmt.Errorf("--grant needs --type: the plugin type the capability is granted for")
				}
				opts.Grants = map[string][]string{o.pluginType: o.grants}
			}
			if o.fixture != "" {
				f, err := conformance.LoadFixture(o.fixture)
				if err != nil {
					return err
				}
				opts.Fixture = f
			}
			return runHandlerConformance(cmd.Context(), cmd.OutOrStdout(), args[0], opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.pluginType, "type", "", "plugin type under test (default: the one the module declares)")
	f.StringVar(&o.valid.Name, "name", "", "name of a plugin the handler must accept (required)")
	f.StringSliceVar(&o.valid.Versions, "versions", nil, "its supported versions, comma-separated")
	f.StringVar(&o.valid.Endpoint, "endpoint", "", "its endpoint (default: its registration socket)")
	f.StringArrayVar(&o.invalid, "invalid", nil, "a plugin validate must refuse, NAME=V1,V2 (repeatable)")
	f.StringArrayVar(&o.grants, "grant", nil, "grant a capability to the plugin type (--type), e.g. plugin_call (repeatable)")
	f.StringVar(&o.fixture, "call-fixture", "", "answer plugin_call from this YAML/JSON file")
	f.BoolVar(&o.keepsState, "keeps-state", false, "the handler keeps keys in the store after deregister on purpose")
	f.Var(&o.timeout, "timeout", "deadline of every handler call (handlers.callTimeout)")
	f.Var(&o.memoryLimit, "memory-limit", "memory ceiling of the handler's instances, e.g. 64Mi (handlers.memoryLimit)")
	f.StringVar(&o.cacheDir, "cache-dir", "", "keep compiled modules in this directory (mode 0700) between runs")
	return cmd
}

// runHandlerConformance prints a line per check: PASS, FAIL (with what is wrong) or SKIP, and
// the notes of a check that failed.
func runHandlerConformance(ctx context.Context, out io.Writer, path string, opts conformance.Options) error {
	results, err := conformance.Check(ctx, path, opts)
	if err != nil {
		return err
	}
	failed := 0
	for _, r := range results {
		switch {
		case r.Skipped:
			fmt.Fprintf(out, "SKIP  %s: %s\n", r.Name, strings.TrimPrefix(r.Problem, "skipped: "))
		case r.Problem != "":
			failed++
			fmt.Fprintf(out, "FAIL  %s: %s\n", r.Name, r.Problem)
			for _, n := range r.Notes {
				fmt.Fprintf(out, "      %s\n", n)
			}
		default:
			fmt.Fprintf(out, "PASS  %s\n", r.Name)
		}
	}
	if failed > 0 {
		fmt.Fprintf(out, "\nFAIL: %d of %d checks failed\n", failed, len(results))
		return fmt.Errorf("%w conformance of %s failed: %d of %d checks", errHandlerFailed, path, failed, len(results))
	}
	fmt.Fprintf(out, "\nPASS: all %d checks passed\n", len(results))
	return nil
}
