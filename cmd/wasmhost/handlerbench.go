package main

// wasmhost handler bench: how fast a handler's calls run in the daemon's sandbox, against a
// saved baseline.

import (
	"fmt"
	"io"
	"math"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/internal/benchcmp"
	"github.com/wasmhost/wasmhost/internal/config"
	"github.com/wasmhost/wasmhost/internal/daemon"
	"github.com/wasmhost/wasmhost/internal/handlerbench"
	"github.com/wasmhost/wasmhost/internal/handlercheck"
	"github.com/wasmhost/wasmhost/internal/session"
)

type handlerBenchOpts struct {
	sandboxOpts
	replay        []string
	pluginType    string
	name          string
	versions      []string
	grants        []string
	duration      time.Duration
	count         int
	concurrency   int
	save          string
	baseline      string
	maxRegression string
}

func newHandlerBenchCmd() *cobra.Command {
	var o handlerBenchOpts
	cmd := &cobra.Command{
		Use:   "bench FILE.wasm [--replay SESSION...]",
		Short: "Measure a handler's calls in the daemon's sandbox, against a baseline",
		Long: `Run a handler's calls over and over in the daemon's sandbox (its limits and grants) and
report calls per second, the p50, p95 and p99 latency of each export, the memory of its
instances and the time its module took to compile.

The calls are those of the sessions given with --replay (docs/sessions.md), each with the
plugin it recorded, plugin_call answered from the sessions (by method and request); without
--replay, validate, register and deregister for the plugin the flags describe (--type,
--name, --versions), with no plugin to call. --concurrency calls run at once (as many
instances).

The calls run in --count runs of --duration/--count each, on threads of their own; each run
gives a sample of the CPU time a call took (the threads' own clocks: what other processes
take of the machine counts far less in it than in the time that passes), over that of a
reference module built into wasmhost, whose calls alternate with the module's 2 ms at a time
in every run (what the machine's load does to both cancels out). Calls per second count the
module's turns only.

--save FILE writes the figures and the samples as a baseline; --baseline FILE compares the
samples with the baseline's as benchstat does (medians, a Mann-Whitney U test) and exits 1
when the CPU per call, relative to the reference's, rose by more than --max-regression and
the test says the rise is not noise (p < 0.05); a difference within the noise is "no change"
(~). It exits 2 when the baseline cannot be compared against: not such a file, another
--concurrency, or samples missing, zero or negative. Calls per second and the percentiles are
shown beside the baseline's, and do not gate: on a shared machine they move with its load.
-o gobench prints Go benchmark lines, for benchstat.

Compare runs made on the same machine.`,
		Example: `  wasmhost handler bench csi.wasm --grant plugin_call --replay sessions/*.yaml
  wasmhost handler bench csi.wasm --grant plugin_call --replay sessions/*.yaml --save base.json
  wasmhost handler bench new-csi.wasm --grant plugin_call --replay sessions/*.yaml --baseline base.json --max-regression 25%
  wasmhost handler bench csi.wasm --replay s.yaml --grant plugin_call -o gobench > new.txt && benchstat old.txt new.txt`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runHandlerBench(cmd, &o, args[0])
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&o.replay, "replay", nil, "the calls of this session file (repeatable; a shell glob expands to many)")
	f.StringVar(&o.pluginType, "type", "", "plugin type without --replay (default: the one the module declares)")
	f.StringVar(&o.name, "name", "demo", "plugin name without --replay")
	f.StringSliceVar(&o.versions, "versions", nil, "supported versions without --replay, comma-separated")
	f.StringArrayVar(&o.grants, "grant", nil, "grant a capability to the plugin types, e.g. plugin_call (repeatable)")
	f.DurationVar(&o.duration, "duration", 3*time.Second, "how long to run the calls, all runs together")
	f.IntVar(&o.count, "count", 10, "runs, each a sample for --baseline (at least 5 for the gate to find anything: see --help)")
	f.IntVar(&o.concurrency, "concurrency", 1, "calls at once")
	f.StringVar(&o.save, "save", "", "write the figures to this baseline file (JSON)")
	f.StringVar(&o.baseline, "baseline", "", "compare with this baseline file; exit 1 on a regression")
	f.StringVar(&o.maxRegression, "max-regression", defaultMaxRegression, "the rise of the CPU per call --baseline tolerates, a percentage")
	o.bind(cmd, true)
	cmd.Flags().Lookup("output").Usage = "output format: text, json, yaml or gobench"
	check := cmd.PreRunE // bindOutput's, which knows text, json and yaml
	cmd.PreRunE = func(c *cobra.Command, args []string) error {
		if o.output == "gobench" {
			return nil
		}
		return check(c, args)
	}
	return cmd
}

// defaultMaxRegression is --max-regression's default: an unchanged module passed its baseline
// 20 runs out of 20 on a 2-core machine with two CPU burners beside it, and one doing twice the
// work failed 20 out of 20 (docs/sessions.md).
const defaultMaxRegression = "25%"

func parsePercent(s string) (float64, error) {
	v, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(s), "%"), 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("--max-regression %q: want a percentage such as 10%%", s)
	}
	return v / 100, nil
}

func runHandlerBench(cmd *cobra.Command, o *handlerBenchOpts, path string) error {
	ctx := cmd.Context()
	if o.concurrency < 1 || o.concurrency > 1024 {
		return fmt.Errorf("--concurrency %d: want 1 to 1024", o.concurrency)
	}
	if o.duration <= 0 {
		return fmt.Errorf("--duration %s: must be positive", o.duration)
	}
	if o.count < 1 || o.count > 1000 {
		return fmt.Errorf("--count %d: want 1 to 1000", o.count)
	}
	maxReg, err := parsePercent(o.maxRegression)
	if err != nil {
		return err
	}
	switch o.output {
	case "text", "json", "yaml", "gobench":
	default:
		return fmt.Errorf("-o %s: want text, json, yaml or gobench", o.output)
	}
	var base *handlerbench.Result
	if o.baseline != "" {
		if base, err = handlerbench.ReadBaseline(o.baseline, o.concurrency); err != nil {
			return &exitError{code: 2, err: err}
		}
	}
	cfg, err := o.config(cmd)
	if err != nil {
		return err
	}
	for _, g := range o.grants {
		if _, ok := abi.CapabilityImports[g]; !ok {
			return fmt.Errorf("--grant %q: unknown capability (known: %s)", g, strings.Join(config.KnownCapabilities(), ", "))
		}
	}
	var sessions []*session.Session
	for _, f := range o.replay {
		s, err := session.LoadReplayable(f)
		if err != nil {
			return err
		}
		sessions = append(sessions, s)
	}
	bin, _ := handlercheck.ReadModule(path) // what cannot be read, the bench's description refuses
	res, err := handlerbench.Bench(ctx, handlerbench.Spec{
		Path: path, Module: bin, Sandbox: daemon.SandboxConfig(cfg), ConfigGrants: cfg.Grants(), Grants: o.grants,
		SocketDir: cfg.SocketDir,
		Options:   handlerbench.Options{Concurrency: o.concurrency, Count: o.count, Duration: o.duration},
		Sessions:  sessions, PluginType: o.pluginType, Name: o.name, Versions: o.versions,
	})
	if err != nil {
		return err
	}
	if base != nil {
		res.CompareWith(base, o.baseline, maxReg)
	}
	if o.save != "" {
		if err := res.Save(o.save); err != nil {
			return err
		}
	}
	out := cmd.OutOrStdout()
	switch o.output {
	case "json", "yaml":
		if err := writeStructured(out, o.output, res); err != nil {
			return err
		}
	case "gobench":
		writeGoBench(out, res)
	default:
		writeBench(out, res, base, o.baseline)
	}
	if res.Failed > 0 {
		fmt.Fprintf(cmd.ErrOrStderr(), "%d calls failed (an error, a trap or the deadline): the figures include them\n", res.Failed)
	}
	if len(res.Regressions) > 0 {
		return fmt.Errorf("%w: regression against %s over --max-regression %s: %s", errHandlerFailed, o.baseline, o.maxRegression, strings.Join(res.Regressions, "; "))
	}
	return nil
}

// nanos shows a number of nanoseconds as a duration, to three figures.
func nanos(ns float64) string {
	switch {
	case ns < 1e3:
		return fmt.Sprintf("%.0fns", ns)
	case ns < 1e6:
		return fmt.Sprintf("%.3gµs", ns/1e3)
	case ns < 1e9:
		return fmt.Sprintf("%.3gms", ns/1e6)
	}
	return fmt.Sprintf("%.3gs", ns/1e9)
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if !yield(k) {
				return
			}
		}
	}
}

func writeBench(out io.Writer, r *handlerbench.Result, base *handlerbench.Result, baseFile string) {
	fmt.Fprintf(out, "handler   %s, sha256 %s\n", r.File, handlerShortSum(r.SHA256))
	fmt.Fprintf(out, "compile   %s\n", handlerDuration(r.Compile))
	fmt.Fprintf(out, "memory    %s in %d instances\n", handlerBytes(r.Memory), r.Instances)
	fmt.Fprintf(out, "calls     %d in %s, %d runs, concurrency %d: %.0f calls/s", r.Calls, r.Elapsed.Round(time.Millisecond), len(r.Samples.CPUPerCall), r.Concurrency, r.CallsPerSec)
	if base != nil && base.CallsPerSec > 0 {
		fmt.Fprintf(out, " (baseline %.0f, %+.1f%%)", base.CallsPerSec, 100*(r.CallsPerSec/base.CallsPerSec-1))
	}
	fmt.Fprintln(out)
	cpu, rel := benchcmp.Summarize(r.Samples.CPUPerCall), benchcmp.Summarize(r.Samples.RelativeCPU)
	fmt.Fprintf(out, "cpu       %s per call, %.3g× the reference module's, the medians of %d runs (half of them %.3g× to %.3g×)\n",
		nanos(cpu.Median), rel.Median, rel.N, rel.Low, rel.High)
	if g := r.Gate; g != nil {
		c := g.RelativeCPU
		verdict := map[benchcmp.Verdict]string{
			benchcmp.NoChange: "no change: the difference is within the noise",
			benchcmp.Within:   fmt.Sprintf("%+.1f%%, within --max-regression %.0f%%", 100*c.Delta, 100*g.MaxRegression),
			benchcmp.Worse:    fmt.Sprintf("%+.1f%%, over --max-regression %.0f%%", 100*c.Delta, 100*g.MaxRegression),
			benchcmp.Better:   fmt.Sprintf("%+.1f%%, faster", 100*c.Delta),
		}[c.Verdict]
		fmt.Fprintf(out, "baseline  %s: CPU per call %.3g× → %.3g× the reference's (p=%.3f, n=%d+%d): %s\n", g.Baseline, c.Base.Median, c.New.Median, c.P, c.Base.N, c.New.N, verdict)
	}
	for op := range mapKeys(r.Exports) {
		s := r.Exports[op]
		fmt.Fprintf(out, "  %-10s %7d calls  p50 %-9s p95 %-9s p99 %s", op, s.Calls, handlerDuration(s.P50), handlerDuration(s.P95), handlerDuration(s.P99))
		if b, ok := base.ExportStats()[op]; ok && b.P95 > 0 {
			fmt.Fprintf(out, "  (baseline p95 %s, %+.1f%%)", handlerDuration(b.P95), 100*(float64(s.P95)/float64(b.P95)-1))
		}
		fmt.Fprintln(out)
	}
	for _, reg := range r.Regressions {
		fmt.Fprintf(out, "REGRESSION against %s: %s\n", baseFile, reg)
	}
}

// writeGoBench writes the figures as Go benchmark lines: ns/op per export, and the
// percentiles, calls/s, memory and compile time as units of their own.
func writeGoBench(out io.Writer, r *handlerbench.Result) {
	fmt.Fprintf(out, "goos: %s\ngoarch: %s\npkg: wasmhost/handler\n", runtime.GOOS, runtime.GOARCH)
	name := strings.TrimSuffix(filepath.Base(r.File), ".wasm")
	for op := range mapKeys(r.Exports) {
		s := r.Exports[op]
		fmt.Fprintf(out, "BenchmarkHandler/%s/%s-%d\t%d\t%d ns/op\t%d p50-ns\t%d p95-ns\t%d p99-ns\n",
			name, op, r.Concurrency, s.Calls, s.Mean.Nanoseconds(), s.P50.Nanoseconds(), s.P95.Nanoseconds(), s.P99.Nanoseconds())
	}
	fmt.Fprintf(out, "BenchmarkHandler/%s/all-%d\t%d\t%d ns/op\t%.0f calls/s\t%d instance-B\t%d compile-ns\n",
		name, r.Concurrency, r.Calls, int64(float64(r.Elapsed.Nanoseconds())/math.Max(1, float64(r.Calls))), r.CallsPerSec, r.Memory, r.Compile.Nanoseconds())
}
