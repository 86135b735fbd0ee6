package analysis

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"
	"gonum.org/v1/gonum/stat"
	"gonum.org/v1/gonum/stat/distuv"

	"github.com/asrprof/asrprof/bench/metrics"
)

// statsModule is load("stats", ...). Every function takes an iterable of
// numbers and skips None (a missing measurement); percentiles interpolate
// linearly between closest ranks, exactly as bench/metrics (and numpy) do.
func statsModule() *starlarkstruct.Module {
	fn := func(name string, f func(*starlark.Thread, *starlark.Builtin, starlark.Tuple, []starlark.Tuple) (starlark.Value, error)) *starlark.Builtin {
		return starlark.NewBuiltin(name, f)
	}
	return &starlarkstruct.Module{Name: "stats", Members: starlark.StringDict{
		"count":        fn("count", oneSeries(func(xs []float64) starlark.Value { return starlark.MakeInt(len(xs)) })),
		"sum":          fn("sum", oneSeries(func(xs []float64) starlark.Value { return starlark.Float(sum(xs)) })),
		"mean":         fn("mean", oneSeries(orNone(func(xs []float64) float64 { return metrics.Mean(xs) }))),
		"median":       fn("median", oneSeries(orNone(func(xs []float64) float64 { return metrics.Percentile(xs, 50) }))),
		"stdev":        fn("stdev", oneSeries(stdev)),
		"min":          fn("min", oneSeries(orNone(func(xs []float64) float64 { return minOf(xs) }))),
		"max":          fn("max", oneSeries(orNone(func(xs []float64) float64 { return -minOf(neg(xs)) }))),
		"percentile":   fn("percentile", percentile),
		"histogram":    fn("histogram", histogram),
		"linregress":   fn("linregress", linregress),
		"mannwhitney":  fn("mannwhitney", mannWhitney),
		"bootstrap_ci": fn("bootstrap_ci", bootstrapCI),
	}}
}

// floats converts an iterable of numbers to []float64, skipping None.
func floats(fname string, v starlark.Value) ([]float64, error) {
	it, ok := v.(starlark.Iterable)
	if !ok {
		return nil, fmt.Errorf("%s: got %s, want an iterable of numbers", fname, v.Type())
	}
	var out []float64
	if s, ok := v.(starlark.Sequence); ok {
		out = make([]float64, 0, s.Len())
	}
	iter := it.Iterate()
	defer iter.Done()
	var x starlark.Value
	for i := 0; iter.Next(&x); i++ {
		switch n := x.(type) {
		case starlark.NoneType:
			continue
		case starlark.Float:
			out = append(out, float64(n))
		case starlark.Int:
			f, _ := starlark.AsFloat(n)
			out = append(out, f)
		default:
			return nil, fmt.Errorf("%s: element %d is %s, want a number", fname, i, x.Type())
		}
	}
	return out, nil
}

func oneSeries(f func([]float64) starlark.Value) func(*starlark.Thread, *starlark.Builtin, starlark.Tuple, []starlark.Tuple) (starlark.Value, error) {
	return func(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
		var v starlark.Value
		if err := starlark.UnpackPositionalArgs(b.Name(), args, kw, 1, &v); err != nil {
			return nil, err
		}
		xs, err := floats(b.Name(), v)
		if err != nil {
			return nil, err
		}
		return f(xs), nil
	}
}

// orNone wraps f to answer None for an empty series.
func orNone(f func([]float64) float64) func([]float64) starlark.Value {
	return func(xs []float64) starlark.Value {
		if len(xs) == 0 {
			return starlark.None
		}
		return starlark.Float(f(xs))
	}
}

// sum adds in order (the order bench/metrics adds in, so that means agree
// to the last digit).
func sum(xs []float64) float64 {
	var t float64
	for _, x := range xs {
		t += x
	}
	return t
}

func minOf(xs []float64) float64 {
	m := xs[0]
	for _, x := range xs {
		m = math.Min(m, x)
	}
	return m
}

func neg(xs []float64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = -x
	}
	return out
}

// stdev is the sample standard deviation (n−1); None for fewer than two.
func stdev(xs []float64) starlark.Value {
	if len(xs) < 2 {
		return starlark.None
	}
	return starlark.Float(stat.StdDev(xs, nil))
}

func percentile(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var v, pv starlark.Value
	if err := starlark.UnpackArgs(b.Name(), args, kw, "xs", &v, "p", &pv); err != nil {
		return nil, err
	}
	p, ok := starlark.AsFloat(pv)
	if !ok {
		return nil, fmt.Errorf("%s: p is %s, want a number", b.Name(), pv.Type())
	}
	if p < 0 || p > 100 {
		return nil, fmt.Errorf("%s: p=%g, want 0..100", b.Name(), p)
	}
	xs, err := floats(b.Name(), v)
	if err != nil {
		return nil, err
	}
	if len(xs) == 0 {
		return starlark.None, nil
	}
	return starlark.Float(metrics.Percentile(xs, p)), nil
}

// histogram(xs, bins=10, lo=None, hi=None) returns [(lo, hi, count), ...];
// the last bin includes hi.
func histogram(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var v starlark.Value
	bins := 10
	var loV, hiV starlark.Value = starlark.None, starlark.None
	if err := starlark.UnpackArgs(b.Name(), args, kw, "xs", &v, "bins?", &bins, "lo?", &loV, "hi?", &hiV); err != nil {
		return nil, err
	}
	if bins < 1 {
		return nil, fmt.Errorf("%s: bins=%d, want at least 1", b.Name(), bins)
	}
	xs, err := floats(b.Name(), v)
	if err != nil {
		return nil, err
	}
	if len(xs) == 0 {
		return starlark.NewList(nil), nil
	}
	sorted := append([]float64(nil), xs...)
	sort.Float64s(sorted)
	lo, hi := sorted[0], sorted[len(sorted)-1]
	if f, ok := starlark.AsFloat(loV); ok {
		lo = f
	}
	if f, ok := starlark.AsFloat(hiV); ok {
		hi = f
	}
	if hi <= lo {
		hi = lo + 1
	}
	div := make([]float64, bins+1)
	for i := range div {
		div[i] = lo + (hi-lo)*float64(i)/float64(bins)
	}
	div[bins] = math.Nextafter(hi, math.Inf(1)) // include hi in the last bin
	// gonum's Histogram wants every x inside the dividers.
	var in []float64
	for _, x := range sorted {
		if x >= lo && x < div[bins] {
			in = append(in, x)
		}
	}
	counts := stat.Histogram(nil, div, in, nil)
	out := make([]starlark.Value, bins)
	for i := range out {
		upper := div[i+1]
		if i == bins-1 {
			upper = hi
		}
		out[i] = starlark.Tuple{starlark.Float(div[i]), starlark.Float(upper), starlark.MakeInt(int(counts[i]))}
	}
	return starlark.NewList(out), nil
}

// twoSeries unpacks the (xs, ys) arguments of a two-sample function.
func twoSeries(b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (xs, ys []float64, err error) {
	var xv, yv starlark.Value
	if err := starlark.UnpackArgs(b.Name(), args, kw, "xs", &xv, "ys", &yv); err != nil {
		return nil, nil, err
	}
	if xs, err = floats(b.Name(), xv); err != nil {
		return nil, nil, err
	}
	if ys, err = floats(b.Name(), yv); err != nil {
		return nil, nil, err
	}
	return xs, ys, nil
}

// linregress(xs, ys) fits y = intercept + slope·x by least squares.
func linregress(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	xs, ys, err := twoSeries(b, args, kw)
	if err != nil {
		return nil, err
	}
	if len(xs) != len(ys) || len(xs) < 2 {
		return nil, fmt.Errorf("%s: want two series of the same length ≥ 2, got %d and %d", b.Name(), len(xs), len(ys))
	}
	alpha, beta := stat.LinearRegression(xs, ys, nil, false)
	r := stat.Correlation(xs, ys, nil)
	return starlarkstruct.FromStringDict(starlark.String("linregress"), starlark.StringDict{
		"slope": starlark.Float(beta), "intercept": starlark.Float(alpha),
		"r": starlark.Float(r), "r2": starlark.Float(r * r), "n": starlark.MakeInt(len(xs)),
	}), nil
}

// mannWhitney(xs, ys) is the two-sided Mann-Whitney U test: struct(u, p),
// u for xs. Exact p for small samples without ties (as benchstat), else the
// normal approximation with tie and continuity corrections.
func mannWhitney(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	xs, ys, err := twoSeries(b, args, kw)
	if err != nil {
		return nil, err
	}
	if len(xs) == 0 || len(ys) == 0 {
		return nil, fmt.Errorf("%s: both samples must be non-empty (got %d and %d)", b.Name(), len(xs), len(ys))
	}
	u, p := MannWhitney(xs, ys)
	return starlarkstruct.FromStringDict(starlark.String("mannwhitney"), starlark.StringDict{
		"u": starlark.Float(u), "p": starlark.Float(p),
	}), nil
}

// MannWhitney returns the U statistic of xs and the two-sided p-value.
func MannWhitney(xs, ys []float64) (u, p float64) {
	n1, n2 := len(xs), len(ys)
	type obs struct {
		v float64
		x bool
	}
	all := make([]obs, 0, n1+n2)
	for _, v := range xs {
		all = append(all, obs{v, true})
	}
	for _, v := range ys {
		all = append(all, obs{v, false})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].v < all[j].v })
	var r1, tieSum float64
	ties := false
	for i := 0; i < len(all); {
		j := i
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
		// Exact: count the rank arrangements giving each U.
		cdf := exactUCDF(n1, n2)
		k := int(math.Round(u))
		lower := cdf[k]
		upper := 1.0
		if k > 0 {
			upper = 1 - cdf[k-1]
		}
		return u, math.Min(1, 2*math.Min(lower, upper))
	}
	n := float64(n1 + n2)
	sigma := math.Sqrt(mn / 12 * ((n + 1) - tieSum/(n*(n-1))))
	if sigma == 0 {
		return u, 1
	}
	z := (math.Abs(u-mn/2) - 0.5) / sigma
	if z < 0 {
		z = 0
	}
	return u, math.Min(1, 2*distuv.UnitNormal.Survival(z))
}

// exactUCDF returns P(U ≤ k) for k = 0..n1·n2 under the null hypothesis.
func exactUCDF(n1, n2 int) []float64 {
	m := n1 * n2
	// f[i][j] holds counts for samples of size i and j, as a slice over u.
	f := make([][][]float64, n1+1)
	for i := range f {
		f[i] = make([][]float64, n2+1)
		for j := range f[i] {
			f[i][j] = make([]float64, i*j+1)
			if i == 0 || j == 0 {
				f[i][j][0] = 1
				continue
			}
			for u := range f[i][j] {
				var c float64
				if u-j >= 0 && u-j < len(f[i-1][j]) { // largest value from xs: it beats all j ys
					c += f[i-1][j][u-j]
				}
				if u < len(f[i][j-1]) {
					c += f[i][j-1][u]
				}
				f[i][j][u] = c
			}
		}
	}
	counts := f[n1][n2]
	var total float64
	for _, c := range counts {
		total += c
	}
	cdf := make([]float64, m+1)
	var acc float64
	for k, c := range counts {
		acc += c
		cdf[k] = acc / total
	}
	return cdf
}

// bootstrapCI(xs, stat="mean", level=0.95, n=2000, seed=1) returns the
// percentile bootstrap interval (lo, hi) of stat ("mean", "median", or a
// function of a list), deterministic for a given seed.
func bootstrapCI(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var v starlark.Value
	var statV starlark.Value = starlark.String("mean")
	level := 0.95
	n := 2000
	seed := 1
	if err := starlark.UnpackArgs(b.Name(), args, kw, "xs", &v, "stat?", &statV, "level?", &level, "n?", &n, "seed?", &seed); err != nil {
		return nil, err
	}
	xs, err := floats(b.Name(), v)
	if err != nil {
		return nil, err
	}
	if len(xs) == 0 {
		return starlark.None, nil
	}
	if level <= 0 || level >= 1 || n < 1 {
		return nil, fmt.Errorf("%s: want 0 < level < 1 and n ≥ 1", b.Name())
	}
	var f func([]float64) (float64, error)
	switch s := statV.(type) {
	case starlark.String:
		switch s {
		case "mean":
			f = func(x []float64) (float64, error) { return metrics.Mean(x), nil }
		case "median":
			f = func(x []float64) (float64, error) { return metrics.Percentile(x, 50), nil }
		default:
			return nil, fmt.Errorf("%s: stat %q, want \"mean\", \"median\" or a function", b.Name(), s)
		}
	case starlark.Callable:
		f = func(x []float64) (float64, error) {
			l := make([]starlark.Value, len(x))
			for i, e := range x {
				l[i] = starlark.Float(e)
			}
			r, err := starlark.Call(thread, s, starlark.Tuple{starlark.NewList(l)}, nil)
			if err != nil {
				return 0, err
			}
			out, ok := starlark.AsFloat(r)
			if !ok {
				return 0, fmt.Errorf("%s: stat returned %s, want a number", b.Name(), r.Type())
			}
			return out, nil
		}
	default:
		return nil, fmt.Errorf("%s: stat is %s, want a string or a function", b.Name(), statV.Type())
	}
	rng := rand.New(rand.NewPCG(uint64(seed), 0x5eed))
	res := make([]float64, n)
	buf := make([]float64, len(xs))
	for i := range res {
		for j := range buf {
			buf[j] = xs[rng.IntN(len(xs))]
		}
		if res[i], err = f(buf); err != nil {
			return nil, err
		}
	}
	alpha := (1 - level) / 2
	return starlark.Tuple{
		starlark.Float(metrics.Percentile(res, 100*alpha)),
		starlark.Float(metrics.Percentile(res, 100*(1-alpha))),
	}, nil
}
