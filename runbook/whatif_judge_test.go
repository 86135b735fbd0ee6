package runbook

import (
	"math"
	"testing"

	"github.com/asrprof/asrprof/bundle"
)

// JudgeRatio, computed by hand: the measured B/A within the experiment
// against the predicted ratio, the A/A spread as the floor.
func TestJudgeRatio(t *testing.T) {
	adv := func(now, pred, lo, hi float64) bundle.WhatIfAdvice {
		return bundle.WhatIfAdvice{Now: f(now), Predicted: f(pred), Lo: f(lo), Hi: f(hi)}
	}
	for _, tc := range []struct {
		name          string
		adv           bundle.WhatIfAdvice
		a, b          []float64
		ratio, lo, hi float64
		aa            float64 // -1: not measured
		inside        bool
		errPct        float64
	}{
		// predicted 2× [1.5–2.5] of a bundle at 10; the runs now read A 8 and
		// 8.4 (drifted 18 % from the bundle), B 16.4: B/A = 16.4 / 8.2 = 2.0.
		// Against the bundle's 10 the after (16.4) would read 1.64×.
		{"inside, drifted A", adv(10, 20, 15, 25), []float64{8, 8.4}, []float64{16.4}, 2.0, 1.5, 2.5, 0.4 / 8.2, true, 0},
		// the same runs against a prediction of 3× [2.8–3.2]: outside, −33 %.
		{"outside", adv(10, 30, 28, 32), []float64{8, 8.4}, []float64{16.4}, 2.0, 2.8, 3.2, 0.4 / 8.2, false, -100.0 / 3},
		// a narrow prediction, 1.2× [1.18–1.22], the A/A spread 20 %
		// (A 9 and 11): judged against [0.96–1.44]; B/A 1.1 is inside.
		{"A/A floor", adv(10, 12, 11.8, 12.2), []float64{9, 11}, []float64{11}, 1.1, 1.2 * 0.8, 1.2 * 1.2, 0.2, true, (1.1 - 1.2) / 1.2 * 100},
		// the same with one A run: no floor, B/A 1.1 is outside [1.18–1.22].
		{"one A run", adv(10, 12, 11.8, 12.2), []float64{10}, []float64{11}, 1.1, 1.18, 1.22, -1, false, (1.1 - 1.2) / 1.2 * 100},
		// a latency that halves: predicted 0.5× [0.4–0.6], measured 0.45.
		{"latency", adv(200, 100, 80, 120), []float64{190, 210}, []float64{90}, 0.45, 0.4, 0.6, 0.1, true, -10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j, ok := JudgeRatio(tc.adv, tc.a, tc.b)
			if !ok {
				t.Fatal("not judged")
			}
			near := func(x, y float64) bool { return math.Abs(x-y) < 1e-9 }
			if !near(j.MeasuredRatio, tc.ratio) || !near(j.JudgedLo, tc.lo) || !near(j.JudgedHi, tc.hi) || j.Inside != tc.inside || !near(j.ErrorPct, tc.errPct) {
				t.Errorf("%+v, want ratio %v in [%v, %v] %v, error %v %%", j, tc.ratio, tc.lo, tc.hi, tc.inside, tc.errPct)
			}
			if (tc.aa < 0) != (j.AASpread == nil) || (j.AASpread != nil && !near(*j.AASpread, tc.aa)) {
				t.Errorf("A/A spread %v, want %v", j.AASpread, tc.aa)
			}
		})
	}
	if _, ok := JudgeRatio(bundle.WhatIfAdvice{Predicted: f(2), Lo: f(1), Hi: f(3)}, []float64{1}, []float64{2}); ok {
		t.Error("judged without the bundle's now")
	}
	if _, ok := JudgeRatio(bundle.WhatIfAdvice{Now: f(1), Predicted: f(2), Lo: f(1), Hi: f(3)}, nil, []float64{2}); ok {
		t.Error("judged without A runs")
	}
}
