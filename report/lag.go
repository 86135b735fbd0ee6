package report

import (
	"fmt"
	"maps"
	"math"
	"slices"
)

// lagRow is a row of the realtime_lag table.
type lagRow struct {
	Level string  `col:"level"`
	T     float64 `col:"t (s)"`
	P50   float64 `col:"lag p50 (s)"`
	P95   float64 `col:"lag p95 (s)"`
}

// lagOverTime draws the realtime_lag table (scripts/realtime.star): per
// level, the update lag's p50 (solid) and p95 (dashed) against session
// time, one point per bin. Nothing when the capture has no series.
func (d *captureData) lagOverTime(p *page) {
	by := map[string][]lagRow{}
	hi, span := 0.0, 0.0
	for _, r := range rows[lagRow](d, "realtime_lag") {
		if math.IsNaN(r.T) || math.IsNaN(r.P95) {
			continue
		}
		by[r.Level] = append(by[r.Level], r)
		hi, span = max(hi, r.P95), max(span, r.T)
	}
	if len(by) == 0 {
		return
	}
	levels := appendNew(slices.Clone(d.levels), slices.Sorted(maps.Keys(by))...) // sorted: the colours stay put
	svg := timePlot("lag over session time", "lag (s)", "session time (s from each session's audio origin)", hi, span, levels, func(c *canvas, xs, ys scale, lv, col string) bool {
		var a, z [][2]float64
		for _, q := range by[lv] {
			a = append(a, [2]float64{xs.at(q.T), ys.at(q.P50)})
			z = append(z, [2]float64{xs.at(q.T), ys.at(q.P95)})
			c.dot(xs.at(q.T), ys.at(q.P95), 2.5, col, fmt.Sprintf("%s: at %s s, lag p50 %s s, p95 %s s", label(lv), val(q.T), val(q.P50), val(q.P95)))
		}
		c.polyline(a, num, col, "series")
		c.polyline(z, num, col, "series dash")
		return len(by[lv]) > 0
	})
	p.figure("fig", "plot-rt-lag-time", "Does the lag grow within a session?", svg,
		"per level and second of session time, over every update of every session: p50 solid, p95 dashed with dots (realtime_lag table)")
}

// timePlot draws a plot of values from 0 to hi (labelled yLabel) against
// seconds from 0 to span (labelled xLabel): its axes, what draw draws at
// the scales for each level in the level's colour (polyline and dot draw
// nothing of no points), and the legend of the levels it drew.
func timePlot(title, yLabel, xLabel string, hi, span float64, levels []string, draw func(c *canvas, xs, ys scale, lv, col string) (drew bool)) string {
	const w, h, l, rr, tt, b = 760.0, 280.0, 62.0, 16.0, 30.0, 40.0
	c := newCanvas(w, h, "plot", title)
	ys := scale{0, niceMax(hi), h - b, tt}
	xs := scale{0, niceMax(span), l, w - rr}
	c.yAxis(ys, l, w-rr, yLabel)
	for _, tk := range ticks(0, xs.d1, 8) {
		c.text(xs.at(tk), h-b+16, "middle", "tick", val(tk))
	}
	c.text((l+w-rr)/2, h-6, "middle", "axis", xLabel)
	var names, cols []string
	for li, lv := range levels {
		if draw(c, xs, ys, lv, color(li)) {
			names, cols = append(names, label(lv)), append(cols, color(li))
		}
	}
	c.legend(l, 16, names, cols)
	return c.String()
}
