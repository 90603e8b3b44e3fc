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

	"github.com/wasmhost/wasmhost/abi"
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

--save FILE writes the figures as a baseline; --baseline FILE compares with one and exits
1 when calls per second fell, or an export's p95 rose, by more than --max-regression.
-o gobench prints Go benchmark lines, for benchstat.

On a shared or loaded machine the figures vary: compare runs made on the same machine.`,
		Example: `  wasmhost handler bench csi.wasm --grant plugin_call --replay sessions/*.yaml
  wasmhost handler bench csi.wasm --grant plugin_call --replay sessions/*.yaml --save base.json
  wasmhost handler bench new-csi.wasm --grant plugin_call --replay sessions/*.yaml --baseline base.json --max-regression 10%
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
	f.DurationVar(&o.duration, "duration", 3*time.Second, "how long to run the calls")
	f.IntVar(&o.concurrency, "concurrency", 1, "calls at once")
	f.StringVar(&o.save, "save", "", "write the figures to this baseline file (JSON)")
	f.StringVar(&o.baseline, "baseline", "", "compare with this baseline file; exit 1 on a regression")
	f.StringVar(&o.maxRegression, "max-regression", "10%", "the regression --baseline tolerates, a percentage")
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
	Regressions []string              `json:"regressions,omitempty"`
}

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
		b, err := os.ReadFile(o.baseline)
		if err != nil {
			return err
		}
		base = &benchResult{}
		if err := json.Unmarshal(b, base); err != nil {
			return fmt.Errorf("baseline %s: %w", o.baseline, err)
		}
		if base.Concurrency != o.concurrency {
			return fmt.Errorf("baseline %s was measured with --concurrency %d: compare runs of the same concurrency", o.baseline, base.Concurrency)
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
		probe, err := harness.New(ctx, harness.Config{})
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

	lat := make([]map[harness.Op][]time.Duration, o.concurrency)
	failed := make([]int, o.concurrency)
	deadline := time.Now().Add(o.duration)
	runStart := time.Now()
	var wg sync.WaitGroup
	for w := range o.concurrency {
		lat[w] = map[harness.Op][]time.Duration{}
		wg.Go(func() {
			for i := w; ctx.Err() == nil && time.Now().Before(deadline); i++ {
				c := work[i%len(work)]
				t0 := time.Now()
				var err error
				switch c.op {
				case harness.Validate:
					err = m.ValidatePlugin(ctx, c.p)
				case harness.Register:
					_, err = m.RegisterPlugin(ctx, c.p)
				default:
					err = m.DeRegisterPlugin(ctx, c.p)
				}
				lat[w][c.op] = append(lat[w][c.op], time.Since(t0))
				if err != nil && !errors.Is(err, registration.ErrRejected) {
					failed[w]++
				}
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	res.Elapsed = time.Since(runStart)
	res.Memory, res.Instances = m.InstanceMemory(), o.concurrency
	all := map[harness.Op][]time.Duration{}
	for w := range lat {
		for op, ds := range lat[w] {
			all[op] = append(all[op], ds...)
		}
		res.Failed += failed[w]
	}
	for op, ds := range all {
		slices.Sort(ds)
		var sum time.Duration
		for _, d := range ds {
			sum += d
		}
		res.Calls += len(ds)
		res.Exports[string(op)] = benchStats{Calls: len(ds), Mean: sum / time.Duration(len(ds)),
			P50: quantile(ds, 0.50), P95: quantile(ds, 0.95), P99: quantile(ds, 0.99)}
	}
	res.CallsPerSec = float64(res.Calls) / res.Elapsed.Seconds()
	if base != nil {
		res.Regressions = regressions(base, &res, maxReg)
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
		return fmt.Errorf("%w: regression against %s over %s: %s", errHandlerFailed, o.baseline, o.maxRegression, strings.Join(res.Regressions, "; "))
	}
	return nil
}

func mustRead(path string) []byte {
	b, _ := readHandlerModule(path)
	return b
}

// quantile is the q-quantile of sorted ds (nearest rank).
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(ds)))) - 1
	return ds[max(0, min(i, len(ds)-1))]
}

// regressions compares res with base: calls per second down, or an export's p95 up, by more
// than maxReg.
func regressions(base, res *benchResult, maxReg float64) []string {
	var out []string
	if base.CallsPerSec > 0 && res.CallsPerSec < base.CallsPerSec*(1-maxReg) {
		out = append(out, fmt.Sprintf("calls/s %.0f, the baseline's %.0f (%+.1f%%)", res.CallsPerSec, base.CallsPerSec, 100*(res.CallsPerSec/base.CallsPerSec-1)))
	}
	for _, op := range slices.Sorted(mapKeys(res.Exports)) {
		b, ok := base.Exports[op]
		if !ok || b.P95 <= 0 {
			continue
		}
		if r := res.Exports[op].P95; float64(r) > float64(b.P95)*(1+maxReg) {
			out = append(out, fmt.Sprintf("%s p95 %v, the baseline's %v (%+.1f%%)", op, r, b.P95, 100*(float64(r)/float64(b.P95)-1)))
		}
	}
	return out
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
	fmt.Fprintf(out, "calls     %d in %s, concurrency %d: %.0f calls/s", r.Calls, r.Elapsed.Round(time.Millisecond), r.Concurrency, r.CallsPerSec)
	if base != nil && base.CallsPerSec > 0 {
		fmt.Fprintf(out, " (baseline %.0f, %+.1f%%)", base.CallsPerSec, 100*(r.CallsPerSec/base.CallsPerSec-1))
	}
	fmt.Fprintln(out)
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
