package report

import (
	"cmp"
	"fmt"
	"html"
	"math"
	"slices"
	"strconv"
	"strings"
)

// The plots are SVG drawn here, in Go, as text: a few primitives (scales,
// ticks, axes, lines, bars) are all the report needs, the output is small
// and readable with JavaScript off, and no font or library is embedded
// (docs/REPORT.md says why not gonum/plot).

// palette holds the series colours (Okabe–Ito, told apart by most colour
// blind readers), then a few more.
var palette = []string{"#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#f0e442", "#000000", "#999999", "#7f3c8d"}

func color(i int) string { return palette[i%len(palette)] }

// esc escapes text for HTML and SVG.
func esc(s string) string { return html.EscapeString(s) }

// num formats a coordinate compactly.
func num(v float64) string { return rounded(v, 100) }

// tnum formats seconds to the microsecond.
func tnum(v float64) string { return rounded(v, 1e6) }

// rounded formats v rounded to a multiple of 1/per, NaN and ±Inf as 0.
func rounded(v, per float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "0"
	}
	return strconv.FormatFloat(math.Round(v*per)/per, 'f', -1, 64)
}

// val formats a value for labels and tooltips: 3–4 significant digits.
func val(v float64) string {
	a := math.Abs(v)
	switch {
	case v == 0:
		return "0"
	case a >= 1000:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	default:
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
}

// tickval formats a round tick value without trailing zeros.
func tickval(v float64) string {
	s := strconv.FormatFloat(v, 'f', 6, 64)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	if s == "-0" {
		return "0"
	}
	return s
}

// scale maps a data interval onto a pixel interval.
type scale struct{ d0, d1, r0, r1 float64 }

func (s scale) at(v float64) float64 {
	if s.d1 == s.d0 {
		return (s.r0 + s.r1) / 2
	}
	return s.r0 + (v-s.d0)/(s.d1-s.d0)*(s.r1-s.r0)
}

// ticks returns about n round values covering [lo, hi].
func ticks(lo, hi float64, n int) []float64 {
	if !(hi > lo) {
		return []float64{lo}
	}
	raw := (hi - lo) / float64(max(n, 1))
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var out []float64
	for v := math.Ceil(lo/step-1e-9) * step; v <= hi+step*1e-9; v += step {
		out = append(out, math.Round(v/step)*step)
	}
	return out
}

// niceMax rounds a maximum up to a tick, with zero for an empty range.
func niceMax(hi float64) float64 {
	if !(hi > 0) {
		return 1
	}
	t := ticks(0, hi, 5)
	last := t[len(t)-1]
	if last < hi {
		last += t[1] - t[0]
	}
	return last
}

// canvas is one SVG being written.
type canvas struct {
	b strings.Builder
	w float64
}

func newCanvas(w, h float64, class, label string) *canvas {
	c := &canvas{w: w}
	// No width or height: the page's CSS fills the figure's column with
	// it, the viewBox keeping its aspect (docs/REPORT.md, "Layout").
	// At most 1.6× its own size, so that its text stays in proportion.
	fmt.Fprintf(&c.b, `<svg xmlns="http://www.w3.org/2000/svg" class="%s" viewBox="0 0 %s %s" preserveAspectRatio="xMinYMin meet" style="max-width:%spx" role="img" aria-label="%s">`,
		class, num(w), num(h), num(1.6*w), esc(label))
	return c
}

func (c *canvas) raw(s string)                 { c.b.WriteString(s) }
func (c *canvas) f(format string, args ...any) { fmt.Fprintf(&c.b, format, args...) }

func (c *canvas) text(x, y float64, anchor, class, s string) {
	c.f(`<text x="%s" y="%s" text-anchor="%s" class="%s">%s</text>`, num(x), num(y), anchor, class, esc(s))
}

func (c *canvas) line(x1, y1, x2, y2 float64, class string) {
	c.f(`<line x1="%s" y1="%s" x2="%s" y2="%s" class="%s"/>`, num(x1), num(y1), num(x2), num(y2), class)
}

func (c *canvas) rect(x, y, w, h float64, fill, title string) {
	c.f(`<rect x="%s" y="%s" width="%s" height="%s" fill="%s">`, num(x), num(y), num(max(w, 0)), num(max(h, 0)), fill)
	if title != "" {
		c.f(`<title>%s</title>`, esc(title))
	}
	c.raw(`</rect>`)
}

func (c *canvas) dot(x, y, r float64, fill, title string) {
	c.f(`<circle cx="%s" cy="%s" r="%s" fill="%s"><title>%s</title></circle>`, num(x), num(y), num(r), fill, esc(title))
}

// polyline draws pts (nothing of none), their x written by x (num, or
// tnum for the timeline's seconds).
func (c *canvas) polyline(pts [][2]float64, x func(float64) string, stroke, class string) {
	if len(pts) == 0 {
		return
	}
	c.f(`<polyline fill="none" stroke="%s" class="%s" points="`, stroke, class)
	for i, p := range pts {
		if i > 0 {
			c.raw(" ")
		}
		c.raw(x(p[0]) + "," + num(p[1]))
	}
	c.raw(`"/>`)
}

func (c *canvas) String() string { return c.b.String() + "</svg>" }

// yAxis draws horizontal grid lines and labels for ys at x0..x1.
func (c *canvas) yAxis(ys scale, x0, x1 float64, label string) {
	for _, t := range ticks(ys.d0, ys.d1, 5) {
		y := ys.at(t)
		c.line(x0, y, x1, y, "grid")
		c.text(x0-5, y+4, "end", "tick", tickval(t))
	}
	c.f(`<text class="axis" transform="translate(12,%s) rotate(-90)" text-anchor="middle">%s</text>`, num((ys.r0+ys.r1)/2), esc(label))
}

// xTicks draws, at each of vs on xs, a tick mark from y down to y+long
// and its label, label(v), at y+dy.
func (c *canvas) xTicks(xs scale, vs []float64, y, long, dy float64, label func(float64) string) {
	for _, v := range vs {
		x := xs.at(v)
		c.line(x, y, x, y+long, "axisline")
		c.text(x, y+dy, "middle", "tick", label(v))
	}
}

// legend draws names with their colours (nil: the palette's, in order)
// from (x, y), in as many rows of 16 px as they need to fit before the
// canvas's right edge; it returns the rows drawn.
func (c *canvas) legend(x, y float64, names []string, colors []string) int {
	return legendRows(x, c.w, names, func(i int, x, dy float64) {
		col := color(i)
		if colors != nil {
			col = colors[i]
		}
		c.rect(x, y+dy-9, 12, 10, col, "")
		c.text(x+16, y+dy, "start", "legend", names[i])
	})
}

// legendRows lays names out from x on a canvas w wide and calls at (when
// set) with each one's x and its row's offset down; it returns the rows
// (with at nil: how many rows legend will draw).
func legendRows(x, w float64, names []string, at func(i int, x, dy float64)) int {
	x0, rows := x, 1
	for i, n := range names {
		nw := 24 + 7*float64(len([]rune(n)))
		if x > x0 && x+nw > w-10 {
			x, rows = x0, rows+1
		}
		if at != nil {
			at(i, x, 16*float64(rows-1))
		}
		x += nw
	}
	return rows
}

// seriesCat is one series over categories: a value per category (NaN: none)
// with its min–max whisker (NaN: none).
type seriesCat struct {
	name      string
	color     string
	dash      bool
	y, lo, hi []float64
	tips      []string
}

// catLines draws series over categorical x (levels) with whiskers, and a
// dashed marker at category mark (-1: none) labelled markLabel.
func catLines(title, ylabel string, cats []string, ss []seriesCat, mark int, markLabel string) string {
	const w, l, r, b = 520.0, 62.0, 16.0, 40.0
	var names, cols []string
	for _, s := range ss {
		names, cols = append(names, s.name), append(cols, s.color)
	}
	t := 14 + 16*float64(legendRows(l, w, names, nil))
	h := 270 + t
	c := newCanvas(w, h, "plot", title)
	hi := 0.0
	for _, s := range ss {
		for i := range s.y {
			for _, v := range []float64{s.y[i], s.hi[i]} {
				if !math.IsNaN(v) && v > hi {
					hi = v
				}
			}
		}
	}
	ys := scale{0, niceMax(hi), h - b, t}
	c.yAxis(ys, l, w-r, ylabel)
	step := (w - l - r) / float64(max(len(cats), 1))
	xat := func(i int) float64 { return l + step*(float64(i)+0.5) }
	for i, cat := range cats {
		c.text(xat(i), h-b+16, "middle", "tick", cat)
	}
	c.text((l+w-r)/2, h-6, "middle", "axis", "level")
	if mark >= 0 && mark < len(cats) {
		x := xat(mark)
		c.line(x, t, x, h-b, "knee")
		c.text(x+4, t+10, "start", "kneelabel", markLabel)
	}
	for si, s := range ss {
		off := (float64(si) - float64(len(ss)-1)/2) * 5
		var pts [][2]float64
		for i := range s.y {
			if math.IsNaN(s.y[i]) {
				continue
			}
			pts = append(pts, [2]float64{xat(i) + off, ys.at(s.y[i])})
		}
		cls := "series"
		if s.dash {
			cls = "series dash"
		}
		c.polyline(pts, num, s.color, cls)
		for i := range s.y {
			if math.IsNaN(s.y[i]) {
				continue
			}
			x := xat(i) + off
			if !math.IsNaN(s.lo[i]) && !math.IsNaN(s.hi[i]) && s.hi[i] > s.lo[i] {
				c.f(`<path class="whisker" stroke="%s" d="M%s %sV%sM%s %sH%sM%s %sH%s"/>`, s.color,
					num(x), num(ys.at(s.lo[i])), num(ys.at(s.hi[i])),
					num(x-4), num(ys.at(s.lo[i])), num(x+4), num(x-4), num(ys.at(s.hi[i])), num(x+4))
			}
			tip := s.name + " at " + cats[i] + ": " + val(s.y[i])
			if i < len(s.tips) && s.tips[i] != "" {
				tip = s.tips[i]
			}
			c.dot(x, ys.at(s.y[i]), 3.5, s.color, tip)
		}
	}
	c.legend(l, 16, names, cols)
	return c.String()
}

// stackBar is one bar: its label and the value of each stack part.
type stackBar struct {
	label string
	group string // the category the bar stands in (a level); bars of one group sit together
	parts []float64
}

// stackedBars draws vertical stacked bars, one per entry, grouped by group.
func stackedBars(title, ylabel string, names []string, bars []stackBar) string {
	const w, l, r, b = 1100.0, 62.0, 16.0, 44.0
	t := 14 + 16*float64(legendRows(l, w, names, nil))
	h := 284 + t
	c := newCanvas(w, h, "plot", title)
	// Each bar's stacked height, its group (its index in groups) and its
	// place in the group.
	total, gi, k := make([]float64, len(bars)), make([]int, len(bars)), make([]int, len(bars))
	var groups []string
	var inGroup []int // bars per group
	hi := 0.0
	for i, br := range bars {
		for _, v := range br.parts {
			total[i] += max(v, 0)
		}
		hi = max(hi, total[i])
		if i == 0 || br.group != bars[i-1].group {
			groups, inGroup = append(groups, br.group), append(inGroup, 0)
		}
		gi[i], k[i] = len(groups)-1, inGroup[len(groups)-1]
		inGroup[len(groups)-1]++
	}
	ys := scale{0, niceMax(hi), h - b, t}
	c.yAxis(ys, l, w-r, ylabel)
	gw := (w - l - r) / float64(max(len(groups), 1))
	for i, br := range bars {
		n := float64(inGroup[gi[i]])
		bw := min(gw*0.7/n, 70)
		x := l + gw*float64(gi[i]) + gw/2 - bw*n/2 - 2*(n-1) + float64(k[i])*(bw+4)
		y := h - b
		for pi, v := range br.parts {
			if !(v > 0) {
				continue
			}
			hgt := (h - b) - ys.at(v)
			y -= hgt
			c.rect(x, y, bw, hgt, color(pi), fmt.Sprintf("%s, %s: %s ms (%.0f %%)", br.label, names[pi], val(v), 100*v/total[i]))
		}
		if n > 1 {
			c.text(x+bw/2, h-b+13, "middle", "tick small", br.label)
		}
	}
	for g, name := range groups {
		yy := h - b + 16
		if len(bars) > len(groups) {
			yy = h - b + 28
		}
		c.text(l+gw*float64(g)+gw/2, yy, "middle", "tick", name)
	}
	c.legend(l, 14, names, nil)
	return c.String()
}

// cdfSeries is one level's distribution: values at cumulative fractions.
type cdfSeries struct {
	name string
	xs   []float64 // seconds, ascending
	ps   []float64 // fractions 0..1
	n    int
}

func cdfPlot(title string, ss []cdfSeries) string {
	const w, h, l, r, t, b = 520.0, 300.0, 62.0, 16.0, 30.0, 40.0
	c := newCanvas(w, h, "plot", title)
	hi := 0.0
	for _, s := range ss {
		if len(s.xs) > 0 {
			hi = max(hi, s.xs[len(s.xs)-1])
		}
	}
	xs := scale{0, niceMax(hi), l, w - r}
	ys := scale{0, 1, h - b, t}
	for _, p := range []float64{0, 0.25, 0.5, 0.75, 0.9, 1} {
		y := ys.at(p)
		c.line(l, y, w-r, y, "grid")
		c.text(l-5, y+4, "end", "tick", strconv.FormatFloat(p*100, 'f', -1, 64)+"%")
	}
	c.xTicks(xs, ticks(0, xs.d1, 6), h-b, 4, 16, tickval)
	c.text((l+w-r)/2, h-6, "middle", "axis", "client latency (s)")
	c.f(`<text class="axis" transform="translate(12,%s) rotate(-90)" text-anchor="middle">share of requests ≤ x</text>`, num((t+h-b)/2))
	var names []string
	for si, s := range ss {
		var pts [][2]float64
		for i := range s.xs {
			pts = append(pts, [2]float64{xs.at(s.xs[i]), ys.at(s.ps[i])})
		}
		c.polyline(pts, num, color(si), "series")
		for _, q := range []float64{0.5, 0.95, 0.99} {
			if i := nearest(s.ps, q); i >= 0 {
				c.dot(xs.at(s.xs[i]), ys.at(s.ps[i]), 2.5, color(si), fmt.Sprintf("%s: p%s %s s (%d requests)", s.name, strconv.FormatFloat(q*100, 'f', -1, 64), val(s.xs[i]), s.n))
			}
		}
		names = append(names, s.name)
	}
	c.legend(l, 16, names, nil)
	return c.String()
}

func nearest(ps []float64, q float64) int {
	best, bd := -1, math.Inf(1)
	for i, p := range ps {
		if d := math.Abs(p - q); d < bd {
			best, bd = i, d
		}
	}
	return best
}

// hbars draws labelled horizontal bars (the hottest functions).
func hbars(title, unit string, labels []string, vals []float64, tips []string, col string) string {
	const w, l, r = 760.0, 330.0, 70.0
	rowH := 18.0
	h := 10 + rowH*float64(len(labels))
	c := newCanvas(w, h, "plot", title)
	xs := scale{0, niceMax(slices.Max(vals)), l, w - r}
	for i, lab := range labels {
		y := 5 + rowH*float64(i)
		name := lab
		if len([]rune(name)) > 48 {
			name = string([]rune(name)[:47]) + "…"
		}
		c.text(l-6, y+12, "end", "tick", name)
		c.rect(l, y+2, xs.at(vals[i])-l, rowH-5, col, tips[i])
		c.text(xs.at(vals[i])+4, y+12, "start", "tick", val(vals[i])+unit)
	}
	return c.String()
}

// statePalette colours the states of the attribution and of the black box
// (analysis/engine's AttributionStates and BlackBoxStates) by name, the
// same in every plot: the waits warm, the running batch (the service)
// blues and greens, delivery purple, unattributed grey.
var statePalette = map[string]string{
	"connect":                 "#8c6d31",
	"upload":                  "#e69f00",
	"build wait":              "#f0c35a",
	"build":                   "#d55e00",
	"admission wait":          "#cc79a7",
	"waiting behind others":   "#cc79a7",
	"running: host work":      "#0072b2",
	"service: host work":      "#0072b2",
	"running: GPU wait":       "#009e73",
	"service: GPU wait":       "#009e73",
	"running: runnable":       "#56b4e9",
	"service: runnable":       "#56b4e9",
	"running: off-CPU":        "#9ecae1",
	"service: off-CPU":        "#9ecae1",
	"running: no thread data": "#c7d7e8",
	"service: no thread data": "#c7d7e8",
	"first-forward stall":     "#b2182b",
	"response delivery":       "#7f3c8d",
	"unattributed":            "#bbbbbb",
}

// stateColor is a state's colour (grey for a name the palette lacks).
func stateColor(name string) string { return cmp.Or(statePalette[name], "#bbbbbb") }

// stateBar is one level's attribution: each state's share of the level's
// summed latency (0–1, indexed like names) and the mean latency.
type stateBar struct {
	label  string
	shares []float64
	means  []float64 // ms per request
	meanMs float64
}

// stateBars draws one horizontal bar per level, 100 % wide, split into
// its states in the order of names, with a legend of the states drawn.
func stateBars(title string, names []string, colors []string, bars []stateBar) string {
	const w, l, r, rowH = 1100.0, 70.0, 110.0, 26.0
	t := 8 + 16*float64(legendRows(l, w, names, nil))
	h := t + 8 + rowH*float64(len(bars)) + 26
	c := newCanvas(w, h, "plot states", title)
	c.legend(l, 16, names, colors)
	xs := scale{0, 1, l, w - r}
	y := t + 8
	for _, b := range bars {
		c.text(l-6, y+16, "end", "tick", b.label)
		x := 0.0
		for i, sh := range b.shares {
			if !(sh > 0) {
				continue
			}
			c.f(`<rect class="state" data-state="%s" x="%s" y="%s" width="%s" height="%s" fill="%s"><title>%s, %s: %.1f %% of the latency, %s ms per request (mean)</title></rect>`,
				esc(names[i]), num(xs.at(x)), num(y+3), num(xs.at(x+sh)-xs.at(x)), num(rowH-6), colors[i],
				esc(b.label), esc(names[i]), 100*sh, val(b.means[i]))
			if xs.at(x+sh)-xs.at(x) > 34 {
				c.text(xs.at(x)+3, y+17, "start", "fl", fmt.Sprintf("%.0f %%", 100*sh))
			}
			x += sh
		}
		c.text(w-r+6, y+17, "start", "tick", "mean "+val(b.meanMs)+" ms")
		y += rowH
	}
	c.xTicks(xs, []float64{0, 0.25, 0.5, 0.75, 1}, y, 4, 16, func(p float64) string { return fmt.Sprintf("%.0f %%", 100*p) })
	return c.String()
}

// logBars draws one horizontal bar per row on a log axis (ms), so that a
// stage of 0.1 ms and one of 2 s are both read off it; rows are grouped
// under headings (the levels).
type logRow struct {
	group, label string
	v            float64 // ms; ≤ 0 or NaN: none
	color        string
}

func logBars(title, unit string, rows []logRow) string {
	const w, l, r, rowH = 1100.0, 200.0, 80.0, 15.0
	lo, hi := math.Inf(1), 0.0
	for _, rw := range rows {
		if rw.v > 0 {
			lo, hi = min(lo, rw.v), max(hi, rw.v)
		}
	}
	if hi == 0 {
		return ""
	}
	// A decade below the shortest, so that it too is a bar.
	d0 := math.Floor(math.Log10(lo)) - 1
	d1 := math.Ceil(math.Log10(hi))
	if d1 <= d0 {
		d1 = d0 + 1
	}
	groups := len(slices.CompactFunc(slices.Clone(rows), func(a, b logRow) bool { return a.group == b.group }))
	h := 10 + rowH*float64(len(rows)) + 18*float64(groups) + 34
	c := newCanvas(w, h, "plot logbars", title)
	xs := scale{d0, d1, l, w - r}
	y := 10.0
	top := y
	prev := ""
	for _, rw := range rows {
		if rw.group != prev {
			c.text(8, y+13, "start", "ptitle", rw.group)
			y += 18
			prev = rw.group
		}
		c.text(l-6, y+11, "end", "tick", rw.label)
		if rw.v > 0 {
			x1 := xs.at(math.Log10(rw.v))
			c.f(`<rect class="logbar" data-label="%s" x="%s" y="%s" width="%s" height="%s" fill="%s"><title>%s, %s: %s %s</title></rect>`,
				esc(rw.group+"/"+rw.label), num(l), num(y+2), num(max(x1-l, 1)), num(rowH-4), rw.color, esc(rw.group), esc(rw.label), val(rw.v), unit)
			c.text(x1+4, y+11, "start", "tick small", val(rw.v)+" "+unit)
		} else {
			c.text(l+4, y+11, "start", "tick small", "-")
		}
		y += rowH
	}
	for e := d0; e <= d1; e++ {
		x := xs.at(e)
		c.line(x, top, x, y, "grid")
		c.text(x, y+14, "middle", "tick", tickval(math.Pow(10, e))+" "+unit)
	}
	c.text((l+w-r)/2, y+30, "middle", "axis", unit+" per request (mean), log scale")
	return c.String()
}
