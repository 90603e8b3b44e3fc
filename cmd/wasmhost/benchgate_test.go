package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wasmhost/wasmhost/internal/handlerbench"
)

// benchRoot runs `wasmhost <args>` and returns its standard output (with its standard error
// after it when it fails).
func benchRoot(tb testing.TB, args ...string) (string, error) {
	tb.Helper()
	root := newRootCmd()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := root.ExecuteContext(ctx); err != nil {
		return out.String() + errOut.String(), err
	}
	return out.String(), nil
}

// cpuBurners starts n processes that spin on the CPU until t ends.
func cpuBurners(tb testing.TB, n int) {
	tb.Helper()
	for range n {
		cmd := exec.Command("sh", "-c", "while :; do :; done")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
	}
}

// benchGateModules writes the work module of loops and the same made twice as slow into a new
// directory, and returns their paths.
func benchGateModules(tb testing.TB, loops uint32) (same, slower string) {
	tb.Helper()
	dir, err := os.MkdirTemp("/tmp", "wh")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	same, slower = filepath.Join(dir, "work.wasm"), filepath.Join(dir, "work-2x.wasm")
	for path, b := range map[string][]byte{same: handlerbench.WorkModule(loops, "work.example"), slower: handlerbench.WorkModule(2*loops, "work.example")} {
		if err := os.WriteFile(path, b, 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	return same, slower
}

// benchGateLoops makes a call of the work module take about 100 µs here.
const benchGateLoops = 100_000

// TestBenchGate: with two CPU burners beside it, handler bench --baseline passes the module
// its baseline was saved from and fails the same made twice as slow, with the defaults (but a
// shorter --duration), once each; the baseline keeps its samples. (BenchmarkBenchGate runs the
// two cases 20 times.)
func TestBenchGate(t *testing.T) {
	if testing.Short() {
		t.Skip("runs handler bench for a few seconds")
	}
	cpuBurners(t, 2)
	same, slower := benchGateModules(t, benchGateLoops)
	base := filepath.Join(t.TempDir(), "base.json")
	if out, err := benchRoot(t, "handler", "bench", same, "--duration", "1s", "--save", base); err != nil {
		t.Fatalf("handler bench --save: %v\n%s", err, out)
	}
	var saved handlerbench.Result
	if b, err := os.ReadFile(base); err != nil || json.Unmarshal(b, &saved) != nil || len(saved.Samples.RelativeCPU) != 10 || saved.Failed != 0 {
		t.Fatalf("saved baseline %+v (%v), want 10 samples", saved, err)
	}

	out, err := benchRoot(t, "handler", "bench", same, "--duration", "1s", "--baseline", base)
	if err != nil || !strings.Contains(out, "baseline  "+base+": CPU per call ") {
		t.Errorf("handler bench of the same module against its baseline: %v\n%s", err, out)
	}
	t.Logf("the same module:\n%s", out)

	out, err = benchRoot(t, "handler", "bench", slower, "--duration", "1s", "--baseline", base)
	if !errors.Is(err, errHandlerFailed) || !strings.Contains(err.Error(), "regression against "+base+" over --max-regression 25%: CPU per call ") ||
		!strings.Contains(out, "REGRESSION against "+base) {
		t.Errorf("handler bench of the module made twice as slow against the baseline: %v, want a regression\n%s", err, out)
	}
	t.Logf("the module made twice as slow:\n%s", out)
}

// TestBenchGateBaselineWithoutSamples: a baseline saved before the samples (or not a baseline)
// is refused with exit status 2, saying to save it again.
func TestBenchGateBaselineWithoutSamples(t *testing.T) {
	same, _ := benchGateModules(t, 10)
	base := filepath.Join(t.TempDir(), "old.json")
	if err := os.WriteFile(base, []byte(`{"file": "work.wasm", "concurrency": 1, "callsPerSecond": 1000}`), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := benchRoot(t, "handler", "bench", same, "--duration", "10ms", "--baseline", base)
	if exitCode(err) != 2 || !strings.Contains(err.Error(), "has no samples") || !strings.Contains(err.Error(), "--save") {
		t.Errorf("handler bench against a baseline without samples: %v (exit %d), want exit 2\n%s", err, exitCode(err), out)
	}
}

// BenchmarkBenchGate runs handler bench's gate with its defaults 20 times in each case, with
// two CPU burners beside it: a baseline saved from the work module, then the same module and
// the module made twice as slow compared with it. It reports how many times the same module
// passed (same-passed, of 20) and the slower one failed (slower-failed, of 20), and the
// largest rise of the CPU per call measured for the same module (same-max-delta-%).
//
//	go test -run '^$' -bench BenchmarkBenchGate -benchtime 1x ./cmd/wasmhost
func BenchmarkBenchGate(b *testing.B) {
	cpuBurners(b, 2)
	same, slower := benchGateModules(b, benchGateLoops)
	var passed, failed int
	var maxDelta float64
	const trials = 20
	for range b.N {
		passed, failed, maxDelta = 0, 0, 0
		for k := range trials {
			base := filepath.Join(b.TempDir(), "base.json")
			if out, err := benchRoot(b, "handler", "bench", same, "--save", base); err != nil {
				b.Fatalf("handler bench --save: %v\n%s", err, out)
			}
			out, err := benchRoot(b, "handler", "bench", same, "--baseline", base, "-o", "json")
			if err == nil {
				passed++
			}
			var res handlerbench.Result
			if json.Unmarshal([]byte(out[:strings.LastIndex(out, "}")+1]), &res) == nil && res.Gate != nil {
				maxDelta = max(maxDelta, res.Gate.RelativeCPU.Delta)
				b.Logf("trial %d, the same module: %s", k, res.Gate.RelativeCPU)
			}
			out, err = benchRoot(b, "handler", "bench", slower, "--baseline", base, "-o", "json")
			if errors.Is(err, errHandlerFailed) {
				failed++
			}
			if json.Unmarshal([]byte(out[:strings.LastIndex(out, "}")+1]), &res) == nil && res.Gate != nil {
				b.Logf("trial %d, twice as slow: %s", k, res.Gate.RelativeCPU)
			}
		}
	}
	b.ReportMetric(float64(passed), "same-passed")
	b.ReportMetric(float64(failed), "slower-failed")
	b.ReportMetric(100*maxDelta, "same-max-delta-%")
}
