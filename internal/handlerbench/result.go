// Package handlerbench measures a handler's calls in the daemon's sandbox (a host set up as
// the daemon's, package host) and compares the figures with a saved baseline: what
// `wasmhost handler bench` runs and prints. It owns the baseline file's format (Result, as
// --save writes it and --baseline reads it), the runs and their samples (each the module's
// CPU per call over a built-in reference module's, their calls alternating), and the gate
// (benchstat's comparison, package benchcmp, with a threshold).
package handlerbench

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	"github.com/wasmhost/wasmhost/internal/benchcmp"
)

// Result is a bench's figures: what `handler bench -o json` prints, --save writes and
// --baseline reads (ReadBaseline).
type Result struct {
	File        string           `json:"file"`
	SHA256      string           `json:"sha256"`
	Concurrency int              `json:"concurrency"`
	Compile     time.Duration    `json:"compileNanoseconds"`
	Memory      int64            `json:"instanceMemoryBytes"` // of the live instances together
	Instances   int              `json:"instances"`
	Calls       int              `json:"calls"`
	Failed      int              `json:"failedCalls"`
	Elapsed     time.Duration    `json:"elapsedNanoseconds"`
	CallsPerSec float64          `json:"callsPerSecond"`
	Exports     map[string]Stats `json:"exports"`
	// Samples are one per run: what --baseline compares.
	Samples     Samples  `json:"samples"`
	Gate        *Gate    `json:"gate,omitempty"`
	Regressions []string `json:"regressions,omitempty"`
}

// Samples are a bench's samples, one per run.
type Samples struct {
	CPUPerCall []float64 `json:"cpuNanosecondsPerCall"` // the calls' threads' CPU time over the run's calls
	// RelativeCPU is CPUPerCall over the reference module's, measured in the same run: what
	// --baseline compares.
	RelativeCPU []float64 `json:"relativeCPU"`
	CallsPerSec []float64 `json:"callsPerSecond"`
}

// Gate is the comparison of a bench's CPU per call with a baseline's.
type Gate struct {
	Baseline      string           `json:"baseline"`
	MaxRegression float64          `json:"maxRegression"` // a fraction
	RelativeCPU   benchcmp.Result  `json:"relativeCPU"`
	CPUPerCall    benchcmp.Result  `json:"cpuNanosecondsPerCall"`    // shown, not gated
	CallsPerSec   *benchcmp.Result `json:"callsPerSecond,omitempty"` // shown, not gated
}

// Stats are the figures of one export's calls.
type Stats struct {
	Calls int           `json:"calls"`
	Mean  time.Duration `json:"meanNanoseconds"`
	P50   time.Duration `json:"p50Nanoseconds"`
	P95   time.Duration `json:"p95Nanoseconds"`
	P99   time.Duration `json:"p99Nanoseconds"`
}

// ExportStats are r's figures per export; none for a nil r.
func (r *Result) ExportStats() map[string]Stats {
	if r == nil {
		return nil
	}
	return r.Exports
}

// CompareWith compares r's samples with those of base (read from the file baseFile) and sets
// r.Gate; a significant rise of the CPU per call relative to the reference's over
// maxRegression (a fraction) is in r.Regressions. Calls per second and the CPU per call alone
// are compared too, and shown, not gated: on a shared machine they move with its load.
func (r *Result) CompareWith(base *Result, baseFile string, maxRegression float64) {
	cps := benchcmp.Compare(base.Samples.CallsPerSec, r.Samples.CallsPerSec, maxRegression)
	r.Gate = &Gate{Baseline: baseFile, MaxRegression: maxRegression,
		RelativeCPU: benchcmp.Compare(base.Samples.RelativeCPU, r.Samples.RelativeCPU, maxRegression),
		CPUPerCall:  benchcmp.Compare(base.Samples.CPUPerCall, r.Samples.CPUPerCall, maxRegression), CallsPerSec: &cps}
	if g := r.Gate.RelativeCPU; g.Verdict == benchcmp.Worse {
		r.Regressions = append(r.Regressions, fmt.Sprintf("CPU per call %.3g× the reference's, the baseline's %.3g×: %+.1f%% (p=%.3f, n=%d+%d)",
			g.New.Median, g.Base.Median, 100*g.Delta, g.P, g.Base.N, g.New.N))
	}
}

// Save writes r to file as a baseline (indented JSON), which ReadBaseline reads.
func (r *Result) Save(file string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(file, append(b, '\n'), 0o644)
}

// ReadBaseline reads a baseline that Save wrote, and refuses one it cannot compare a run of
// concurrency against: not such a file, another concurrency, no samples (saved by a wasmhost
// before --count), or samples that are not positive figures (zero, negative), which would
// compare nothing and pass every run. The error names the file and what is wrong.
func ReadBaseline(file string, concurrency int) (*Result, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}
	base := &Result{}
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
