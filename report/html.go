package report

import (
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/asrprof/asrprof/analysis"
	"github.com/asrprof/asrprof/analysis/engine"
	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/table"
)

// page collects the report's sections.
type page struct {
	b     strings.Builder
	title string
	nav   [][2]string // id, heading
}

func (p *page) section(id, heading, question string) {
	p.nav = append(p.nav, [2]string{id, heading})
	fmt.Fprintf(&p.b, `<section id="%s"><h2>%s</h2>`, id, esc(heading))
	if question != "" {
		fmt.Fprintf(&p.b, `<p class="q">%s</p>`, esc(question))
	}
}

func (p *page) end() { p.b.WriteString("</section>\n") }

// figure adds one plot, titled with the question it answers: of class
// "fig", two sit side by side on a wide page; of class "fig wide", it
// takes the page's whole width.
func (p *page) figure(class, id, question, svg, caption string) {
	fmt.Fprintf(&p.b, `<figure id="%s" class="%s"><figcaption>%s</figcaption>%s`, id, class, esc(question), svg)
	if caption != "" {
		fmt.Fprintf(&p.b, `<p class="note">%s</p>`, esc(caption))
	}
	p.b.WriteString("</figure>\n")
}

func (p *page) heading(text string) {
	fmt.Fprintf(&p.b, "<h3>%s</h3>", esc(text))
}

func (p *page) para(class, text string) {
	fmt.Fprintf(&p.b, `<p class="%s">%s</p>`, class, esc(text))
}

// notes adds each of ns as a note.
func (p *page) notes(ns []string) {
	for _, n := range ns {
		p.para("note", n)
	}
}

// table writes t as an HTML table with its notes.
func (p *page) table(t *table.Table) {
	if t == nil {
		return
	}
	head := func() {
		for _, c := range t.Columns {
			fmt.Fprintf(&p.b, "<th>%s</th>", esc(c))
		}
		p.b.WriteString("</tr></thead><tbody>")
	}
	fmt.Fprintf(&p.b, `<div class="tw"><table class="data" data-table="%s"><caption>%s</caption><thead><tr>`, esc(t.Name), esc(t.Title))
	head()
	row := func(i int, r []string) {
		p.b.WriteString("<tr>")
		for j, c := range r {
			cls := ""
			if i < len(t.Values) && j < len(t.Values[i]) {
				switch t.Values[i][j].(type) {
				case float64, int, int64, map[string]any:
					cls = ` class="n"`
				}
			}
			fmt.Fprintf(&p.b, "<td%s>%s</td>", cls, esc(c))
		}
		p.b.WriteString("</tr>")
	}
	var zero []int
	for i, r := range t.Rows {
		if allZero(t, i) && len(t.Rows) > 1 {
			zero = append(zero, i)
			continue
		}
		row(i, r)
	}
	p.b.WriteString("</tbody>")
	if len(zero) > 0 { // folded away: a click shows them, in the same columns
		fmt.Fprintf(&p.b, `<tbody class="zero"><tr><td colspan="%d"><details><summary>%d rows all zero (%s)</summary><table class="data"><thead><tr>`,
			len(t.Columns), len(zero), esc(zeroNames(t, zero)))
		head()
		for _, i := range zero {
			row(i, t.Rows[i])
		}
		p.b.WriteString("</tbody></table></details></td></tr></tbody>")
	}
	p.b.WriteString("</table>")
	p.notes(t.Notes)
	p.b.WriteString("</div>\n")
}

// allZero reports whether row i of t has numbers and every one is 0: a
// state no request was in, folded away under the table.
func allZero(t *table.Table, i int) bool {
	if i >= len(t.Values) {
		return false
	}
	n := 0
	for _, v := range t.Values[i] {
		switch v.(type) {
		case float64, int, int64:
			if x, _ := table.Number(v); x != 0 {
				return false
			}
			n++
		case map[string]any:
			return false
		}
	}
	return n > 0
}

// zeroNames names the folded rows by their text cells: "c=1 build wait,
// c=1 build".
func zeroNames(t *table.Table, rows []int) string {
	var names []string
	for _, i := range rows {
		var parts []string
		for j, c := range t.Rows[i] {
			if j < len(t.Values[i]) {
				if _, ok := t.Values[i][j].(string); ok {
					parts = append(parts, c)
				}
			}
		}
		names = append(names, strings.Join(parts, " "))
	}
	return strings.Join(names, ", ")
}

// render writes the whole document.
func (p *page) render(w io.Writer, data string) error {
	var nav strings.Builder
	for _, n := range p.nav {
		fmt.Fprintf(&nav, `<a href="#%s">%s</a>`, n[0], esc(n[1]))
	}
	_, err := fmt.Fprintf(w, `<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:">
<title>%s</title>
<style>%s</style>
</head><body>
<header><h1>%s</h1><nav>%s</nav></header>
<main>
%s
</main>
<script type="application/json" id="tl-json">%s</script>
<script>%s</script>
</body></html>
`, esc(p.title), css, esc(p.title), nav.String(), p.b.String(), data, script)
	return err
}

// Write writes the report of the bundle in dir to w.
func Write(ctx context.Context, w io.Writer, dir string, o Options) error {
	d, err := load(ctx, dir, o)
	if err != nil {
		return err
	}
	p := &page{title: "asrprof report: " + d.name}
	m := d.manifest()
	status := "complete"
	if !m.Complete {
		status = "INCOMPLETE: " + strings.Join(m.Incomplete, "; ")
		if len(m.Incomplete) == 0 {
			status = "INCOMPLETE: the capture did not finish"
		}
	}
	fmt.Fprintf(&p.b, `<p class="meta">bundle <code>%s</code> · %s · target %s · report written %s</p>`,
		esc(dir), esc(status), esc(m.Fingerprint.TargetURL), esc(o.stamp()))
	if d.errs != nil {
		p.para("warn", "some analyses failed; what they would show is missing: "+d.errs.Error())
	}

	d.validitySection(p) // validity.go: the run's checks, before the verdict
	d.verdictSection(p)
	d.sweepSection(p)
	d.stagesSection(p)
	d.attributionSection(p)
	d.bucketsSection(p) // buckets.go
	if err := d.cdfSection(p); err != nil {
		return err
	}
	tl, err := d.timeline()
	if err != nil {
		return err
	}
	data := "{}"
	if tl != nil {
		d.timelineSection(p, tl)
		data = tl.json()
	}
	if err := d.cpuSection(p); err != nil {
		return err
	}
	if t := d.tables["gpu"]; t != nil {
		p.section("gpu", "GPU", "How busy was the GPU at each level?")
		p.table(t)
		p.end()
	}
	d.realtimeSection(p)
	d.provenanceSection(p)
	return p.render(w, data)
}

// bottleneckRow is a row of the bottleneck table: a level's causes, its
// verdict first.
type bottleneckRow struct {
	Level    string     `col:"level"`
	Cause    string     `col:"cause"`
	Explains table.Text `col:"explains"` // "62 %", "-"
	Evidence string     `col:"evidence"`
}

func (d *captureData) verdictSection(p *page) {
	t, rs := d.tables["bottleneck"], rows[bottleneckRow](d, "bottleneck")
	if rs == nil {
		return
	}
	p.section("verdict", "Verdict", "What limits this server at each level, and what says so?")
	p.b.WriteString(`<div class="verdicts">`)
	prev := ""
	for _, r := range rs {
		if r.Level != prev {
			if prev != "" {
				p.b.WriteString("</ul></div>")
			}
			fmt.Fprintf(&p.b, `<div class="verdict"><h3>%s: %s</h3><p class="ev">%s%s</p><ul>`, esc(label(r.Level)), esc(r.Cause),
				esc(explains(string(r.Explains), "explains ", " of the latency. ")), esc(r.Evidence))
			prev = r.Level
			continue
		}
		fmt.Fprintf(&p.b, `<li><b>%s</b>%s: %s</li>`, esc(r.Cause), esc(explains(string(r.Explains), " (", ")")), esc(r.Evidence))
	}
	if prev != "" {
		p.b.WriteString("</ul></div>")
	}
	p.b.WriteString("</div>")
	p.notes(t.Notes) // the cards hold every row of the table: it is not drawn again under them
	p.end()
}

// explains is a cause's share of the latency s ("62 %") between before
// and after; "" where the table has none ("-").
func explains(s, before, after string) string {
	if s == "" || s == "-" {
		return ""
	}
	return before + s + after
}

// sweepSeries builds one series per metric from sweep_ranges.
func sweepSeries(d *captureData, metric, name, col string, dash bool, cats []string) seriesCat {
	r := d.ranges()[metric]
	s := seriesCat{name: name, color: col, dash: dash}
	for _, lv := range cats {
		v, ok := r[lv]
		if !ok {
			v = [3]float64{math.NaN(), math.NaN(), math.NaN()}
		}
		s.y = append(s.y, v[0])
		s.lo = append(s.lo, v[1])
		s.hi = append(s.hi, v[2])
		s.tips = append(s.tips, fmt.Sprintf("%s at %s: %s [%s–%s] over repeats", name, label(lv), val(v[0]), val(v[1]), val(v[2])))
	}
	return s
}

func (d *captureData) sweepSection(p *page) {
	p.section("sweep", "Sweep", "How much does the server serve, and how fast, as the load grows?")
	cats := d.levels
	knee := slices.Index(cats, d.knee())
	kneeNote := "the knee (dashed): the last level before throughput stops rising (knee analysis)"
	if knee < 0 {
		kneeNote = "no knee marked: the knee analysis found none in this sweep (its note, under the table, says why)"
	}
	rps := []seriesCat{sweepSeries(d, "req/s", "req/s", color(0), false, cats)}
	rpsQ, rpsNote := "How many requests per second does each level serve?", ""
	if _, ok := d.ranges()["goodput (req/s)"]; ok { // the capture has an --slo
		rps = append(rps, sweepSeries(d, "goodput (req/s)", "goodput", color(3), true, cats))
		rpsQ = "How many requests per second does each level serve, and how many meet the SLO?"
		rpsNote = "; goodput (dashed): the requests per second that succeeded within every limit of the SLO (the sweep table has the attainment)"
	}
	p.figure("fig", "plot-sweep-rps", rpsQ,
		catLines("requests per second", "req/s", mapped(cats, label), rps, knee, "knee"),
		"mean over repeats; whiskers: min–max over repeats; "+kneeNote+rpsNote)
	p.figure("fig", "plot-sweep-rtfx", "How many seconds of audio does it transcribe per second (RTFx)?",
		catLines("RTFx", "RTFx", mapped(cats, label), []seriesCat{sweepSeries(d, "RTFx", "RTFx", color(2), false, cats)}, knee, "knee"),
		"mean over repeats; whiskers: min–max over repeats")
	p.figure("fig", "plot-sweep-latency", "How long do requests take as the load grows?",
		catLines("latency", "latency (s)", mapped(cats, label), []seriesCat{
			sweepSeries(d, "latency mean (s)", "mean", color(0), false, cats),
			sweepSeries(d, "latency p95 (s)", "p95", color(1), false, cats),
			sweepSeries(d, "latency p99 (s)", "p99", color(5), false, cats),
		}, knee, "knee"),
		"client latency; each pass's mean, p95 and p99, then their mean over repeats; whiskers: min–max over repeats")
	p.table(d.tables["sweep"])
	if t := d.tables["knee"]; t != nil {
		p.notes(t.Notes)
	}
	p.end()
}

func (d *captureData) stagesSection(p *page) {
	cols, means := d.stageMeans()
	if cols == nil {
		return
	}
	p.section("stages", "Stages", "Where does a request's time go at each level?")
	var bars []stackBar
	var rows []logRow
	for _, lv := range d.levels {
		vs, ok := means[lv]
		if !ok {
			continue
		}
		bars = append(bars, stackBar{label: label(lv), group: label(lv), parts: vs})
		for i, c := range cols {
			rows = append(rows, logRow{group: label(lv), label: c, v: vs[i], color: color(i)})
		}
	}
	p.figure("fig wide", "plot-stages", "Where does a request's time go at each level (mean ms per stage)?", stackedBars("stages", "ms per request (mean)", cols, bars),
		"server stages on the server's clock, unattributed = total − the stages before it, client overhead = client latency − server total (stages analysis); the stages too short to see here are read off the log-scale chart below")
	if svg := logBars("stages, log scale", "ms", rows); svg != "" {
		p.figure("fig wide", "plot-stages-log", "How long is each stage, the shortest included (log scale)?", svg,
			"each stage on its own bar, mean ms per request on a log axis, so that a 0.1 ms stage reads as well as a 2 s one; -: the stage is missing at that level (stages analysis)")
	}
	p.table(d.tables["stages"])
	p.table(d.tables["client"])
	p.end()
}

// stateRow is a row of the attribution and blackbox tables.
type stateRow struct {
	Level string  `col:"level"`
	State string  `col:"state"`
	Share float64 `col:"share (%)"`
	Mean  float64 `col:"mean (ms)"`
}

// attributionSection draws the attribution table: per level, each
// state's share of the summed latency as one 100 % bar.
//
// A capture without server telemetry draws the states seen from outside
// (the blackbox table) instead: its attribution is all unattributed.
func (d *captureData) attributionSection(p *page) {
	t, states, how := d.tables["attribution"], engine.AttributionStates, "attribution analysis; docs/ANALYSIS.md, \"Where the time went\""
	if bb := d.tables["blackbox"]; bb != nil && len(bb.Rows) > 0 {
		t, states, how = bb, engine.BlackBoxStates, "seen from outside: the blackbox analysis, the server sent no telemetry; docs/ANALYSIS.md, \"Seen from outside\""
	}
	if t == nil || len(t.Rows) == 0 {
		return
	}
	rs := rows[stateRow](d, t.Name) // nil where it does not decode: no bars
	// The states the table shows, in AttributionStates order.
	var names, colors []string
	for _, s := range states {
		if slices.ContainsFunc(rs, func(r stateRow) bool { return r.State == s }) {
			names, colors = append(names, s), append(colors, stateColor(s))
		}
	}
	byLevel := map[string]*stateBar{}
	for _, r := range rs {
		b := byLevel[r.Level]
		if b == nil {
			b = &stateBar{label: label(r.Level), shares: make([]float64, len(names)), means: make([]float64, len(names))}
			byLevel[r.Level] = b
		}
		k := max(slices.Index(names, r.State), 0) // a state the list does not name: the first
		b.shares[k] = r.Share / 100
		b.means[k] = r.Mean
		b.meanMs += b.means[k]
	}
	var bars []stateBar
	for _, lv := range d.levels {
		if b := byLevel[lv]; b != nil {
			bars = append(bars, *b)
		}
	}
	if len(bars) == 0 {
		return
	}
	p.section("attribution", "Where the time went", "What was each request doing, millisecond by millisecond, at each level?")
	p.figure("fig wide", "plot-attribution", "What share of the latency does each state take, per level?", stateBars("attribution", names, colors, bars),
		"each level's measured requests: every millisecond of a request's client latency in one state, the shares of their summed latency ("+how+"); each request's own split is the first bar of its waterfall, in the same colours")
	p.table(t)
	if t.Name == "blackbox" {
		p.table(d.tables["blackbox_concurrency"])
	} else {
		p.table(d.tables["attribution_thread"])
	}
	p.end()
}

func (d *captureData) cdfSection(p *page) error {
	ss, err := d.cdfs()
	if err != nil {
		return err
	}
	if len(ss) == 0 {
		return nil
	}
	p.section("latency", "Latency distribution", "How are the latencies of each level spread?")
	p.figure("fig", "plot-cdf", "What share of requests finish within a given time, per level?", cdfPlot("latency CDF", ss),
		fmt.Sprintf("successful scored requests; each curve through %d quantiles (package stats' percentiles); dots: p50, p95, p99", CDFPoints))
	p.end()
	return nil
}

func (d *captureData) timelineSection(p *page, tl *timeline) {
	p.section("timeline", "Timeline", "What happened over the capture, second by second?")
	p.b.WriteString(`<div class="tl-tools"><button type="button" data-z="in">zoom in</button><button type="button" data-z="out">zoom out</button><button type="button" data-z="reset">whole capture</button><span id="tl-range"></span> <span class="hint">drag across the plot to zoom; hover for values; click a request for its waterfall</span></div>`)
	p.figure("fig wide", "plot-timeline", "What were the load, the GPU and the scheduler doing at each moment (passes shaded)?", `<div class="tl-wrap">`+tl.svg()+`<div id="tl-read"></div></div>`, "")
	var notes []string
	if tl.Sampled {
		notes = append(notes, fmt.Sprintf("requests sampled: %d of %d drawn (evenly spaced, each level's slowest kept)", len(tl.Reqs), tl.Total))
	}
	for _, b := range tl.Binned {
		if strings.HasPrefix(b, "in-flight") && tl.Span/TimelineBins < 0.01 {
			continue
		}
		notes = append(notes, b)
	}
	notes = append(notes, "shaded: the passes (lighter: warmup); scheduler CPU and CUDA launches are per pass (the probes record one value a pass)")
	p.notes(notes)
	p.b.WriteString(`<div id="waterfall" class="fig"><p class="note">Click a request in the lane above to see its waterfall here (needs JavaScript); the slowest request of each level is drawn below.</p></div>`)
	slow := tl.slowest(d.levels)
	if len(slow) > 0 {
		var svgs strings.Builder
		for _, i := range slow {
			svgs.WriteString(waterfallSVG(tl.Reqs[i]))
		}
		p.figure("fig wide", "plot-waterfall", "Where did the slowest request of each level spend its time?", svgs.String(),
			"client latency split by where it went (the attribution's states, in the colours of 'Where the time went', in time order; within a running stage its states, which interleave bin by bin, in the attribution's order); client phases on the client's clock; server stages on the server's clock, laid from the end of the upload (the two clocks are not compared); a gap between the server's stages is time no stage covers (unattributed)")
	}
	p.end()
}

// hotRow is a row of the cpu_functions and cpu_python tables.
type hotRow struct {
	Level     string     `col:"level"`
	Function  string     `col:"function|python function"`
	Seconds   table.Text `col:"on-CPU (s)"`
	Share     float64    `col:"share of samples (%)"`
	ShareText table.Text `col:"share of samples (%)"`
}

func (d *captureData) cpuSection(p *page) error {
	tcpu, tpy, tfn := d.tables["cpu"], d.tables["cpu_python"], d.tables["cpu_functions"]
	if tcpu == nil && tpy == nil && tfn == nil {
		return nil
	}
	p.section("cpu", "CPU", "Which threads and which code keep the CPU busy at each level?")
	hot, what := rows[hotRow](d, "cpu_python"), "Python functions (innermost Python frame, with the native code it called)"
	if len(hot) == 0 {
		hot, what = rows[hotRow](d, "cpu_functions"), "leaf functions"
	}
	for _, lv := range d.levels {
		var labs, tips []string
		var vals []float64
		for _, r := range hot {
			if r.Level == lv {
				labs = append(labs, r.Function)
				vals = append(vals, r.Share)
				tips = append(tips, fmt.Sprintf("%s: %s s on CPU, %s %% of samples", r.Function, r.Seconds, r.ShareText))
			}
		}
		if len(labs) > 0 {
			p.figure("fig", "plot-cpu-"+lv, "Which "+what+" take the most CPU at "+label(lv)+"?", hbars("hottest", " %", labs, vals, tips, color(5)),
				"share of on-CPU samples, scored passes (cpu analysis)")
		}
	}
	for _, lv := range d.levels {
		f, err := d.c.Icicle(lv, FlameMinShare)
		if err != nil {
			return fmt.Errorf("flame graph of %s: %w", lv, err)
		}
		if f == nil {
			continue
		}
		note := fmt.Sprintf("%s s of on-CPU samples over the scored passes of %s; width: share of samples; paths under %.1f %% are left out", val(f.Seconds), label(lv), 100*FlameMinShare)
		if f.CutSeconds > 0 {
			note += fmt.Sprintf("; %.0f %% of the samples' stacks reached an address in no mapping (a frame-pointer walk through code built without frame pointers): they are drawn from their last mapped frame, the rest of the walk dropped", 100*f.CutSeconds/f.Seconds)
		}
		p.figure("fig wide", "plot-flame-"+lv, "Which call paths take the CPU at "+label(lv)+"? (flame graph, root at the top)", icicle(f), note)
	}
	p.table(tcpu)
	p.table(tpy)
	p.table(tfn)
	p.table(d.tables["cuda_launches"])
	p.end()
	return nil
}

// icicle draws a flame graph root first.
func icicle(root *analysis.Frame) string {
	const w, rowH, maxDepth = 1100.0, 16.0, 40
	depth := 0
	var walk func(f *analysis.Frame, dd int)
	walk = func(f *analysis.Frame, dd int) {
		depth = max(depth, dd)
		if dd >= maxDepth {
			return
		}
		for _, c := range f.Children {
			walk(c, dd+1)
		}
	}
	walk(root, 1)
	c := newCanvas(w, rowH*float64(depth)+4, "flame", "flame graph")
	var draw func(f *analysis.Frame, x, width float64, dd int)
	draw = func(f *analysis.Frame, x, width float64, dd int) {
		if width < 0.5 || dd >= maxDepth {
			return
		}
		y := float64(dd) * rowH
		h := hash(f.Name)
		fill := fmt.Sprintf("hsl(%d,70%%,%d%%)", 10+h%40, 62+h%16)
		if strings.Contains(f.Name, ".py)") {
			fill = fmt.Sprintf("hsl(%d,55%%,%d%%)", 190+h%40, 65+h%14)
		}
		c.f(`<g><rect x="%s" y="%s" width="%s" height="%s" fill="%s"/><title>%s: %s s (%.1f %%)</title>`, num(x), num(y), num(width), num(rowH-1), fill,
			esc(f.Name), val(f.Seconds), 100*f.Seconds/root.Seconds)
		if width > 30 {
			n := int(width / 6.6)
			name := f.Name
			if len([]rune(name)) > n {
				name = string([]rune(name)[:max(n-1, 1)]) + "…"
			}
			c.text(x+3, y+12, "start", "fl", name)
		}
		c.raw("</g>")
		cx := x
		for _, ch := range f.Children {
			cw := width * ch.Seconds / f.Seconds
			draw(ch, cx, cw, dd+1)
			cx += cw
		}
	}
	draw(root, 0, w, 0)
	return c.String()
}

func hash(s string) int {
	h := 0
	for _, r := range s {
		h = (h*31 + int(r)) & 0xffff
	}
	return h
}

// realtimeRow is a row of the realtime table.
type realtimeRow struct {
	Level    string  `col:"level"`
	FirstP50 float64 `col:"first update p50 (s)"`
	FirstP95 float64 `col:"first update p95 (s)"`
	FinalP50 float64 `col:"final after STOP p50 (s)"`
	FinalP95 float64 `col:"final after STOP p95 (s)"`
}

func (d *captureData) realtimeSection(p *page) {
	t := d.tables["realtime"]
	if t == nil || len(t.Rows) == 0 {
		return
	}
	p.section("realtime", "Realtime sessions", "Do the realtime sessions keep up with the speech?")
	nan := func() []float64 { return slices.Repeat([]float64{math.NaN()}, len(d.levels)) }
	ys := [4][]float64{nan(), nan(), nan(), nan()} // per level: first update p50, p95, final p50, p95
	for _, r := range rows[realtimeRow](d, "realtime") {
		if k := slices.Index(d.levels, r.Level); k >= 0 {
			for i, v := range [4]float64{r.FirstP50, r.FirstP95, r.FinalP50, r.FinalP95} {
				ys[i][k] = v
			}
		}
	}
	mk := func(name string, i, ci int) seriesCat {
		return seriesCat{name: name, color: color(ci), y: ys[i], lo: nan(), hi: nan()}
	}
	p.figure("fig", "plot-rt-first", "How soon does the first text come, and how long after the end of the speech the final?",
		catLines("realtime latency", "seconds", mapped(d.levels, label), []seriesCat{
			mk("first update p50", 0, 0), mk("first update p95", 1, 1), mk("final after STOP p50", 2, 2), mk("final after STOP p95", 3, 5),
		}, -1, ""), "per level, mean over repeats (realtime analysis)")
	// Lag over the capture: each session's p95 lag at its start.
	if reqs, err := d.c.Requests(); err == nil {
		t0 := int64(math.MaxInt64)
		for i := range reqs {
			if reqs[i].StartUnixNs > 0 {
				t0 = min(t0, reqs[i].StartUnixNs)
			}
		}
		type pt struct{ t, v float64 }
		by := map[string][]pt{}
		hi, span := 0.0, 0.0
		for i := range reqs {
			r := &reqs[i]
			if r.LagP95S == nil || r.Warmup {
				continue
			}
			q := pt{float64(r.StartUnixNs-t0) / 1e9, *r.LagP95S}
			by[r.Level] = append(by[r.Level], q)
			hi, span = max(hi, q.v), max(span, q.t)
		}
		if len(by) > 0 {
			svg := timePlot("lag per session", "lag p95 (s)", "session start (s since the first)", hi, span, d.levels, func(c *canvas, xs, ys scale, lv, col string) bool {
				for _, q := range by[lv] {
					c.dot(xs.at(q.t), ys.at(q.v), 2.5, col, fmt.Sprintf("%s: session at %s s, lag p95 %s s", label(lv), val(q.t), val(q.v)))
				}
				return len(by[lv]) > 0
			})
			p.figure("fig", "plot-rt-lag", "Does the lag behind the speech grow over the capture?", svg,
				"one dot per session: the p95 of its per-update lags")
		}
	}
	d.lagOverTime(p) // report/lag.go
	p.table(t)
	p.end()
}

func (d *captureData) provenanceSection(p *page) {
	m := d.manifest()
	f := m.Fingerprint
	p.section("provenance", "Provenance", "What was measured, with what, on what?")
	rows := [][2]string{
		{"target", f.TargetURL},
		{"protocol", fmt.Sprint(m.Config["protocol"])},
		{"model", modelName(f.TargetModels)},
		{"dataset", fmt.Sprintf("%v (%d samples, sha256 %s)", m.Config["dataset"], f.DatasetCount, f.DatasetSHA256)},
		{"levels", strings.Join(mapped(d.levels, label), ", ")},
		{"repeats", fmt.Sprintf("%v (warmup: %v)", m.Config["repeats"], m.Config["warmup"])},
		{"started", time.Unix(0, m.StartUnixNs).UTC().Format(time.RFC3339)},
		{"asrprof", strings.TrimSpace(f.Version + " " + f.GitCommit + " " + f.GoVersion)},
		{"host", fmt.Sprintf("%s: %s, %d CPUs, kernel %s", f.Hostname, f.CPUModel, f.CPUCount, f.Kernel)},
	}
	if g := d.gpuNames(); g != "" {
		rows = append(rows, [2]string{"GPU", g})
	}
	rows = append(rows, [2]string{"coverage", fmt.Sprintf("%d requests, %d evaluated, %d skipped, %d failed", m.Coverage.Total, m.Coverage.Evaluated, m.Coverage.Skipped, m.Coverage.Failed)})
	if j, ok := m.Extra["join"].(map[string]any); ok {
		rows = append(rows, [2]string{"join", fmt.Sprintf("%v requests: %v with spans, %v with events", j["requests"], j["with_spans"], j["with_events"])})
	}
	p.b.WriteString(`<table class="kv">`)
	for _, r := range rows {
		fmt.Fprintf(&p.b, "<tr><th>%s</th><td>%s</td></tr>", esc(r[0]), esc(r[1]))
	}
	p.b.WriteString("</table>")
	// Probes: state, details and losses.
	probes, _ := m.Extra["probes"].(map[string]any)
	details, _ := m.Extra["probe_details"].(map[string]any)
	losses, _ := m.Extra["probe_losses"].(map[string]any)
	empty, _ := m.Extra["probe_empty"].(map[string]any)
	idle, _ := m.Extra["probe_idle"].(map[string]any)
	if len(probes) > 0 {
		p.b.WriteString(`<div class="tw"><table class="data" data-table="probes"><caption>Probes and what each lost</caption><thead><tr><th>probe</th><th>state</th><th>lost</th><th>details</th></tr></thead><tbody>`)
		for _, n := range slices.Sorted(maps.Keys(probes)) {
			lost := "none reported"
			if st, _ := probes[n].(string); st == "off" || strings.HasPrefix(st, "off:") || strings.HasPrefix(st, "off ") {
				lost = "off"
			}
			if v, ok := losses[n]; ok {
				lost = compact(v)
			}
			if v, ok := idle[n]; ok {
				lost = "nothing to record, the server idle, in passes " + compact(v)
			}
			if v, ok := empty[n]; ok {
				lost = "on but recorded nothing in passes " + compact(v)
			}
			fmt.Fprintf(&p.b, "<tr><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>", esc(n), esc(compact(probes[n])), esc(lost), esc(compact(details[n])))
		}
		p.b.WriteString("</tbody></table></div>")
	}
	p.notes(m.Notes)
	p.para("note", "files: "+strings.Join(m.Files, ", "))
	p.end()
}

func compact(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case map[string]any:
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(x)) {
			parts = append(parts, k+" "+compact(x[k]))
		}
		return strings.Join(parts, ", ")
	case []any:
		var parts []string
		for _, e := range x {
			parts = append(parts, compact(e))
		}
		return strings.Join(parts, ", ")
	default:
		return fmt.Sprint(x)
	}
}

func modelName(v any) string {
	m, _ := v.(map[string]any)
	data, _ := m["data"].([]any)
	var out []string
	for _, e := range data {
		if o, ok := e.(map[string]any); ok {
			s := fmt.Sprint(o["id"])
			if eng, ok := o["engine"]; ok {
				s += fmt.Sprintf(" (engine %v, %v, %v)", eng, o["device"], o["dtype"])
			}
			if syn, _ := o["synthetic_weights"].(bool); syn {
				s += ", synthetic weights"
			}
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return "-"
	}
	return strings.Join(out, "; ")
}

func (d *captureData) gpuNames() string {
	rows, err := d.c.Rows(bundle.GPUFile) // none when absent
	if err != nil {
		return ""
	}
	var out []string
	for _, r := range rows {
		if r["kind"] == "device" {
			out = append(out, fmt.Sprintf("gpu %v: %v (driver %v)", r["gpu"], r["name"], r["driver"]))
		}
	}
	return strings.Join(out, "; ")
}
