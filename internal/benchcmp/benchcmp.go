// Package benchcmp compares two sets of benchmark samples the way benchstat does: each set
// summarized by its median, the difference judged by a Mann-Whitney U test, and called no
// change ("~") when the test cannot tell the sets apart, however far apart their medians.
// On top of that, a gate (Compare's threshold): a difference counts as a regression only when
// it is both significant and larger than the threshold, so that the drift a busy machine puts
// between two runs, which a test of many samples finds significant, does not fail it.
//
// `wasmhost handler bench --baseline` gates on it (cmd/wasmhost/handlerbench.go).
package benchcmp

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Alpha is the significance level: a difference whose p-value is at or above it is no change.
// benchstat's default.
const Alpha = 0.05

// Summary describes a set of samples.
type Summary struct {
	N      int     `json:"n"`
	Median float64 `json:"median"`
	// Low and High are the first and third quartiles: half the samples lie between them.
	Low  float64 `json:"low"`
	High float64 `json:"high"`
}

// Summarize summarizes xs (in any order; xs is not changed).
func Summarize(xs []float64) Summary {
	s := slices.Clone(xs)
	slices.Sort(s)
	return Summary{N: len(s), Median: quantile(s, 0.5), Low: quantile(s, 0.25), High: quantile(s, 0.75)}
}

// quantile is the q-quantile of sorted s, interpolated between the two nearest ranks; 0 for no
// samples.
func quantile(s []float64, q float64) float64 {
	if len(s) == 0 {
		return 0
	}
	pos := q * float64(len(s)-1)
	i := int(pos)
	if i+1 >= len(s) {
		return s[len(s)-1]
	}
	return s[i] + (pos-float64(i))*(s[i+1]-s[i])
}

// Verdict is what a comparison concludes.
type Verdict string

const (
	// NoChange: the U test cannot tell the sets apart (p ≥ Alpha), or there are too few
	// samples for it to ever tell.
	NoChange Verdict = "~"
	// Within: the sets differ, by no more than the threshold.
	Within Verdict = "within"
	// Worse: the new set's median is higher (the samples are costs: time per call) by more
	// than the threshold, and the difference is significant.
	Worse Verdict = "worse"
	// Better: lower by more than the threshold, and significant.
	Better Verdict = "better"
)

// Result is a comparison of a new set of samples with a base set.
type Result struct {
	Base, New Summary
	// Delta is the change of the median, New/Base - 1: +1.0 is twice the base.
	Delta float64
	// P is the two-sided p-value of the Mann-Whitney U test: how likely sets this different
	// are when both come from one distribution.
	P       float64
	Verdict Verdict
}

// String says the result as benchstat would: "12.0µ ± 5% → 24.1µ ± 3%  +100.8% (p=0.000 n=10+10)".
func (r Result) String() string {
	delta := "~"
	if r.Verdict != NoChange {
		delta = fmt.Sprintf("%+.1f%%", 100*r.Delta)
	}
	return fmt.Sprintf("median %.4g → %.4g  %s (p=%.3f n=%d+%d)", r.Base.Median, r.New.Median, delta, r.P, r.Base.N, r.New.N)
}

// Compare compares samples of a cost (lower is better) from a new run with those of a base
// run. A difference is significant when the U test's p-value is below Alpha; a significant one
// larger than threshold (a fraction: 0.25 for 25 %) is Worse or Better, a smaller one Within.
func Compare(base, new []float64, threshold float64) Result {
	r := Result{Base: Summarize(base), New: Summarize(new), P: UTest(base, new)}
	if r.Base.Median != 0 {
		r.Delta = r.New.Median/r.Base.Median - 1
	}
	switch {
	case r.P >= Alpha:
		r.Verdict = NoChange
	case r.Delta > threshold:
		r.Verdict = Worse
	case r.Delta < -threshold/(1+threshold): // as far below as threshold is above: 1/(1+t)
		r.Verdict = Better
	default:
		r.Verdict = Within
	}
	return r
}

// UTest returns the two-sided p-value of the Mann-Whitney U test of x against y: exact when
// neither has more than 50 samples and no value is shared between them, else from the normal
// approximation with the correction for ties. 1 when either set is empty.
func UTest(x, y []float64) float64 {
	n1, n2 := len(x), len(y)
	if n1 == 0 || n2 == 0 {
		return 1
	}
	u, ties := uStatistic(x, y)
	if !ties && n1 <= 50 && n2 <= 50 {
		return exactP(n1, n2, u)
	}
	return normalP(x, y, u)
}

// uStatistic returns U of x (the number of pairs in which x's value is above y's, ties
// counting a half) and whether any value appears in both, or twice in either.
func uStatistic(x, y []float64) (u float64, ties bool) {
	all := append(slices.Clone(x), y...)
	slices.Sort(all)
	for i := 1; i < len(all); i++ {
		if all[i] == all[i-1] {
			ties = true
		}
	}
	for _, a := range x {
		for _, b := range y {
			switch {
			case a > b:
				u++
			case a == b:
				u += 0.5
			}
		}
	}
	return u, ties
}

// exactP is the two-sided p-value of U = u for samples of n1 and n2 values without ties, from
// the exact distribution of U: count[k] arrangements of the two samples give U = k.
func exactP(n1, n2 int, u float64) float64 {
	// dist[i][j] is the distribution of U for samples of i and j values, by the recurrence
	// U(i, j) = U(i-1, j) + j (the largest value is x's) or U(i, j-1) (it is y's).
	top := n1 * n2
	prev := make([][]float64, n2+1) // row i-1
	for j := range prev {
		prev[j] = make([]float64, top+1)
		prev[j][0] = 1 // i = 0: U = 0 in the one arrangement
	}
	for i := 1; i <= n1; i++ {
		cur := make([][]float64, n2+1)
		cur[0] = make([]float64, top+1)
		cur[0][0] = 1 // j = 0: U = 0
		for j := 1; j <= n2; j++ {
			cur[j] = make([]float64, top+1)
			for k := 0; k <= i*j; k++ {
				c := cur[j-1][k]
				if k >= j {
					c += prev[j][k-j]
				}
				cur[j][k] = c
			}
		}
		prev = cur
	}
	dist := prev[n2]
	var total, below, above float64
	for k, c := range dist {
		total += c
		if float64(k) <= u {
			below += c
		}
		if float64(k) >= u {
			above += c
		}
	}
	return math.Min(1, 2*math.Min(below, above)/total)
}

// normalP is the two-sided p-value of U = u from the normal approximation, with the variance
// corrected for ties and a continuity correction.
func normalP(x, y []float64, u float64) float64 {
	n1, n2 := float64(len(x)), float64(len(y))
	n := n1 + n2
	all := append(slices.Clone(x), y...)
	slices.Sort(all)
	var tieTerm float64
	for i := 0; i < len(all); {
		j := i
		for j < len(all) && all[j] == all[i] {
			j++
		}
		t := float64(j - i)
		tieTerm += t*t*t - t
		i = j
	}
	mean := n1 * n2 / 2
	variance := n1 * n2 / 12 * ((n + 1) - tieTerm/(n*(n-1)))
	if variance <= 0 {
		return 1 // every value the same
	}
	z := (math.Abs(u-mean) - 0.5) / math.Sqrt(variance)
	if z < 0 {
		z = 0
	}
	return math.Min(1, math.Erfc(z/math.Sqrt2))
}

// Percentile is the q-quantile of sorted ds by the nearest rank (what p50, p95 and p99 of a
// bench's latencies are); 0 for none.
func Percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(ds)))) - 1
	return ds[max(0, min(i, len(ds)-1))]
}
