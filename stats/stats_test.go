package stats

import (
	"errors"
	"math"
	"math/rand/v2"
	"sort"
	"testing"
	"time"
)

func TestPercentileLinear(t *testing.T) {
	// Hand-worked against numpy.percentile's default (linear) method.
	xs := []float64{4, 1, 3, 2} // sorted: 1 2 3 4
	for _, tc := range []struct{ p, want float64 }{
		{0, 1}, {50, 2.5}, {95, 3.85}, {99, 3.97}, {100, 4},
	} {
		if got := Percentile(xs, tc.p); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("Percentile(%v) = %v, want %v", tc.p, got, tc.want)
		}
	}
	if Percentile(nil, 50) != 0 || Percentile([]float64{7}, 99) != 7 {
		t.Error("edge cases")
	}
	if xs[0] != 4 {
		t.Error("input was modified")
	}
}

func TestMeanSumStdDev(t *testing.T) {
	xs := []float64{2, 4, 4, 4, 5, 5, 7, 9}
	if Mean(xs) != 5 || Mean(nil) != 0 || Sum(xs) != 40 {
		t.Errorf("mean %v sum %v", Mean(xs), Sum(xs))
	}
	if sd, ok := StdDev(xs); !ok || math.Abs(sd-2.138089935299395) > 1e-12 {
		t.Errorf("StdDev = %v, %v", sd, ok)
	}
	if _, ok := StdDev([]float64{1}); ok {
		t.Error("StdDev of one value")
	}
}

func TestMannWhitney(t *testing.T) {
	for _, tc := range []struct {
		xs, ys []float64
		u, p   float64
	}{
		// Exact: fully separated 3+3 gives 2/20; 5+5 gives 2/252.
		{[]float64{1, 2, 3}, []float64{4, 5, 6}, 0, 0.1},
		{[]float64{6, 7, 8, 9, 10}, []float64{1, 2, 3, 4, 5}, 25, 2.0 / 252},
		{[]float64{1, 3, 5}, []float64{2, 4, 6}, 3, 0.7},
		{[]float64{1, 1, 1}, []float64{1, 1, 1}, 4.5, 1}, // all tied
	} {
		u, p := MannWhitney(tc.xs, tc.ys)
		if u != tc.u || math.Abs(p-tc.p) > 1e-12 {
			t.Errorf("MannWhitney(%v, %v) = %v, %v; want %v, %v", tc.xs, tc.ys, u, p, tc.u, tc.p)
		}
	}
	// Exact and symmetric to the last bit: 3+2 separated is 2/10 either
	// way (the upper tail as 1 − P(U ≤ k−1) gave 0.19999999999999996).
	_, p1 := MannWhitney([]float64{4, 5, 6}, []float64{1, 2})
	_, p2 := MannWhitney([]float64{1, 2}, []float64{4, 5, 6})
	if p1 != 0.2 || p2 != 0.2 {
		t.Errorf("separated 3+2: p %v and %v, want 0.2", p1, p2)
	}
	// Ties: the normal approximation, still symmetric.
	_, p1 = MannWhitney([]float64{1, 2, 2, 3}, []float64{2, 3, 4, 4})
	_, p2 = MannWhitney([]float64{2, 3, 4, 4}, []float64{1, 2, 2, 3})
	if p1 != p2 || p1 <= 0 || p1 >= 1 {
		t.Errorf("tied samples: p %v and %v", p1, p2)
	}
}

func TestHistogram(t *testing.T) {
	h := Histogram([]float64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 2, nil, nil)
	if len(h) != 2 || h[0].Count != 5 || h[1].Count != 6 || h[0].Lo != 0 || h[1].Hi != 10 {
		t.Errorf("histogram %+v", h)
	}
	lo, hi := 2.0, 4.0
	h = Histogram([]float64{1, 2, 3, 4, 5}, 2, &lo, &hi)
	if h[0].Count+h[1].Count != 3 {
		t.Errorf("values outside [lo, hi] counted: %+v", h)
	}
	if Histogram(nil, 3, nil, nil) != nil {
		t.Error("bins of nothing")
	}
}

func TestLinRegress(t *testing.T) {
	f, err := LinRegress([]float64{1, 2, 3, 4}, []float64{3, 5, 7, 9})
	if err != nil || math.Abs(f.Slope-2) > 1e-12 || math.Abs(f.Intercept-1) > 1e-12 || math.Abs(f.R-1) > 1e-12 || f.N != 4 {
		t.Errorf("fit %+v %v", f, err)
	}
	if _, err := LinRegress([]float64{1}, []float64{1}); !errors.Is(err, ErrFit) {
		t.Errorf("one point: %v", err)
	}
}

func TestBootstrapCI(t *testing.T) {
	xs := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	mean := func(x []float64) (float64, error) { return Mean(x), nil }
	lo, hi, err := BootstrapCI(xs, mean, 0.95, 500, 7)
	if err != nil || !(lo < 5.5 && 5.5 < hi) {
		t.Errorf("interval %v–%v %v", lo, hi, err)
	}
	lo2, hi2, _ := BootstrapCI(xs, mean, 0.95, 500, 7)
	if lo != lo2 || hi != hi2 {
		t.Error("same seed, different interval")
	}
	if _, _, err := BootstrapCI(xs, mean, 1, 500, 7); !errors.Is(err, ErrBootstrap) {
		t.Errorf("level 1: %v", err)
	}
	boom := errors.New("boom")
	if _, _, err := BootstrapCI(xs, func([]float64) (float64, error) { return 0, boom }, 0.9, 5, 1); !errors.Is(err, boom) {
		t.Errorf("stat error: %v", err)
	}
}

// Percentile selects ranks; it must give what sorting gives, to the last
// bit, on ties, NaNs, infinities, runs of one value and every p.
func TestPercentileSelectsAsSortDoes(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 3000; trial++ {
		n := 1 + r.IntN(200)
		if trial%50 == 0 {
			n = 5000 + r.IntN(5000)
		}
		xs := make([]float64, n)
		for i := range xs {
			switch r.IntN(10) {
			case 0:
				xs[i] = math.NaN()
			case 1:
				xs[i] = math.Inf(1 - 2*r.IntN(2))
			case 2, 3, 4:
				xs[i] = float64(r.IntN(3)) // ties
			default:
				xs[i] = r.NormFloat64()
			}
			if trial%7 == 0 {
				xs[i] = 0.25 // one value throughout
			}
		}
		in := append([]float64(nil), xs...)
		sorted := append([]float64(nil), xs...)
		sort.Float64s(sorted)
		for _, p := range []float64{0, 1, 25, 50, 90, 95, 99, 99.9, 100, -5, 150, 100 * r.Float64()} {
			got, want := Percentile(xs, p), PercentileSorted(sorted, p)
			if math.Float64bits(got) != math.Float64bits(want) && !(math.IsNaN(got) && math.IsNaN(want)) {
				t.Fatalf("trial %d (n=%d) p=%v: Percentile %v, sorting gives %v", trial, n, p, got, want)
			}
		}
		for i := range xs {
			if math.Float64bits(xs[i]) != math.Float64bits(in[i]) {
				t.Fatalf("trial %d: Percentile modified its input", trial)
			}
		}
	}
}

// TestMannWhitneyNaNEnds: a NaN among the samples used to stall the tie
// loop forever (NaN == NaN is false, so the group never grew past i).
func TestMannWhitneyNaNEnds(t *testing.T) {
	done := make(chan float64, 1)
	go func() {
		u, _ := MannWhitney([]float64{1, math.NaN(), 3}, []float64{2, 4})
		done <- u
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("MannWhitney did not return within 5 s on a NaN input")
	}
	// Without a NaN, the groups are what they were: ties still average.
	u, _ := MannWhitney([]float64{1, 2, 2}, []float64{2, 3})
	if u != 1 {
		t.Errorf("U of {1,2,2} against {2,3} = %v, want 1", u)
	}
}

// Student's t 0.975 quantiles from the printed tables (df 1, 2, 10, 30,
// 60, 120), and NaN where there is no freedom.
func TestStudentTQuantile(t *testing.T) {
	for df, want := range map[int]float64{1: 12.706, 2: 4.303, 10: 2.228, 30: 2.042, 60: 2.000, 120: 1.980} {
		if got := StudentTQuantile(0.975, df); math.Abs(got-want) > 0.0005 {
			t.Errorf("df %d: %.4f, want %.3f", df, got, want)
		}
	}
	if got := StudentTQuantile(0.975, 0); !math.IsNaN(got) {
		t.Errorf("df 0: %v, want NaN", got)
	}
}

// The percentile's bootstrap gives BootstrapCI's interval to the last
// bit: on values with ties, NaNs and infinities, at percentiles inside
// and at the ends, for one value and many.
func TestBootstrapPercentileCIIsBootstrapCI(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, m := range []int{1, 2, 3, 17, 400} {
		xs := make([]float64, m)
		for i := range xs {
			switch k := rng.IntN(20); {
			case k == 0:
				xs[i] = math.NaN()
			case k == 1:
				xs[i] = math.Inf(1)
			case k < 8:
				xs[i] = float64(rng.IntN(4)) // ties
			default:
				xs[i] = rng.NormFloat64()
			}
		}
		for _, p := range []float64{0, 5, 50, 95, 99.5, 100} {
			stat := func(s []float64) (float64, error) { return Percentile(s, p), nil }
			lo, hi, err := BootstrapCI(xs, stat, 0.9, 200, uint64(m))
			lo2, hi2, err2 := BootstrapPercentileCI(xs, p, 0.9, 200, uint64(m))
			same := func(a, b float64) bool { return a == b || math.IsNaN(a) && math.IsNaN(b) }
			if err != nil || err2 != nil || !same(lo, lo2) || !same(hi, hi2) {
				t.Errorf("m=%d p=%v: BootstrapCI (%v, %v, %v), BootstrapPercentileCI (%v, %v, %v)", m, p, lo, hi, err, lo2, hi2, err2)
			}
		}
	}
	if _, _, err := BootstrapPercentileCI([]float64{1}, 95, 0, 10, 1); !errors.Is(err, ErrBootstrap) {
		t.Errorf("level 0: %v, want ErrBootstrap", err)
	}
}

// The ratio's bootstrap gives BootstrapCI's interval over the pairs'
// indexes to the last bit, a zero denominator included.
func TestBootstrapRatioCIIsBootstrapCI(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, m := range []int{1, 2, 9, 300} {
		num, den, idx := make([]float64, m), make([]float64, m), make([]float64, m)
		for i := range num {
			num[i], den[i], idx[i] = float64(rng.IntN(5)), float64(rng.IntN(3))*rng.Float64(), float64(i)
		}
		ratio := func(ix []float64) (float64, error) {
			var a, b float64
			for _, k := range ix {
				a, b = a+num[int(k)], b+den[int(k)]
			}
			if b == 0 {
				return 0, nil
			}
			return a / b, nil
		}
		lo, hi, _ := BootstrapCI(idx, ratio, 0.95, 300, uint64(m))
		lo2, hi2, _ := BootstrapRatioCI(num, den, 0.95, 300, uint64(m))
		if lo != lo2 || hi != hi2 {
			t.Errorf("m=%d: BootstrapCI (%v, %v), BootstrapRatioCI (%v, %v)", m, lo, hi, lo2, hi2)
		}
	}
}
