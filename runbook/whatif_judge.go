package runbook

import "slices"

// Judgement is what-if's verdict on one round (docs/CAPACITY.md,
// "What-if"): the ratio B/A measured within one experiment (A and B
// interleaved, A, B, A by default, each run a fresh server) against the
// ratio the advice predicted, predicted / now, whose interval is widened
// where the A/A spread (the same server measured twice in the experiment)
// is wider: no change can be told from noise narrower than that.
type Judgement struct {
	// PredictedRatio is the advice's predicted / now; Lo and Hi its
	// interval as ratios (lo / now, hi / now).
	PredictedRatio float64 `json:"predicted_ratio"`
	Lo             float64 `json:"predicted_ratio_lo"`
	Hi             float64 `json:"predicted_ratio_hi"`
	// MeasuredRatio is the mean of the B runs over the mean of the A runs.
	MeasuredRatio float64 `json:"measured_ratio"`
	// AASpread is (max − min) / mean over the A runs; nil with one A run.
	AASpread *float64 `json:"aa_spread,omitempty"`
	// JudgedLo and JudgedHi are the interval the measured ratio is judged
	// against: [Lo, Hi], each side at least PredictedRatio × AASpread away
	// from the predicted ratio.
	JudgedLo float64 `json:"judged_lo"`
	JudgedHi float64 `json:"judged_hi"`
	Inside   bool    `json:"inside"`
	// ErrorPct is (measured − predicted) / predicted ratio, in %.
	ErrorPct float64 `json:"error_pct"`
}

// JudgeRatio sets the measured ratio of the runs b over the runs a against the
// advice's prediction. ok is false where the advice has no prediction, no
// interval or no now to make a ratio of, or a side has no runs.
func JudgeRatio(adv Advice, a, b []float64) (j Judgement, ok bool) {
	if adv.Predicted == nil || adv.Lo == nil || adv.Hi == nil || adv.Now == nil || *adv.Now == 0 || len(a) == 0 || len(b) == 0 {
		return Judgement{}, false
	}
	ma, mb := mean(a), mean(b)
	if ma == 0 {
		return Judgement{}, false
	}
	now := *adv.Now
	j = Judgement{PredictedRatio: *adv.Predicted / now, Lo: *adv.Lo / now, Hi: *adv.Hi / now, MeasuredRatio: mb / ma}
	if j.Lo > j.Hi {
		j.Lo, j.Hi = j.Hi, j.Lo
	}
	j.JudgedLo, j.JudgedHi = j.Lo, j.Hi
	if len(a) >= 2 {
		s := (slices.Max(a) - slices.Min(a)) / ma
		j.AASpread = &s
		j.JudgedLo = min(j.JudgedLo, j.PredictedRatio*(1-s))
		j.JudgedHi = max(j.JudgedHi, j.PredictedRatio*(1+s))
	}
	j.Inside = j.MeasuredRatio >= j.JudgedLo && j.MeasuredRatio <= j.JudgedHi
	if j.PredictedRatio != 0 {
		j.ErrorPct = (j.MeasuredRatio - j.PredictedRatio) / j.PredictedRatio * 100
	}
	return j, true
}

func mean(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}
