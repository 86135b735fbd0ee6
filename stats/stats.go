// Package stats holds the statistics asrprof computes: means and
// percentiles (linear interpolation between closest ranks, numpy's
// default), sample standard deviation, histograms, least-squares fits, the
// Mann-Whitney U test and bootstrap intervals.
//
// It is pure Go (stdlib and gonum) and imports nothing of asrprof's, so
// that model/summary, runbook and analysis (whose Starlark "stats" module
// is a thin binding over it) compute the same numbers the same way.
// Functions take plain []float64; none modifies its input.
package stats

import (
	"cmp"
	"errors"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"sort"

	"gonum.org/v1/gonum/stat"
	"gonum.org/v1/gonum/stat/distuv"
)

// Sum adds xs in order (the order every mean of asrprof adds in, so that
// means agree to the last digit).
func Sum(xs []float64) float64 {
	var t float64
	for _, x := range xs {
		t += x
	}
	return t
}

// Mean returns the arithmetic mean, 0 for an empty slice.
func Mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	return Sum(xs) / float64(len(xs))
}

// Percentile returns the p-th percentile (0..100) of xs by linear
// interpolation between closest ranks (numpy's default). xs need not be
// sorted. It returns 0 for an empty slice.
//
// It selects the two ranks it needs rather than sorting xs (a copy):
// the same value as PercentileSorted over sort.Float64s's order, in
// linear time (the stage table takes a p95 of every stage at every level).
func Percentile(xs []float64, p float64) float64 {
	return PercentileInPlace(append([]float64(nil), xs...), p)
}

// PercentileInPlace is Percentile without the copy: it reorders s.
func PercentileInPlace(s []float64, p float64) float64 {
	if len(s) == 0 {
		return 0
	}
	n := len(s)
	pos := p / 100 * float64(n-1)
	// Put in place the ranks that PercentileSorted reads, and only them.
	lo, hi := min(max(int(math.Floor(pos)), 0), n-1), min(max(int(math.Ceil(pos)), 0), n-1)
	selectRank(s, lo)
	if hi > lo { // the next rank: the least of the values after lo's
		m := hi
		for j := hi + 1; j < n; j++ {
			if cmp.Less(s[j], s[m]) {
				m = j
			}
		}
		s[hi], s[m] = s[m], s[hi]
	}
	return PercentileSorted(s, p)
}

// selectRank reorders s so that s[k] is the value of rank k in
// sort.Float64s's order (cmp.Less: NaN before every number), with no
// greater value before it and no smaller one after (quickselect with a
// three-way partition, so runs of equal values cost nothing; a range
// that shrinks too slowly is sorted instead).
func selectRank(s []float64, k int) {
	lo, hi := 0, len(s)-1
	for budget := 2 * bits.Len(uint(len(s))); hi > lo; budget-- {
		if hi-lo < 16 || budget == 0 {
			sort.Float64s(s[lo : hi+1])
			return
		}
		a, b, c := s[lo], s[lo+(hi-lo)/2], s[hi]
		if cmp.Less(b, a) {
			a, b = b, a
		}
		if cmp.Less(c, b) {
			b = c
			if cmp.Less(b, a) {
				b = a
			}
		}
		pivot := b // the median of the three
		lt, i, gt := lo, lo, hi
		for i <= gt {
			switch x := s[i]; {
			case cmp.Less(x, pivot):
				s[lt], s[i] = x, s[lt]
				lt++
				i++
			case cmp.Less(pivot, x):
				s[i], s[gt] = s[gt], x
				gt--
			default:
				i++
			}
		}
		switch {
		case k < lt:
			hi = lt - 1
		case k > gt:
			lo = gt + 1
		default:
			return
		}
	}
}

// PercentileSorted is Percentile of an already sorted, non-empty slice.
func PercentileSorted(s []float64, p float64) float64 {
	pos := p / 100 * float64(len(s)-1)
	lo, hi := int(math.Floor(pos)), int(math.Ceil(pos))
	switch {
	case len(s) == 1 || lo < 0:
		return s[0]
	case hi >= len(s):
		return s[len(s)-1]
	}
	return s[lo] + (s[hi]-s[lo])*(pos-float64(lo))
}

// StdDev is the sample standard deviation (n−1); ok is false for fewer
// than two values.
func StdDev(xs []float64) (sd float64, ok bool) {
	if len(xs) < 2 {
		return 0, false
	}
	return stat.StdDev(xs, nil), true
}

// Bin is one bin of a histogram: [Lo, Hi), the last one [Lo, Hi].
type Bin struct {
	Lo, Hi float64
	Count  int
}

// Histogram counts xs in bins equal bins over [lo, hi] (the last bin
// includes hi); values outside are left out. With lo and hi nil the range
// is the data's. bins must be at least 1; an empty xs gives no bins.
func Histogram(xs []float64, bins int, lo, hi *float64) []Bin {
	if len(xs) == 0 || bins < 1 {
		return nil
	}
	sorted := slices.Sorted(slices.Values(xs)) // NaN first, as sort.Float64s
	l, h := sorted[0], sorted[len(sorted)-1]
	if lo != nil {
		l = *lo
	}
	if hi != nil {
		h = *hi
	}
	if h <= l {
		h = l + 1
	}
	div := make([]float64, bins+1)
	for i := range div {
		div[i] = l + (h-l)*float64(i)/float64(bins)
	}
	div[bins] = math.Nextafter(h, math.Inf(1)) // include hi in the last bin
	// gonum's Histogram wants every x inside the dividers.
	in := slices.DeleteFunc(sorted, func(x float64) bool { return !(x >= l && x < div[bins]) })
	counts := stat.Histogram(nil, div, in, nil)
	out := make([]Bin, bins)
	for i := range out {
		out[i] = Bin{Lo: div[i], Hi: div[i+1], Count: int(counts[i])}
	}
	out[bins-1].Hi = h
	return out
}

// Fit is a least-squares line y = Intercept + Slope·x, with Pearson's R.
type Fit struct {
	Slope, Intercept, R, R2 float64
	N                       int
}

// ErrFit means LinRegress got series of different lengths or fewer than
// two points.
var ErrFit = errors.New("want two series of the same length ≥ 2")

// LinRegress fits ys against xs by least squares.
func LinRegress(xs, ys []float64) (Fit, error) {
	if len(xs) != len(ys) || len(xs) < 2 {
		return Fit{}, ErrFit
	}
	alpha, beta := stat.LinearRegression(xs, ys, nil, false)
	r := stat.Correlation(xs, ys, nil)
	return Fit{Slope: beta, Intercept: alpha, R: r, R2: r * r, N: len(xs)}, nil
}

// StudentTQuantile is the p quantile of Student's t distribution with df
// degrees of freedom (0.975 for a two-sided 95 % interval); NaN for df < 1.
func StudentTQuantile(p float64, df int) float64 {
	if df < 1 {
		return math.NaN()
	}
	return distuv.StudentsT{Mu: 0, Sigma: 1, Nu: float64(df)}.Quantile(p)
}

// MannWhitney returns the U statistic of xs and the two-sided p-value of
// the Mann-Whitney U test: exact for small samples without ties (n1+n2 ≤
// 40, as benchstat), else the normal approximation with tie and continuity
// corrections. p does not depend on the order of the samples. Both must be
// non-empty. A NaN is a rank group of its own (NaN equals nothing).
func MannWhitney(xs, ys []float64) (u, p float64) {
	n1, n2 := len(xs), len(ys)
	type obs struct {
		v float64
		x bool
	}
	all := make([]obs, 0, n1+n2)
	for i, v := range slices.Concat(xs, ys) {
		all = append(all, obs{v, i < n1})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].v < all[j].v })
	var r1, tieSum float64
	ties := false
	for i := 0; i < len(all); {
		j := i + 1 // a NaN, equal to nothing, is a group of one
		for j < len(all) && all[j].v == all[i].v {
			j++
		}
		rank := float64(i+j+1) / 2 // average of ranks i+1..j
		for k := i; k < j; k++ {
			if all[k].x {
				r1 += rank
			}
		}
		if t := float64(j - i); t > 1 {
			ties = true
			tieSum += t*t*t - t
		}
		i = j
	}
	u = r1 - float64(n1*(n1+1))/2
	mn := float64(n1 * n2)
	if !ties && n1+n2 <= 40 {
		// Exact: count the rank arrangements giving each U. The null
		// distribution is symmetric, so the two-sided p is twice the lower
		// tail of the smaller U: the same for (xs, ys) as for (ys, xs).
		cdf := exactUCDF(n1, n2)
		return u, math.Min(1, 2*cdf[int(math.Round(math.Min(u, mn-u)))])
	}
	n := float64(n1 + n2)
	sigma := math.Sqrt(mn / 12 * ((n + 1) - tieSum/(n*(n-1))))
	if sigma == 0 {
		return u, 1
	}
	z := max(0, (math.Abs(u-mn/2)-0.5)/sigma)
	return u, math.Min(1, 2*distuv.UnitNormal.Survival(z))
}

// exactUCDF returns P(U ≤ k) for k = 0..n1·n2 under the null hypothesis.
// The counts of the arrangements giving each U are the coefficients of the
// Gaussian binomial [n1+n2, n1]_q = Π_{i=1..n1} (1 − q^(n2+i)) / (1 − q^i),
// multiplied out as power series cut at q^(n1·n2); every coefficient on the
// way is an integer below 2^53 for n1+n2 ≤ 40, so the counts are exact.
func exactUCDF(n1, n2 int) []float64 {
	counts := make([]float64, n1*n2+1)
	counts[0] = 1
	for i := 1; i <= n1; i++ {
		for k := len(counts) - 1; k >= n2+i; k-- { // × (1 − q^(n2+i))
			counts[k] -= counts[k-n2-i]
		}
		for k := i; k < len(counts); k++ { // ÷ (1 − q^i)
			counts[k] += counts[k-i]
		}
	}
	total, acc := Sum(counts), 0.0
	for k, c := range counts { // the counts become the cdf in place
		acc += c
		counts[k] = acc / total
	}
	return counts
}

// ErrBootstrap means BootstrapCI got a level outside (0, 1) or n < 1.
var ErrBootstrap = errors.New("want 0 < level < 1 and n ≥ 1")

// BootstrapCI returns the percentile bootstrap interval (lo, hi) of stat
// over xs at level (e.g. 0.95) from n resamples, deterministic for a given
// seed. stat gets a resample of its own, which it may reorder. An error
// from stat stops it and is returned.
func BootstrapCI(xs []float64, stat func([]float64) (float64, error), level float64, n int, seed uint64) (lo, hi float64, err error) {
	buf := make([]float64, len(xs))
	return bootstrap(len(xs), level, n, seed, func(rng *rand.Rand) (float64, error) {
		for j := range buf {
			buf[j] = xs[rng.IntN(len(xs))]
		}
		return stat(buf)
	})
}

// bootstrap is the bootstrap the functions above and below share: n
// resamples of m values, each drawn by one from rng (m indexes in order),
// and the percentile interval of what one returns.
func bootstrap(m int, level float64, n int, seed uint64, one func(rng *rand.Rand) (float64, error)) (lo, hi float64, err error) {
	if level <= 0 || level >= 1 || n < 1 {
		return 0, 0, ErrBootstrap
	}
	if m == 0 {
		return 0, 0, nil
	}
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	res := make([]float64, n)
	for i := range res {
		if res[i], err = one(rng); err != nil {
			return 0, 0, err
		}
	}
	alpha := (1 - level) / 2
	return Percentile(res, 100*alpha), Percentile(res, 100*(1-alpha)), nil
}

// BootstrapRatioCI is BootstrapCI of the ratio of sums Σnum/Σden (0
// where Σden is 0) over the pairs (num[i], den[i]), resampled together:
// the same resamples and the same interval as BootstrapCI over the pairs'
// indexes, summed in the resample's order, without the resample's copy.
func BootstrapRatioCI(num, den []float64, level float64, n int, seed uint64) (lo, hi float64, err error) {
	return bootstrap(len(num), level, n, seed, func(rng *rand.Rand) (float64, error) {
		var a, b float64
		for range num {
			k := rng.IntN(len(num))
			a, b = a+num[k], b+den[k]
		}
		if b == 0 {
			return 0, nil
		}
		return a / b, nil
	})
}

// BootstrapPercentileCI is BootstrapCI of Percentile(·, p): the same
// resamples, the same interval, in about half the time over thousands of
// values. A resample is tallied by rank in xs's sorted order, and the two
// ranks the percentile reads are found from the top of the tally, instead
// of copying the values and selecting among them.
func BootstrapPercentileCI(xs []float64, p, level float64, n int, seed uint64) (lo, hi float64, err error) {
	m := len(xs)
	byRank := make([]int32, m) // xs's indexes in sort.Float64s's order
	for i := range byRank {
		byRank[i] = int32(i)
	}
	slices.SortFunc(byRank, func(a, b int32) int {
		if c := cmp.Compare(xs[a], xs[b]); c != 0 { // (cmp.Or, computing both, sorted 1.5x slower)
			return c
		}
		return cmp.Compare(a, b)
	})
	rank, sorted := make([]int32, m), make([]float64, m)
	for r, i := range byRank {
		rank[i], sorted[r] = int32(r), xs[i]
	}
	pos := p / 100 * float64(m-1) // PercentileSorted's reading of ranks
	klo, khi := min(max(int(math.Floor(pos)), 0), m-1), min(max(int(math.Ceil(pos)), 0), m-1)
	tally := make([]int32, m)
	return bootstrap(m, level, n, seed, func(rng *rand.Rand) (float64, error) {
		clear(tally)
		for range m {
			tally[rank[rng.IntN(m)]]++
		}
		// The resample's values of ranks klo and khi, from its largest down.
		var vlo, vhi float64
		for r, below, found := m-1, m, false; r >= 0; r-- {
			if tally[r] == 0 {
				continue
			}
			below -= int(tally[r]) // sorted[r]'s copies take ranks below.. of the resample
			if khi >= below && !found {
				vhi, found = sorted[r], true
			}
			if klo >= below {
				vlo = sorted[r]
				break
			}
		}
		if m > 1 && pos >= 0 && math.Ceil(pos) < float64(m) { // PercentileSorted's cases, on these two values
			return vlo + (vhi-vlo)*(pos-float64(klo)), nil
		}
		return vlo, nil
	})
}
