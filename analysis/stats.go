package analysis

import (
	"errors"
	"fmt"
	"reflect"
	"slices"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"

	"github.com/asrprof/asrprof/model/summary"
	"github.com/asrprof/asrprof/stats"
)

// statsModule is load("stats", ...), a binding of package stats (and of
// model/summary's StatOf and Compare, the per-level summary and the
// comparison). Every function takes an iterable of numbers and skips None
// (a missing measurement); an empty series gives None.
func statsModule() *starlarkstruct.Module {
	return newModule("stats", "", map[string]builtinFunc{
		"count":        oneSeries(func(xs []float64) starlark.Value { return starlark.MakeInt(len(xs)) }),
		"sum":          oneSeries(func(xs []float64) starlark.Value { return starlark.Float(stats.Sum(xs)) }),
		"mean":         oneSeries(orNone(stats.Mean)),
		"median":       oneSeries(orNone(func(xs []float64) float64 { return stats.Percentile(xs, 50) })),
		"stdev":        oneSeries(stdev),
		"min":          oneSeries(orNone(slices.Min[[]float64])),
		"max":          oneSeries(orNone(slices.Max[[]float64])),
		"percentile":   percentile,
		"histogram":    histogram,
		"linregress":   linregress,
		"mannwhitney":  mannWhitney,
		"summary":      oneSeries(statSummary),
		"compare":      compare,
		"metrics":      comparedMetrics,
		"power_note":   powerNote,
		"bootstrap_ci": bootstrapCI,
	}, nil)
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
	i := 0
	for x := range starlark.Elements(it) {
		switch x.(type) {
		case starlark.NoneType:
		case starlark.Float, starlark.Int:
			f, _ := starlark.AsFloat(x)
			out = append(out, f)
		default:
			return nil, fmt.Errorf("%s: element %d is %s, want a number", fname, i, x.Type())
		}
		i++
	}
	return out, nil
}

func oneSeries(f func([]float64) starlark.Value) builtinFunc {
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

// stdev is the sample standard deviation (n−1); None for fewer than two.
func stdev(xs []float64) starlark.Value {
	sd, ok := stats.StdDev(xs)
	return noneUnless(ok, starlark.Float(sd))
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
	return orNone(func(xs []float64) float64 { return stats.Percentile(xs, p) })(xs), nil
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
	bound := func(v starlark.Value) *float64 {
		if f, ok := starlark.AsFloat(v); ok {
			return &f
		}
		return nil
	}
	return starlark.NewList(valuesOf(stats.Histogram(xs, bins, bound(loV), bound(hiV)), func(h stats.Bin) starlark.Value {
		return starlark.Tuple{starlark.Float(h.Lo), starlark.Float(h.Hi), starlark.MakeInt(h.Count)}
	})), nil
}

// twoSeries unpacks the (xs, ys) arguments of a two-sample function, and
// the further pairs of more (starlark.UnpackArgs's).
func twoSeries(b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple, more ...any) (xs, ys []float64, err error) {
	var xv, yv starlark.Value
	if err := starlark.UnpackArgs(b.Name(), args, kw, append([]any{"xs", &xv, "ys", &yv}, more...)...); err != nil {
		return nil, nil, err
	}
	if xs, err = floats(b.Name(), xv); err == nil {
		ys, err = floats(b.Name(), yv)
	}
	return xs, ys, err
}

// twoSamples is twoSeries for a test of two samples: both non-empty.
func twoSamples(b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple, more ...any) (xs, ys []float64, err error) {
	if xs, ys, err = twoSeries(b, args, kw, more...); err == nil && (len(xs) == 0 || len(ys) == 0) {
		err = fmt.Errorf("%s: both samples must be non-empty (got %d and %d)", b.Name(), len(xs), len(ys))
	}
	return xs, ys, err
}

// linregress(xs, ys) fits y = intercept + slope·x by least squares.
func linregress(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	xs, ys, err := twoSeries(b, args, kw)
	if err != nil {
		return nil, err
	}
	fit, err := stats.LinRegress(xs, ys)
	if err != nil {
		return nil, fmt.Errorf("%s: %v, got %d and %d", b.Name(), err, len(xs), len(ys))
	}
	return goStruct("linregress", fit, nil), nil
}

// mannWhitney(xs, ys) is the two-sided Mann-Whitney U test: struct(u, p),
// u for xs (stats.MannWhitney).
func mannWhitney(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	xs, ys, err := twoSamples(b, args, kw)
	if err != nil {
		return nil, err
	}
	u, p := stats.MannWhitney(xs, ys)
	return starlarkstruct.FromStringDict(starlark.String("mannwhitney"), starlark.StringDict{
		"u": starlark.Float(u), "p": starlark.Float(p),
	}), nil
}

// statSummary is summary(xs): (mean, min, max, n) over repeats, as
// results.json's per-level numbers (summary.StatOf); (None, None, None, 0)
// for an empty series.
func statSummary(xs []float64) starlark.Value {
	if len(xs) == 0 {
		return starlark.Tuple{starlark.None, starlark.None, starlark.None, starlark.MakeInt(0)}
	}
	st := summary.StatOf(xs)
	return starlark.Tuple{starlark.Float(st.Mean), starlark.Float(st.Min), starlark.Float(st.Max), starlark.MakeInt(st.N)}
}

// compare(xs, ys, alpha=0.05) is summary.Compare of side A (xs, the
// baseline) and side B: struct(mean_a, mean_b, ratio (B/A; None when mean
// A is 0), u (for xs), p, significant (p < alpha), delta (its Delta: ~,
// +x.x % or changed), min_p (summary.MinP), n_a, n_b).
func compare(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	alpha := summary.DefaultAlpha
	xs, ys, err := twoSamples(b, args, kw, "alpha?", &alpha)
	if err != nil {
		return nil, err
	}
	c := summary.Compare(xs, ys, alpha)
	return starlarkstruct.FromStringDict(starlark.String("comparison"), starlark.StringDict{
		"mean_a": starlark.Float(c.MeanA), "mean_b": starlark.Float(c.MeanB), "ratio": goValue(reflect.ValueOf(c.Ratio)),
		"u": starlark.Float(c.U), "p": starlark.Float(c.P), "significant": starlark.Bool(c.Sig), "delta": starlark.String(c.Delta()),
		"min_p": starlark.Float(summary.MinP(len(xs), len(ys))), "n_a": starlark.MakeInt(len(xs)), "n_b": starlark.MakeInt(len(ys)),
	}), nil
}

// metrics(slo=False) is summary.Metrics, the metrics every comparison
// compares: [(label, key, format)].
func comparedMetrics(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var slo bool
	if err := starlark.UnpackArgs(b.Name(), args, kw, "slo?", &slo); err != nil {
		return nil, err
	}
	return starlark.NewList(valuesOf(summary.Metrics(slo), func(m summary.Metric) starlark.Value {
		return starlark.Tuple{starlark.String(m.Label), starlark.String(m.Key), starlark.String(m.Format)}
	})), nil
}

// power_note(comparisons, alpha, what) is summary.PowerNote of compare's
// results (their n_a and n_b): "" where a difference could show.
func powerNote(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kw []starlark.Tuple) (starlark.Value, error) {
	var list *starlark.List
	var alpha float64
	var what string
	if err := starlark.UnpackArgs(b.Name(), args, kw, "comparisons", &list, "alpha", &alpha, "what", &what); err != nil {
		return nil, err
	}
	var cs []summary.Comparison
	for i := range list.Len() {
		var n [2]int
		h, ok := list.Index(i).(starlark.HasAttrs)
		if !ok {
			return nil, fmt.Errorf("%s: comparison %d is a %s, not compare's result", b.Name(), i, list.Index(i).Type())
		}
		for k, attr := range []string{"n_a", "n_b"} {
			v, err := h.Attr(attr)
			if err == nil {
				err = starlark.AsInt(v, &n[k])
			}
			if err != nil {
				return nil, fmt.Errorf("%s: comparison %d: %s: %v", b.Name(), i, attr, err)
			}
		}
		cs = append(cs, summary.Comparison{A: make([]float64, n[0]), B: make([]float64, n[1])})
	}
	return starlark.String(summary.PowerNote(cs, alpha, what)), nil
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
	var f func([]float64) (float64, error)
	switch s := statV.(type) {
	case starlark.String:
		switch s {
		case "mean":
			f = func(x []float64) (float64, error) { return stats.Mean(x), nil }
		case "median":
			f = func(x []float64) (float64, error) { return stats.Percentile(x, 50), nil }
		default:
			return nil, fmt.Errorf("%s: stat %q, want \"mean\", \"median\" or a function", b.Name(), s)
		}
	case starlark.Callable:
		f = func(x []float64) (float64, error) {
			l := valuesOf(x, func(e float64) starlark.Value { return starlark.Float(e) })
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
	lo, hi, err := stats.BootstrapCI(xs, f, level, n, uint64(seed))
	if err != nil {
		if errors.Is(err, stats.ErrBootstrap) {
			return nil, fmt.Errorf("%s: %v", b.Name(), err)
		}
		return nil, err
	}
	return starlark.Tuple{starlark.Float(lo), starlark.Float(hi)}, nil
}
