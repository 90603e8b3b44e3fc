package benchcmp

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol }

// TestUTestExact checks the exact p-values against the distribution of U counted by hand (and
// tabulated): 5 against 5 with no overlap is 2 of the 252 arrangements, each way.
func TestUTestExact(t *testing.T) {
	for _, c := range []struct {
		x, y []float64
		p    float64
	}{
		{[]float64{1, 2, 3, 4, 5}, []float64{6, 7, 8, 9, 10}, 2.0 / 252},
		{[]float64{6, 7, 8, 9, 10}, []float64{1, 2, 3, 4, 5}, 2.0 / 252},
		// U = 2 (7 above 5 and 6): U = 0, 1, 2 in 1, 1 and 2 arrangements, two-sided 8/252.
		{[]float64{1, 2, 3, 4, 7}, []float64{5, 6, 8, 9, 10}, 8.0 / 252},
		// U = 3, the middle of 0..6: p = 1.
		{[]float64{1, 3, 5}, []float64{2, 4}, 1},
		{[]float64{1, 2}, []float64{3}, 2.0 / 3}, // U = 0: 1 of the 3 arrangements, each way
	} {
		if p := UTest(c.x, c.y); !near(p, c.p, 1e-12) {
			t.Errorf("UTest(%v, %v) = %v, want %v", c.x, c.y, p, c.p)
		}
	}
	if p := UTest(nil, []float64{1}); p != 1 {
		t.Errorf("UTest with an empty set = %v, want 1", p)
	}
}

// TestUTestNormal: with ties, or more than 50 samples, the normal approximation; it agrees
// with the exact distribution where both apply, and says 1 for sets of one value.
func TestUTestNormal(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		x, y := make([]float64, 30), make([]float64, 30)
		for i := range x {
			x[i], y[i] = r.NormFloat64(), r.NormFloat64()+0.5
		}
		u, _ := uStatistic(x, y)
		exact, approx := exactP(30, 30, u), normalP(x, y, u)
		if !near(exact, approx, 0.01) {
			t.Errorf("U = %v: exact p %v, normal approximation %v", u, exact, approx)
		}
	}
	if p := UTest([]float64{5, 5, 5}, []float64{5, 5, 5}); p != 1 {
		t.Errorf("UTest of equal sets = %v, want 1", p)
	}
	if p := UTest([]float64{1, 1, 2, 2, 3, 3}, []float64{7, 7, 8, 8, 9, 9}); p >= Alpha {
		t.Errorf("UTest of apart sets with ties = %v, want < %v", p, Alpha)
	}
}

func TestSummarize(t *testing.T) {
	s := Summarize([]float64{5, 1, 4, 2, 3})
	if s.N != 5 || s.Median != 3 || s.Low != 2 || s.High != 4 {
		t.Errorf("Summarize = %+v", s)
	}
	if s := Summarize([]float64{1, 2, 3, 4}); s.Median != 2.5 {
		t.Errorf("median of 1..4 = %v, want 2.5", s.Median)
	}
}

func TestPercentile(t *testing.T) {
	ds := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for q, want := range map[float64]time.Duration{0.5: 5, 0.95: 10, 0.99: 10, 0.1: 1} {
		if got := Percentile(ds, q); got != want {
			t.Errorf("Percentile(1..10, %v) = %v, want %v", q, got, want)
		}
	}
	if Percentile(nil, 0.5) != 0 {
		t.Error("Percentile of none is not 0")
	}
}

// TestCompareVerdicts: the four verdicts, on sets apart or mixed.
func TestCompareVerdicts(t *testing.T) {
	base := []float64{100, 101, 102, 103, 104, 105, 106, 107, 108, 109}
	scale := func(f float64) []float64 {
		out := make([]float64, len(base))
		for i, v := range base {
			out[i] = v * f
		}
		return out
	}
	for _, c := range []struct {
		new  []float64
		want Verdict
	}{
		{[]float64{109, 108, 100, 101, 107, 102, 106, 103, 105, 104.5}, NoChange},
		{scale(1.1), Within},
		{scale(2), Worse},
		{scale(0.5), Better},
		{scale(0.9), Within},
	} {
		if r := Compare(base, c.new, 0.25); r.Verdict != c.want {
			t.Errorf("Compare(base, %v) = %s (%v), want %s", c.new, r.Verdict, r, c.want)
		}
	}
	// Two samples each can never be told apart (p ≥ 1/3): no change, whatever the medians.
	if r := Compare([]float64{1, 1.1}, []float64{10, 11}, 0.25); r.Verdict != NoChange {
		t.Errorf("2 samples against 2: %s, want no change", r.Verdict)
	}
}

// noisyRun makes the samples of one bench run of a module whose true cost is cost, with the
// noise measured on a loaded 2-core machine with two CPU burners beside it
// (cmd/wasmhost's BenchmarkBenchGate): a drift of the whole run (σ 6 %), each sample's own
// noise (σ 8 %), and one sample in ten slowed by up to half again.
func noisyRun(r *rand.Rand, cost float64, n int) []float64 {
	drift := math.Exp(0.06 * r.NormFloat64())
	out := make([]float64, n)
	for i := range out {
		v := cost * drift * math.Exp(0.08*r.NormFloat64())
		if r.Float64() < 0.1 {
			v *= 1 + 0.5*r.Float64()
		}
		out[i] = v
	}
	return out
}

// TestCompareNoisySamples: with bench's defaults (10 samples a run, a threshold of 25 %), an
// unchanged module passes its baseline 20 times out of 20 and one twice as slow fails it 20
// times out of 20, on samples as noisy as a busy machine's; and a gate on the raw difference
// of the medians, without the test, would have failed the unchanged module.
func TestCompareNoisySamples(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 2026))
	const trials, n, threshold = 20, 10, 0.25
	var passed, failed int
	for range trials {
		base := noisyRun(r, 100, n)
		if c := Compare(base, noisyRun(r, 100, n), threshold); c.Verdict != Worse {
			passed++
		} else {
			t.Logf("unchanged: %s", c)
		}
		if c := Compare(base, noisyRun(r, 200, n), threshold); c.Verdict == Worse {
			failed++
		} else {
			t.Logf("twice as slow: %s", c)
		}
	}
	if passed != trials || failed != trials {
		t.Errorf("unchanged passed %d of %d, twice as slow failed %d of %d; want all", passed, trials, failed, trials)
	}
	// The medians of two runs of one module differ: a gate on the medians alone at 10 % (the
	// old default) fails some of them, where the test calls them no change.
	var naive, noChange int
	for range 200 {
		c := Compare(noisyRun(r, 100, n), noisyRun(r, 100, n), 0.10)
		if c.Delta > 0.10 {
			naive++
			if c.Verdict == NoChange {
				noChange++
			}
		}
	}
	if naive == 0 || noChange == 0 {
		t.Errorf("of 200 pairs of runs of one module, %d medians differ by more than 10%% (%d of them called no change): the noise model has no noise", naive, noChange)
	}
}
