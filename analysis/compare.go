package analysis

import (
	"slices"

	"github.com/asrprof/asrprof/model"
	"github.com/asrprof/asrprof/model/summary"
)

// Compare is the comparison of the capture cur with base, typed: level
// by level over cur's levels that base ran too, metric by metric
// (summary.Metrics; goodput where both ran under an SLO), each side's
// values its scored passes', base as side A. The compare analysis draws
// the same comparisons (stats.compare over the same passes); the report
// reads these.
func Compare(cur, base *Capture, alpha float64) ([]summary.Comparison, error) {
	var lvs [2][]model.LevelResult
	for i, c := range []*Capture{cur, base} {
		ps, err := c.Passes()
		if err != nil {
			return nil, err
		}
		lvs[i] = summary.Levels(ps)
	}
	var out []summary.Comparison
	for _, lr := range lvs[0] {
		i := slices.IndexFunc(lvs[1], func(b model.LevelResult) bool { return b.Level == lr.Level })
		if i < 0 {
			continue
		}
		for _, m := range summary.Metrics(lr.SLO != "" && lvs[1][i].SLO != "") {
			a, b := summary.LevelValues(lvs[1][i], m.Key), summary.LevelValues(lr, m.Key)
			if len(a) == 0 || len(b) == 0 {
				continue
			}
			c := summary.Compare(a, b, alpha)
			c.Level, c.Metric = lr.Level, m.Key
			out = append(out, c)
		}
	}
	return out, nil
}
