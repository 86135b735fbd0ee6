package report

import (
	"fmt"
	"math"
	"slices"
)

// lagOverTime draws the realtime_lag table (scripts/realtime.star): per
// level, the update lag's p50 (solid) and p95 (dashed) against session
// time, one point per bin. Nothing when the capture has no series.
func (d *captureData) lagOverTime(p *page) {
	t := d.tables["realtime_lag"]
	if t == nil || len(t.Rows) == 0 {
		return
	}
	ti, p50i, p95i := colIndex(t, "t (s)"), colIndex(t, "lag p50 (s)"), colIndex(t, "lag p95 (s)")
	if ti < 0 || p50i < 0 || p95i < 0 {
		return
	}
	type pt struct{ t, p50, p95 float64 }
	by := map[string][]pt{}
	hi, span := 0.0, 0.0
	for r := range t.Rows {
		q := pt{fnum(t.Values[r][ti]), fnum(t.Values[r][p50i]), fnum(t.Values[r][p95i])}
		if math.IsNaN(q.t) || math.IsNaN(q.p95) {
			continue
		}
		lv := cellLevel(t, r)
		by[lv] = append(by[lv], q)
		hi, span = max(hi, q.p95), max(span, q.t)
	}
	if len(by) == 0 {
		return
	}
	levels := slices.Clone(d.levels)
	for lv := range by {
		if !slices.Contains(levels, lv) {
			levels = append(levels, lv)
		}
	}
	svg := timePlot("lag over session time", "lag (s)", "session time (s from each session's audio origin)", hi, span, func(c *canvas, xs, ys scale) (names, cols []string) {
		for li, lv := range levels {
			qs := by[lv]
			if len(qs) == 0 {
				continue
			}
			var a, z [][2]float64
			for _, q := range qs {
				a = append(a, [2]float64{xs.at(q.t), ys.at(q.p50)})
				z = append(z, [2]float64{xs.at(q.t), ys.at(q.p95)})
				c.dot(xs.at(q.t), ys.at(q.p95), 2.5, color(li), fmt.Sprintf("%s: at %s s, lag p50 %s s, p95 %s s", label(lv), val(q.t), val(q.p50), val(q.p95)))
			}
			c.polyline(a, color(li), "series")
			c.polyline(z, color(li), "series dash")
			names, cols = append(names, label(lv)), append(cols, color(li))
		}
		return names, cols
	})
	p.figure("plot-rt-lag-time", "Does the lag grow within a session?", svg,
		"per level and second of session time, over every update of every session: p50 solid, p95 dashed with dots (realtime_lag table)")
}

// timePlot draws a plot of values from 0 to hi (labelled yLabel) against
// seconds from 0 to span (labelled xLabel): its axes, what draw draws at
// the scales, and the legend of the names and colours draw returns.
func timePlot(title, yLabel, xLabel string, hi, span float64, draw func(c *canvas, xs, ys scale) (names, cols []string)) string {
	const w, h, l, rr, tt, b = 760.0, 280.0, 62.0, 16.0, 30.0, 40.0
	c := newCanvas(w, h, "plot", title)
	ys := scale{0, niceMax(hi), h - b, tt}
	xs := scale{0, niceMax(span), l, w - rr}
	c.yAxis(ys, l, w-rr, yLabel)
	for _, tk := range ticks(0, xs.d1, 8) {
		c.text(xs.at(tk), h-b+16, "middle", "tick", val(tk))
	}
	c.text((l+w-rr)/2, h-6, "middle", "axis", xLabel)
	names, cols := draw(c, xs, ys)
	c.legend(l, 16, names, cols)
	return c.String()
}
