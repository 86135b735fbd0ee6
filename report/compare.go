package report

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/asrprof/asrprof/analysis"
	"github.com/asrprof/asrprof/model"
	"github.com/asrprof/asrprof/model/summary"
)

// Compare writes the comparison of the bundle in current with the one in
// baseline: both sweeps on one plot, the ratio per level with its
// significance (the compare analysis), the stages side by side.
func Compare(ctx context.Context, w io.Writer, current, baseline string, o Options) error {
	bc, err := analysis.Load(baseline)
	if err != nil {
		return err
	}
	cc, err := analysis.Load(current)
	if err != nil {
		return err
	}
	// The scripts drawn: the stages where the capture has them.
	scripts := func(c *analysis.Capture, names ...string) []string {
		if slices.Contains(analysis.DefaultScripts(c), "stages") {
			names = append(names, "stages")
		}
		return names
	}
	cur, err := run(ctx, cc, current, o.session(cc, bc), scripts(cc, "sweep", "sweep_ranges", "knee", "compare"))
	if err != nil {
		return err
	}
	base, err := run(ctx, bc, baseline, o.session(bc, nil), scripts(bc, "sweep", "sweep_ranges", "knee"))
	if err != nil {
		return err
	}
	p := &page{title: fmt.Sprintf("asrprof comparison: %s vs %s", cur.name, base.name)}
	fmt.Fprintf(&p.b, `<p class="meta">current <code>%s</code> (target %s) · baseline <code>%s</code> (target %s) · written %s</p>`,
		esc(current), esc(cur.manifest().Fingerprint.TargetURL), esc(baseline), esc(base.manifest().Fingerprint.TargetURL), esc(o.stamp()))
	for _, d := range []*captureData{cur, base} {
		if d.errs != nil {
			p.para("warn", d.name+": some analyses failed: "+d.errs.Error())
		}
		if !d.manifest().Complete {
			p.para("warn", d.name+" is INCOMPLETE: "+strings.Join(d.manifest().Incomplete, "; "))
		}
	}
	cats := appendNew(slices.Clone(cur.levels), base.levels...)
	slices.SortStableFunc(cats, model.CompareLevels) // by their load
	cn, bn := "current "+cur.name, "baseline "+base.name

	p.section("sweep", "Sweeps", "How do the two captures compare as the load grows?")
	for _, m := range []struct{ id, metric, q, unit string }{
		{"plot-cmp-rps", "req/s", "Which serves more requests per second at each level?", "req/s"},
		{"plot-cmp-rtfx", "RTFx", "Which transcribes more audio per second (RTFx)?", "RTFx"},
	} {
		p.figure("fig", m.id, m.q, catLines(m.metric, m.unit, mapped(cats, label), []seriesCat{
			sweepSeries(cur, m.metric, cn, color(0), false, cats),
			sweepSeries(base, m.metric, bn, color(1), true, cats),
		}, -1, ""), "mean over repeats; whiskers: min–max over repeats; baseline dashed")
	}
	p.figure("fig", "plot-cmp-latency", "Which answers faster at each level (mean and p95)?", catLines("latency", "latency (s)", mapped(cats, label), []seriesCat{
		sweepSeries(cur, "latency mean (s)", cn+" mean", color(0), false, cats),
		sweepSeries(cur, "latency p95 (s)", cn+" p95", color(4), false, cats),
		sweepSeries(base, "latency mean (s)", bn+" mean", color(1), true, cats),
		sweepSeries(base, "latency p95 (s)", bn+" p95", color(5), true, cats),
	}, -1, ""), "client latency; mean over repeats; whiskers: min–max over repeats; baseline dashed")
	p.heading("current: " + cur.name)
	p.table(cur.tables["sweep"])
	p.heading("baseline: " + base.name)
	p.table(base.tables["sweep"])
	p.end()

	if t := cur.tables["compare"]; t != nil {
		p.section("ratio", "Ratio per level", "By how much does the current capture differ from the baseline, and is it significant?")
		if len(t.Rows) == 0 {
			p.para("warn", "the two captures ran no level in common: there is no ratio to draw")
		} else {
			cs, err := analysis.Compare(cc, bc, summary.DefaultAlpha)
			if err != nil {
				return err
			}
			p.figure("fig", "plot-cmp-ratio", "Current ÷ baseline per level and metric (~: not significant)", ratioBars(cs), "bars: ratio of the means over repeats; above each: the delta of the compare analysis (~ when its Mann-Whitney p ≥ alpha); hover a bar for its ratio and p")
		}
		p.table(t)
		p.table(cur.tables["compare_cpu"])
		p.end()
	}

	ccols, cmeans := cur.stageMeans()
	bcols, bmeans := base.stageMeans()
	if ccols != nil || bcols != nil {
		p.section("stages", "Stages side by side", "Which stage grew or shrank at each level?")
		names := ccols
		if names == nil {
			names = bcols
		}
		var bars []stackBar
		pick := func(cols []string, vs []float64) []float64 {
			out := make([]float64, len(names))
			for i, n := range names {
				out[i] = math.NaN()
				if k := slices.Index(cols, n); k >= 0 && k < len(vs) {
					out[i] = vs[k]
				}
			}
			return out
		}
		for _, lv := range cats {
			if vs, ok := cmeans[lv]; ok {
				bars = append(bars, stackBar{label: "current", group: label(lv), parts: pick(ccols, vs)})
			}
			if vs, ok := bmeans[lv]; ok {
				bars = append(bars, stackBar{label: "baseline", group: label(lv), parts: pick(bcols, vs)})
			}
		}
		p.figure("fig wide", "plot-cmp-stages", "Where does a request's time go, current beside baseline (mean ms per stage)?", stackedBars("stages", "ms per request (mean)", names, bars),
			"left bar of each level: current ("+cur.name+"); right: baseline ("+base.name+")")
		p.heading("current: " + cur.name)
		p.table(cur.tables["stages"])
		p.heading("baseline: " + base.name)
		p.table(base.tables["stages"])
		p.end()
	}
	return p.render(w, "{}")
}

// ratioBars draws the comparisons' ratio per level and metric, with its
// delta (~ when not significant) and p above each bar.
func ratioBars(cs []summary.Comparison) string {
	var levels, metrics []string
	type cell struct {
		ratio, p float64
		delta    string
	}
	cells := map[[2]string]cell{}
	for _, c := range cs {
		lv, m := c.Level, summary.Label(c.Metric)
		if c.Metric == "corpus_wer" {
			continue
		}
		levels, metrics = appendNew(levels, lv), appendNew(metrics, m)
		ratio := math.NaN()
		if c.Ratio != nil {
			ratio = *c.Ratio
		}
		cells[[2]string{lv, m}] = cell{ratio, c.P, c.Delta()}
	}
	const w, h, l, r, tp, b = 760.0, 320.0, 62.0, 16.0, 40.0, 40.0
	c := newCanvas(w, h, "plot", "ratio")
	hi := 1.0
	for _, v := range cells {
		if !math.IsNaN(v.ratio) {
			hi = max(hi, v.ratio)
		}
	}
	ys := scale{0, niceMax(hi * 1.1), h - b, tp}
	c.yAxis(ys, l, w-r, "current ÷ baseline")
	c.line(l, ys.at(1), w-r, ys.at(1), "knee")
	gw := (w - l - r) / float64(max(len(levels), 1))
	bw := min(gw*0.8/float64(max(len(metrics), 1)), 40)
	for g, lv := range levels {
		x0 := l + gw*float64(g) + gw/2 - bw*float64(len(metrics))/2
		for k, m := range metrics {
			v, ok := cells[[2]string{lv, m}]
			if !ok || math.IsNaN(v.ratio) {
				continue
			}
			x := x0 + bw*float64(k)
			c.rect(x+1, ys.at(v.ratio), bw-2, ys.at(0)-ys.at(v.ratio), color(k), fmt.Sprintf("%s %s: ratio %s, p %s, %s", label(lv), m, val(v.ratio), val(v.p), v.delta))
			c.text(x+bw/2, ys.at(v.ratio)-4, "middle", "tick small", v.delta)
		}
		c.text(l+gw*float64(g)+gw/2, h-b+16, "middle", "tick", label(lv))
	}
	c.legend(l, 16, metrics, nil)
	return c.String()
}
