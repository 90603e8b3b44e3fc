package main

// wasmhost handler bench: how fast a handler's calls run in the daemon's sandbox, against a
// saved baseline.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/wasmhost/wasmhost/abi"
	"github.com/wasmhost/wasmhost/internal/benchcmp"
	"github.com/wasmhost/wasmhost/internal/config"
	"github.com/wasmhost/wasmhost/internal/daemon"
	"github.com/wasmhost/wasmhost/internal/harness"
	"github.com/wasmhost/wasmhost/internal/host"
	"github.com/wasmhost/wasmhost/internal/registration"
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

// benchResult is a bench's figures: what -o json prints, --save writes and --baseline reads.
type benchResult struct {
	File        string                `json:"file"`
	SHA256      string                `json:"sha256"`
	Concurrency int                   `json:"concurrency"`
	Compile     time.Duration         `json:"compileNanoseconds"`
	Memory      int64                 `json:"instanceMemoryBytes"` // of the live instances together
	Instances   int                   `json:"instances"`
	Calls       int                   `json:"calls"`
	Failed      int                   `json:"failedCalls"`
	Elapsed     time.Duration         `json:"elapsedNanoseconds"`
	CallsPerSec float64               `json:"callsPerSecond"`
	Exports     map[string]benchStats `json:"exports"`
	// Samples are one per run: what --baseline compares.
	Samples     benchSamples `json:"samples"`
	Gate        *benchGate   `json:"gate,omitempty"`
	Regressions []string     `json:"regressions,omitempty"`
}

// benchSamples are a bench's samples, one per run.
type benchSamples struct {
	CPUPerCall []float64 `json:"cpuNanosecondsPerCall"` // the calls' threads' CPU time over the run's calls
	// RelativeCPU is CPUPerCall over the reference module's, measured in the same run: what
	// --baseline compares.
	RelativeCPU []float64 `json:"relativeCPU"`
	CallsPerSec []float64 `json:"callsPerSecond"`
}

// benchGate is the comparison of a bench's CPU per call with a baseline's.
type benchGate struct {
	Baseline      string           `json:"baseline"`
	MaxRegression float64          `json:"maxRegression"` // a fraction
	RelativeCPU   benchcmp.Result  `json:"relativeCPU"`
	CPUPerCall    benchcmp.Result  `json:"cpuNanosecondsPerCall"`    // shown, not gated
	CallsPerSec   *benchcmp.Result `json:"callsPerSecond,omitempty"` // shown, not gated
}

// defaultMaxRegression is --max-regression's default: an unchanged module passed its baseline
// 20 runs out of 20 on a 2-core machine with two CPU burners beside it, and one doing twice the
// work failed 20 out of 20 (docs/sessions.md).
const defaultMaxRegression = "25%"

type benchStats struct {
	Calls int           `json:"calls"`
	Mean  time.Duration `json:"meanNanoseconds"`
	P50   time.Duration `json:"p50Nanoseconds"`
	P95   time.Duration `json:"p95Nanoseconds"`
	P99   time.Duration `json:"p99Nanoseconds"`
}

// benchCall is one call of the workload.
type benchCall struct {
	op harness.Op
	p  registration.PluginInfo
}

// sessionAnswers answers plugin_call from sessions: the first exchange of the same method and
// request, else of the same method. It keeps no state, so that calls may run at once.
type sessionAnswers []session.Exchange

func (a sessionAnswers) Call(_ context.Context, _, method string, req []byte, _ int) ([]byte, error) {
	pick := -1
	for i, x := range a {
		if x.Method == method && string(x.Request) == string(req) {
			pick = i
			break
		}
		if pick < 0 && x.Method == method {
			pick = i
		}
	}
	if pick < 0 {
		return nil, fmt.Errorf("bench: no session has a plugin_call %s", method)
	}
	if x := a[pick]; x.Code < 0 {
		return nil, errors.New(x.Error)
	}
	return slices.Clone(a[pick].Response), nil
}

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
	var base *benchResult
	if o.baseline != "" {
		if base, err = readBaseline(o.baseline, o.concurrency); err != nil {
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
	var work []benchCall
	var answers sessionAnswers
	var types []string
	for _, f := range o.replay {
		s, err := session.LoadReplayable(f)
		if err != nil {
			return err
		}
		p := harness.PluginInfo(s)
		types = append(types, p.Type)
		for _, c := range s.Calls {
			work = append(work, benchCall{op: harness.Op(c.Export), p: p})
			for _, x := range c.Exchanges {
				if x.Fn == session.PluginCall {
					answers = append(answers, x)
				}
			}
		}
	}
	if len(work) == 0 {
		probe, err := harness.New(ctx, host.Config{})
		if err != nil {
			return err
		}
		rep, err := probe.Host().Inspect(ctx, path, mustRead(path))
		_ = probe.Close(ctx)
		if err != nil {
			return err
		}
		typ := o.pluginType
		if typ == "" && len(rep.Manifest.PluginTypes) == 1 {
			typ = rep.Manifest.PluginTypes[0]
		}
		if typ == "" {
			return errors.New("--type is needed: the module does not declare exactly one plugin type")
		}
		socket := filepath.Join(cfg.SocketDir, o.name+"-reg.sock")
		p, err := registration.ValidateInfo(socket, registration.PluginInfo{Type: typ, Name: o.name, Versions: o.versions})
		if err != nil {
			return err
		}
		types = append(types, typ)
		for _, op := range []harness.Op{harness.Validate, harness.Register, harness.Deregister} {
			work = append(work, benchCall{op: op, p: p})
		}
	}
	grants := cfg.Grants()
	for _, t := range types {
		for _, g := range o.grants {
			if !slices.Contains(grants[t], g) {
				grants[t] = append(grants[t], g)
			}
		}
	}
	sandbox := daemon.SandboxConfig(cfg)
	hcfg := sandbox
	hcfg.HandlerDir = "/nonexistent" // modules are loaded by path
	hcfg.PoolSize = o.concurrency
	hcfg.PluginCaller = answers
	hcfg.PluginCallPolicy = nil // the sessions stand in for the plugins
	hcfg.Grants = grants
	h, err := host.New(ctx, hcfg)
	if err != nil {
		return err
	}
	defer h.Close(context.WithoutCancel(ctx))
	start := time.Now()
	m, err := h.LoadFile(ctx, path)
	if err != nil {
		return fmt.Errorf("%s did not load: %w", path, err)
	}
	defer m.Close(context.WithoutCancel(ctx))
	res := benchResult{File: path, SHA256: m.SHA256(), Concurrency: o.concurrency, Compile: time.Since(start), Exports: map[string]benchStats{}}

	ref, err := loadBenchReference(ctx, h)
	if err != nil {
		return err
	}
	defer ref.Close(context.WithoutCancel(ctx))
	runs, err := benchRuns(ctx, m, ref, work, o.concurrency, o.count, o.duration)
	if err != nil {
		return err
	}
	res.Memory, res.Instances = m.InstanceMemory(), o.concurrency
	all := map[harness.Op][]time.Duration{}
	var busy time.Duration
	for _, r := range runs {
		for op, ds := range r.lat {
			all[op] = append(all[op], ds...)
		}
		res.Failed += r.failed
		res.Elapsed += r.elapsed
		perCall := float64(r.cpu.Nanoseconds()) / float64(max(1, r.calls))
		res.Samples.CPUPerCall = append(res.Samples.CPUPerCall, perCall)
		res.Samples.RelativeCPU = append(res.Samples.RelativeCPU, perCall/(float64(r.refCPU.Nanoseconds())/float64(max(1, r.refCalls))))
		busy += r.busy
		res.Samples.CallsPerSec = append(res.Samples.CallsPerSec, float64(r.calls)/r.busy.Seconds())
	}
	for op, ds := range all {
		slices.Sort(ds)
		var sum time.Duration
		for _, d := range ds {
			sum += d
		}
		res.Calls += len(ds)
		res.Exports[string(op)] = benchStats{Calls: len(ds), Mean: sum / time.Duration(len(ds)),
			P50: benchcmp.Percentile(ds, 0.50), P95: benchcmp.Percentile(ds, 0.95), P99: benchcmp.Percentile(ds, 0.99)}
	}
	res.CallsPerSec = float64(res.Calls) / busy.Seconds()
	if base != nil {
		cps := benchcmp.Compare(base.Samples.CallsPerSec, res.Samples.CallsPerSec, maxReg)
		res.Gate = &benchGate{Baseline: o.baseline, MaxRegression: maxReg,
			RelativeCPU: benchcmp.Compare(base.Samples.RelativeCPU, res.Samples.RelativeCPU, maxReg),
			CPUPerCall:  benchcmp.Compare(base.Samples.CPUPerCall, res.Samples.CPUPerCall, maxReg), CallsPerSec: &cps}
		if g := res.Gate.RelativeCPU; g.Verdict == benchcmp.Worse {
			res.Regressions = append(res.Regressions, fmt.Sprintf("CPU per call %.3g× the reference's, the baseline's %.3g×: %+.1f%% (p=%.3f, n=%d+%d)",
				g.New.Median, g.Base.Median, 100*g.Delta, g.P, g.Base.N, g.New.N))
		}
	}
	if o.save != "" {
		b, _ := json.MarshalIndent(res, "", "  ")
		if err := os.WriteFile(o.save, append(b, '\n'), 0o644); err != nil {
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
		writeGoBench(out, &res)
	default:
		writeBench(out, &res, base, o.baseline)
	}
	if res.Failed > 0 {
		fmt.Fprintf(cmd.ErrOrStderr(), "%d calls failed (an error, a trap or the deadline): the figures include them\n", res.Failed)
	}
	if len(res.Regressions) > 0 {
		return fmt.Errorf("%w: regression against %s over --max-regression %s: %s", errHandlerFailed, o.baseline, o.maxRegression, strings.Join(res.Regressions, "; "))
	}
	return nil
}

// readBaseline reads a baseline that --save wrote, and refuses one it cannot compare a run
// against: not such a file, another concurrency, no samples (saved by a wasmhost before
// --count), or samples that are not positive figures (zero, negative), which would compare
// nothing and pass every run. The error names the file and what is wrong.
func readBaseline(file string, concurrency int) (*benchResult, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}
	base := &benchResult{}
	if err := json.Unmarshal(b, base); err != nil {
		return nil, fmt.Errorf("baseline %s is not a baseline that wasmhost handler bench --save writes: %w", file, err)
	}
	var bad []string
	if base.Concurrency < 1 {
		bad = append(bad, fmt.Sprintf("concurrency %d", base.Concurrency))
	}
	for _, f := range []struct {
		key     string
		samples []float64
	}{
		{"samples.relativeCPU", base.Samples.RelativeCPU},
		{"samples.cpuNanosecondsPerCall", base.Samples.CPUPerCall},
		{"samples.callsPerSecond", base.Samples.CallsPerSec},
	} {
		if len(f.samples) == 0 {
			bad = append(bad, f.key+" has none")
		}
		for i, v := range f.samples {
			if !(v > 0) || math.IsInf(v, 0) {
				bad = append(bad, fmt.Sprintf("%s[%d] is %v", f.key, i, v))
				break
			}
		}
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("baseline %s has no samples it can compare against: %s (want the positive samples of a run saved with --save; one saved before --count has none: save it again)", file, strings.Join(bad, "; "))
	}
	if base.Concurrency != concurrency {
		return nil, fmt.Errorf("baseline %s was measured with --concurrency %d: compare runs of the same concurrency", file, base.Concurrency)
	}
	return base, nil
}

func mustRead(path string) []byte {
	b, _ := readHandlerModule(path)
	return b
}

// benchRun is what one run of a bench measured.
type benchRun struct {
	lat     map[harness.Op][]time.Duration
	calls   int
	failed  int
	cpu     time.Duration // the CPU time of the calls' threads
	elapsed time.Duration
	// busy is the time the module's calls ran, the reference's turns left out (summed over
	// the callers, divided by their number).
	busy time.Duration
	// refCalls calls of the reference module took refCPU, in batches between the module's.
	refCalls int
	refCPU   time.Duration
}

// benchBatch is how long a bench runs the module's calls, then the reference's, in turn.
const benchBatch = 2 * time.Millisecond

// benchRuns runs the workload count times for duration/count each, with concurrency callers,
// each running the module's calls and the reference module's in turn, benchBatch each.
func benchRuns(ctx context.Context, m, ref benchModule, work []benchCall, concurrency, count int, duration time.Duration) ([]benchRun, error) {
	runs := make([]benchRun, count)
	refCall := benchCall{op: harness.Validate, p: registration.PluginInfo{Type: benchReferenceType, Name: "reference"}}
	next := 0 // where in the workload the next run starts, so that runs go through all of it
	for k := range runs {
		r := &runs[k]
		r.lat = map[harness.Op][]time.Duration{}
		ws := make([]benchRun, concurrency)
		start := time.Now()
		deadline := start.Add(duration / time.Duration(count))
		var wg sync.WaitGroup
		for w := range concurrency {
			ws[w].lat = map[harness.Op][]time.Duration{}
			wg.Go(func() {
				// The calls run on this goroutine's thread, whose CPU clock counts them.
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				b := &ws[w]
				for i := next + w; ctx.Err() == nil && time.Now().Before(deadline); {
					cpu0, batchEnd := threadCPU(), time.Now().Add(benchBatch)
					for ; ctx.Err() == nil && time.Now().Before(batchEnd); i += concurrency {
						c := work[i%len(work)]
						t0 := time.Now()
						err := benchCallOnce(ctx, m, c)
						b.lat[c.op] = append(b.lat[c.op], time.Since(t0))
						b.calls++
						if err != nil && !errors.Is(err, registration.ErrRejected) {
							b.failed++
						}
					}
					cpu1, now := threadCPU(), time.Now()
					b.cpu += cpu1 - cpu0
					b.busy += now.Sub(batchEnd.Add(-benchBatch))
					batchEnd = now.Add(benchBatch)
					for ctx.Err() == nil && time.Now().Before(batchEnd) {
						_ = benchCallOnce(ctx, ref, refCall)
						b.refCalls++
					}
					b.refCPU += threadCPU() - cpu1
				}
			})
		}
		wg.Wait()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		r.elapsed = time.Since(start)
		for _, b := range ws {
			for op, ds := range b.lat {
				r.lat[op] = append(r.lat[op], ds...)
			}
			r.failed += b.failed
			r.cpu += b.cpu
			r.calls += b.calls
			r.refCPU += b.refCPU
			r.refCalls += b.refCalls
			r.busy += b.busy / time.Duration(concurrency)
		}
		next += r.calls
	}
	return runs, nil
}

// benchReferenceType is the plugin type of the reference module.
const benchReferenceType = "reference.bench.wasmhost.dev"

// benchModule is what a bench calls of a loaded module.
type benchModule interface {
	ValidatePlugin(ctx context.Context, p registration.PluginInfo) error
	RegisterPlugin(ctx context.Context, p registration.PluginInfo) (map[string]string, error)
	DeRegisterPlugin(ctx context.Context, p registration.PluginInfo) error
	Close(ctx context.Context) error
}

func benchCallOnce(ctx context.Context, m benchModule, c benchCall) error {
	switch c.op {
	case harness.Validate:
		return m.ValidatePlugin(ctx, c.p)
	case harness.Register:
		_, err := m.RegisterPlugin(ctx, c.p)
		return err
	default:
		return m.DeRegisterPlugin(ctx, c.p)
	}
}

// threadCPU returns the CPU time of the calling thread so far.
func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// loadBenchReference loads the reference module (workModule of benchReferenceLoops) into h,
// from a file in a private temporary directory it removes.
func loadBenchReference(ctx context.Context, h *host.Host) (benchModule, error) {
	dir, err := os.MkdirTemp("", "wasmhost-bench")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "reference.wasm")
	if err := os.WriteFile(path, workModule(benchReferenceLoops, benchReferenceType), 0o644); err != nil {
		return nil, err
	}
	m, err := h.LoadFile(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("the reference module did not load: %w", err)
	}
	return m, nil
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

func writeBench(out io.Writer, r *benchResult, base *benchResult, baseFile string) {
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
		if b, ok := base.exports()[op]; ok && b.P95 > 0 {
			fmt.Fprintf(out, "  (baseline p95 %s, %+.1f%%)", handlerDuration(b.P95), 100*(float64(s.P95)/float64(b.P95)-1))
		}
		fmt.Fprintln(out)
	}
	for _, reg := range r.Regressions {
		fmt.Fprintf(out, "REGRESSION against %s: %s\n", baseFile, reg)
	}
}

func (r *benchResult) exports() map[string]benchStats {
	if r == nil {
		return nil
	}
	return r.Exports
}

// writeGoBench writes the figures as Go benchmark lines: ns/op per export, and the
// percentiles, calls/s, memory and compile time as units of their own.
func writeGoBench(out io.Writer, r *benchResult) {
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
