package analysis

import (
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
	cp, err := cur.Passes()
	if err != nil {
		return nil, err
	}
	bp, err := base.Passes()
	if err != nil {
		return nil, err
	}
	levels, cl := scoredByLevel(cp)
	_, bl := scoredByLevel(bp)
	var out []summary.Comparison
	for _, lv := range levels {
		if bl[lv] == nil {
			continue
		}
		for _, m := range summary.Metrics(underSLO(cp) && underSLO(bp)) {
			a, b := values(bl[lv], m.Key), values(cl[lv], m.Key)
			if len(a) == 0 || len(b) == 0 {
				continue
			}
			c := summary.Compare(a, b, alpha)
			c.Level, c.Metric = lv, m.Key
			out = append(out, c)
		}
	}
	return out, nil
}

// scoredByLevel groups the scored passes by level, the levels in run order.
func scoredByLevel(ps []model.PassMetrics) ([]string, map[string][]model.PassMetrics) {
	var levels []string
	by := map[string][]model.PassMetrics{}
	for _, p := range ps {
		if p.Warmup {
			continue
		}
		if by[p.Level] == nil {
			levels = append(levels, p.Level)
		}
		by[p.Level] = append(by[p.Level], p)
	}
	return levels, by
}

// underSLO says whether the passes counted goodput under an SLO.
func underSLO(ps []model.PassMetrics) bool {
	for _, p := range ps {
		if p.SLO != "" {
			return true
		}
	}
	return false
}

// values are the passes' values of the metric key, where they have one.
func values(ps []model.PassMetrics, key string) []float64 {
	var xs []float64
	for _, p := range ps {
		if x, ok := summary.PassValue(p, key); ok {
			xs = append(xs, x)
		}
	}
	return xs
}
