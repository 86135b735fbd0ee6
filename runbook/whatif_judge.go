package runbook

import (
	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/model/summary"
)

// JudgeRatio sets the measured ratio of the runs b over the runs a against the
// advice's prediction. ok is false where the advice has no prediction, no
// interval or no now to make a ratio of, or a side has no runs.
func JudgeRatio(adv bundle.WhatIfAdvice, a, b []float64) (j bundle.WhatIfJudgement, ok bool) {
	if adv.Predicted == nil || adv.Lo == nil || adv.Hi == nil || adv.Now == nil || *adv.Now == 0 || len(a) == 0 || len(b) == 0 {
		return bundle.WhatIfJudgement{}, false
	}
	ma, mb := mean(a), mean(b)
	if ma == 0 {
		return bundle.WhatIfJudgement{}, false
	}
	now := *adv.Now
	j = bundle.WhatIfJudgement{PredictedRatio: *adv.Predicted / now, Lo: *adv.Lo / now, Hi: *adv.Hi / now, MeasuredRatio: mb / ma}
	if j.Lo > j.Hi {
		j.Lo, j.Hi = j.Hi, j.Lo
	}
	j.JudgedLo, j.JudgedHi = j.Lo, j.Hi
	if s, ok := summary.AASpread(a); ok { // the one A/A rule (ab's too)
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
