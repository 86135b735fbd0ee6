package report

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/asrprof/asrprof/analysis/engine"
	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/model"
)

// The timeline: every series of the capture on one time axis (seconds
// since the capture's first pass), with the passes shaded.

type tlSeries struct {
	Name  string         `json:"name"`
	Color string         `json:"color"`
	Segs  [][][2]float64 `json:"segs"` // runs of (t s, value); a gap between runs
}

type tlPanel struct {
	Title string     `json:"title"`
	Unit  string     `json:"unit"`
	Max   float64    `json:"max"`
	Ser   []tlSeries `json:"series"`
}

type tlPass struct {
	Label  string  `json:"label"`
	T0, T1 float64 `json:"-"`
	Warmup bool    `json:"-"`
}

// tlRequest is one request drawn on the timeline, with its waterfall.
type tlRequest struct {
	ID     string          `json:"id"`
	Level  string          `json:"lv"`
	T0     float64         `json:"t0"`
	T1     float64         `json:"t1"`
	Lane   int             `json:"lane"`
	Lat    float64         `json:"lat"`
	Status string          `json:"st"`
	Client [3]float64      `json:"c"` // upload, wait for the first byte, response (s)
	Stages []waterfallPart `json:"s"`
	// States are where its latency went (the attribution's segments, in
	// time order): (state index, s from the request's start, s); they
	// tile [0, Lat).
	States []statePart `json:"a,omitempty"`
	level  int
}

// statePart is one segment of a request's attribution.
type statePart struct {
	State    int
	Off, Dur float64 // s from the request's start
	name     string  // the state's name (its list: timeline.States)
}

// MarshalJSON writes a part as [state index, offset, duration].
func (p statePart) MarshalJSON() ([]byte, error) {
	return []byte(fmt.Sprintf(`[%d,%s,%s]`, p.State, tnum(p.Off), tnum(p.Dur))), nil
}

type waterfallPart struct {
	Name string  `json:"n"`
	Off  float64 `json:"o"` // s from the request's start
	Dur  float64 `json:"d"`
}

// MarshalJSON writes a part as a short array.
func (p waterfallPart) MarshalJSON() ([]byte, error) {
	return []byte(fmt.Sprintf(`[%q,%s,%s]`, p.Name, tnum(p.Off), tnum(p.Dur))), nil
}

type timeline struct {
	Span    float64     `json:"span"`
	Panels  []tlPanel   `json:"panels"`
	Passes  []tlPass    `json:"-"`
	Reqs    []tlRequest `json:"reqs"`
	Lanes   int         `json:"lanes"`
	Total   int         `json:"total"` // requests in the capture
	Sampled bool        `json:"sampled"`
	Binned  []string    `json:"-"` // what was binned, for the note
	Levels  []string    `json:"levels"`
	// The states' names and colours, indexed like tlRequest.States.
	States      []string `json:"states"`
	StateColors []string `json:"stateColors"`
}

func (d *captureData) timeline() (*timeline, error) {
	m := d.manifest()
	reqs, err := d.c.Requests()
	if err != nil {
		return nil, err
	}
	tl := &timeline{Total: len(reqs), States: engine.AttributionStates, StateColors: mapped(engine.AttributionStates, stateColor)}
	t0, t1 := int64(math.MaxInt64), int64(0)
	for _, lv := range m.Levels {
		t0 = min(t0, lv.StartUnixNs)
		t1 = max(t1, lv.EndUnixNs)
	}
	for i := range reqs {
		if reqs[i].StartUnixNs > 0 {
			t0 = min(t0, reqs[i].StartUnixNs)
			t1 = max(t1, reqs[i].EndUnixNs)
		}
	}
	if t0 == math.MaxInt64 || t1 <= t0 {
		return nil, nil
	}
	tl.Span = float64(t1-t0) / 1e9
	sec := func(ns int64) float64 { return float64(ns-t0) / 1e9 }
	for _, lv := range m.Levels {
		p := tlPass{Label: label(lv.Level), T0: sec(lv.StartUnixNs), T1: sec(lv.EndUnixNs), Warmup: lv.Warmup}
		if lv.Warmup {
			p.Label += " warmup"
		} else {
			p.Label += " #" + strconv.Itoa(lv.Repeat)
		}
		tl.Passes = append(tl.Passes, p)
	}
	for i := range reqs {
		d.levels = appendNew(d.levels, reqs[i].Level)
	}
	tl.Levels = mapped(d.levels, label)

	// In flight: the most requests in flight within each bin.
	bins := TimelineBins
	bw := tl.Span / float64(bins)
	type ev struct {
		t float64
		d int
	}
	evs := make([]ev, 0, 2*len(reqs))
	for i := range reqs {
		r := &reqs[i]
		if r.StartUnixNs > 0 && r.EndUnixNs >= r.StartUnixNs {
			evs = append(evs, ev{sec(r.StartUnixNs), 1}, ev{sec(r.EndUnixNs), -1})
		}
	}
	slices.SortFunc(evs, func(a, b ev) int { return cmp.Or(cmp.Compare(a.t, b.t), cmp.Compare(b.d, a.d)) })
	var seg [][2]float64
	cur, j, peak := 0, 0, 0
	for b := 0; b < bins; b++ {
		end := float64(b+1) * bw
		hi := cur
		for j < len(evs) && (evs[j].t < end || b == bins-1) {
			cur += evs[j].d
			hi = max(hi, cur)
			j++
		}
		peak = max(peak, hi)
		seg = append(seg, [2]float64{float64(b) * bw, float64(hi)}, [2]float64{end, float64(hi)})
	}
	tl.Panels = append(tl.Panels, tlPanel{Title: "requests in flight (client)", Unit: "", Max: niceMax(float64(peak)),
		Ser: []tlSeries{{Name: "in flight", Color: color(0), Segs: [][][2]float64{seg}}}})
	tl.Binned = append(tl.Binned, fmt.Sprintf("in-flight requests: the most in flight in each of %d bins of %s s", bins, val(bw)))

	// A probe's panel is drawn from its file (bundle.ReadAll: none when
	// absent); the first error is the timeline's.
	if err := cmp.Or(d.gpuPanels(tl, sec), d.schedPanel(tl), d.cudaPanel(tl), d.sampleRequests(tl, reqs, sec)); err != nil {
		return nil, err
	}
	return tl, nil
}

// series bins points (t, v) into TimelineBins means when there are more.
func binned(pts [][2]float64, span float64) ([][2]float64, bool) {
	if len(pts) <= TimelineBins {
		return pts, false
	}
	bw := span / TimelineBins
	sum := make([]float64, TimelineBins)
	n := make([]int, TimelineBins)
	for _, p := range pts {
		b := min(max(int(p[0]/bw), 0), TimelineBins-1)
		sum[b] += p[1]
		n[b]++
	}
	var out [][2]float64
	for b := range sum {
		if n[b] > 0 {
			out = append(out, [2]float64{(float64(b) + 0.5) * bw, sum[b] / float64(n[b])})
		}
	}
	return out, true
}

// gpuSeries are the GPU samples the timeline draws, in its order: the
// record's field (named as gpu.jsonl names it, for the note), its legend,
// whether it is power (a panel of its own) and its value in a record (ok:
// the record is of its kind and has it).
var gpuSeries = []struct {
	field, name string
	power       bool
	value       func(r *bundle.GPURecord) (v float64, ok bool)
}{
	{"util_pct", "util", false, func(r *bundle.GPURecord) (float64, bool) {
		return get(r.GPUUtil, func(u *bundle.GPUUtil) float64 { return u.UtilPct })
	}},
	{"sm_active_pct", "SM active", false, func(r *bundle.GPURecord) (float64, bool) {
		if r.GPUGPM == nil || r.SMActivePct == nil {
			return 0, false
		}
		return *r.SMActivePct, true
	}},
	{"power_w", "power", true, func(r *bundle.GPURecord) (float64, bool) {
		return get(r.GPUPower, func(p *bundle.GPUPower) float64 { return p.PowerW })
	}},
}

// get is of(p), ok when p is not nil.
func get[T any](p *T, of func(*T) float64) (float64, bool) {
	if p == nil {
		return 0, false
	}
	return of(p), true
}

func (d *captureData) gpuPanels(tl *timeline, sec func(int64) float64) error {
	rows, err := bundle.ReadAll[bundle.GPURecord](d.c.Bundle.Path(bundle.GPUFile))
	if err != nil {
		return err
	}
	type key struct{ series, gpu int }
	pts := map[key][][2]float64{}
	var gpus []int
	for i := range rows {
		r := &rows[i]
		if r.TS == 0 {
			continue
		}
		for si, s := range gpuSeries {
			if v, ok := s.value(r); ok && !math.IsNaN(v) {
				if !slices.Contains(gpus, r.GPU) {
					gpus = append(gpus, r.GPU)
				}
				k := key{si, r.GPU}
				pts[k] = append(pts[k], [2]float64{sec(r.TS), v})
				break
			}
		}
	}
	if len(pts) == 0 {
		return nil
	}
	// The GPUs in the order of their numbers as text (gpu10 before gpu2).
	slices.SortFunc(gpus, func(a, b int) int { return strings.Compare(strconv.Itoa(a), strconv.Itoa(b)) })
	busy := tlPanel{Title: "GPU utilization and SM activity", Unit: "%", Max: 100}
	power := tlPanel{Title: "GPU power", Unit: " W"}
	for gi, g := range gpus {
		suffix := ""
		if len(gpus) > 1 {
			suffix = " gpu" + strconv.Itoa(g)
		}
		for si, sr := range gpuSeries {
			p := pts[key{si, g}]
			if len(p) == 0 {
				continue
			}
			slices.SortFunc(p, func(a, b [2]float64) int { return cmp.Compare(a[0], b[0]) })
			p, was := binned(p, tl.Span)
			if was {
				tl.Binned = append(tl.Binned, fmt.Sprintf("GPU %s%s: the mean of each of %d bins", sr.field, suffix, TimelineBins))
			}
			s := tlSeries{Name: sr.name + suffix, Color: color(1 + si + 3*gi), Segs: [][][2]float64{p}}
			if sr.power {
				for _, q := range p {
					power.Max = max(power.Max, q[1])
				}
				power.Ser = append(power.Ser, s)
			} else {
				busy.Ser = append(busy.Ser, s)
			}
		}
	}
	if len(busy.Ser) > 0 {
		tl.Panels = append(tl.Panels, busy)
	}
	if len(power.Ser) > 0 {
		power.Max = niceMax(power.Max)
		tl.Panels = append(tl.Panels, power)
	}
	return nil
}

// threadRow is a row of a table that names a thread per level: the cpu
// table's (its threads busiest first) or the serving thread's.
type threadRow struct {
	Level  string `col:"level"`
	Thread string `col:"thread"`
}

// servingRow is a row of attribution_thread or blackbox_concurrency.
type servingRow struct {
	Level  string `col:"level"`
	Thread string `col:"serving thread"`
}

// schedPanel draws one thread's share of a core per pass: the serving
// thread the diagnosis named (from the server's events, or seen from
// outside) at most levels, else the thread the cpu analysis ranks first
// at most levels.
func (d *captureData) schedPanel(tl *timeline) error {
	named, what := rows[servingRow](d, "attribution_thread"), "serving thread"
	if len(named) == 0 {
		named = rows[servingRow](d, "blackbox_concurrency")
	}
	pick := func(rs []servingRow) string { // the thread of most levels, by name
		count := map[string]int{}
		for _, r := range rs {
			if r.Thread != "" && r.Thread != "-" {
				count[r.Thread]++
			}
		}
		name, best := "", 0
		for n, c := range count {
			if c > best || (c == best && n < name) {
				name, best = n, c
			}
		}
		return name
	}
	name := pick(named)
	if name == "" {
		var firsts []servingRow // the cpu table's first row of each level
		for _, r := range rows[threadRow](d, "cpu") {
			if len(firsts) == 0 || firsts[len(firsts)-1].Level != r.Level {
				firsts = append(firsts, servingRow(r))
			}
		}
		name, what = pick(firsts), "busiest"
	}
	if name == "" {
		return nil
	}
	rows, err := bundle.ReadAll[bundle.SchedRecord](d.c.Bundle.Path(bundle.SchedFile))
	if err != nil {
		return err
	}
	segs, hi := perPass(d, tl, rows, func(r *bundle.SchedRecord) (string, int, bool, float64, bool) {
		return r.Level, r.Repeat, r.Warmup, 100 * r.Utilization, r.Name == name
	})
	if len(segs) == 0 {
		return nil
	}
	tl.Panels = append(tl.Panels, tlPanel{Title: "CPU of thread " + name + " (" + what + "), per pass", Unit: " %", Max: niceMax(max(hi, 100)),
		Ser: []tlSeries{{Name: name, Color: color(5), Segs: segs}}})
	return nil
}

// perPass sums the value of the records it keeps, per pass (the
// records' level, repeat and warmup), and returns one flat segment per
// pass in the order the passes first appear, with the largest sum.
func perPass[T any](d *captureData, tl *timeline, rows []T, value func(*T) (lv string, rep int, warm bool, v float64, keep bool)) ([][][2]float64, float64) {
	sum := map[[2]float64]float64{} // by the pass's start and end
	var order [][2]float64
	for i := range rows {
		lv, rep, warm, v, keep := value(&rows[i])
		p := slices.IndexFunc(d.manifest().Levels, func(p model.LevelRun) bool { return p.Level == lv && p.Repeat == rep && p.Warmup == warm })
		if !keep || p < 0 {
			continue
		}
		k := [2]float64{tl.Passes[p].T0, tl.Passes[p].T1}
		if _, seen := sum[k]; !seen {
			order = append(order, k)
		}
		sum[k] += v
	}
	var segs [][][2]float64
	hi := 0.0
	for _, k := range order {
		segs = append(segs, [][2]float64{{k[0], sum[k]}, {k[1], sum[k]}})
		hi = max(hi, sum[k])
	}
	return segs, hi
}

// cudaPanel draws the CUDA launches per second of each pass (all launch
// functions and threads together).
func (d *captureData) cudaPanel(tl *timeline) error {
	rows, err := bundle.ReadAll[bundle.CUDARecord](d.c.Bundle.Path(bundle.CUDAFile))
	if err != nil {
		return err
	}
	segs, hi := perPass(d, tl, rows, func(r *bundle.CUDARecord) (string, int, bool, float64, bool) {
		return r.Level, r.Repeat, r.Warmup, r.PerSec, true
	})
	if len(segs) == 0 {
		return nil
	}
	tl.Panels = append(tl.Panels, tlPanel{Title: "CUDA launches per second, per pass", Unit: "/s", Max: niceMax(hi),
		Ser: []tlSeries{{Name: "launches/s", Color: color(3), Segs: segs}}})
	return nil
}

// sampleRequests picks the requests the timeline draws (all, or
// MaxRequests evenly spaced plus each level's slowest) with their
// waterfalls: the client's phases on its clock and the server's stages on
// the server's, laid from the end of the upload.
func (d *captureData) sampleRequests(tl *timeline, reqs []model.Request, sec func(int64) float64) error {
	keep := slices.Repeat([]bool{len(reqs) <= MaxRequests}, len(reqs))
	if len(reqs) > MaxRequests {
		tl.Sampled = true
		step := float64(len(reqs)) / float64(MaxRequests-len(d.levels))
		for k := 0.0; int(k) < len(reqs); k += step {
			keep[int(k)] = true
		}
	}
	slow := map[string]int{}
	for i := range reqs {
		r := &reqs[i]
		if r.Warmup || r.Status != "ok" {
			continue
		}
		if j, ok := slow[r.Level]; !ok || r.LatencyS > reqs[j].LatencyS {
			slow[r.Level] = i
		}
	}
	for _, i := range slow {
		keep[i] = true
	}
	// The stages of each request, from the stage preset's rows.
	stages := map[int][]waterfallPart{}
	firstServer := map[int]int64{}
	if rows := d.c.DerivedStages(); rows != nil {
		var drawn []int // the rows with bounds of the requests kept
		for k := range rows.Len() {
			ri := int(rows.RequestIndex[k])
			if ri >= len(reqs) || !keep[ri] || !rows.HasBounds[k] {
				continue
			}
			drawn = append(drawn, k)
			if s, ok := firstServer[ri]; !ok || rows.StartUnixNs[k] < s {
				firstServer[ri] = rows.StartUnixNs[k]
			}
		}
		for _, k := range drawn {
			ri := int(rows.RequestIndex[k])
			r := &reqs[ri]
			up := 0.0
			if r.UploadDoneUnixNs > 0 {
				up = float64(r.UploadDoneUnixNs-r.StartUnixNs) / 1e9
			}
			stages[ri] = append(stages[ri], waterfallPart{Name: rows.Stage.At(k),
				Off: up + float64(rows.StartUnixNs[k]-firstServer[ri])/1e9,
				Dur: float64(rows.EndUnixNs[k]-rows.StartUnixNs[k]) / 1e9})
		}
	}
	// Where each request's time went (the attribution), by request index.
	// Without server telemetry, the states seen from outside (the
	// attribution is then all unattributed).
	states := map[int][]statePart{}
	place := func(index int, segs []engine.Segment, names []string) {
		if index >= len(reqs) || !keep[index] || len(segs) == 0 {
			return
		}
		t0 := segs[0].StartUnixNs
		for _, g := range segs {
			states[index] = append(states[index], statePart{g.State, float64(g.StartUnixNs-t0) / 1e9, float64(g.EndUnixNs-g.StartUnixNs) / 1e9, names[g.State]})
		}
	}
	a := d.c.LastAttribution()
	if a != nil && slices.ContainsFunc(a.Requests, func(rs engine.RequestStates) bool { return rs.Telemetry }) {
		for _, rs := range a.Requests {
			place(rs.Index, rs.Segments, engine.AttributionStates)
		}
	} else {
		bb, err := d.c.BlackBox()
		if err != nil {
			return err
		}
		for _, rs := range bb.Requests {
			place(rs.Index, rs.Segments, engine.BlackBoxStates)
		}
		tl.States, tl.StateColors = engine.BlackBoxStates, mapped(engine.BlackBoxStates, stateColor)
	}
	var laneEnd []float64
	for i := range reqs {
		r := &reqs[i]
		if !keep[i] || r.StartUnixNs == 0 {
			continue
		}
		q := tlRequest{ID: cmp.Or(r.SampleID, r.ID), Level: label(r.Level), T0: sec(r.StartUnixNs), T1: sec(r.EndUnixNs), Lat: r.LatencyS,
			Status: r.Status, Stages: stages[i], States: states[i], level: slices.Index(d.levels, r.Level)}
		if r.UploadDoneUnixNs > 0 && r.FirstByteUnixNs > 0 && r.EndUnixNs > 0 {
			q.Client = [3]float64{float64(r.UploadDoneUnixNs-r.StartUnixNs) / 1e9, float64(r.FirstByteUnixNs-r.UploadDoneUnixNs) / 1e9, float64(r.EndUnixNs-r.FirstByteUnixNs) / 1e9}
		}
		lane := slices.IndexFunc(laneEnd, func(e float64) bool { return e <= q.T0 })
		if lane < 0 {
			if len(laneEnd) < 48 {
				laneEnd = append(laneEnd, 0)
				lane = len(laneEnd) - 1
			} else {
				lane = i % len(laneEnd)
			}
		}
		laneEnd[lane] = max(laneEnd[lane], q.T1)
		q.Lane = lane
		tl.Reqs = append(tl.Reqs, q)
	}
	tl.Lanes = max(len(laneEnd), 1)
	return nil
}

// slowest returns, per level in order, the index in tl.Reqs of its slowest
// scored request.
func (tl *timeline) slowest(levels []string) []int {
	var out []int
	for _, lv := range levels {
		best := -1
		for i, r := range tl.Reqs {
			if r.Level == label(lv) && r.Status == "ok" && (best < 0 || r.Lat > tl.Reqs[best].Lat) && len(r.Stages) > 0 {
				best = i
			}
		}
		if best >= 0 {
			out = append(out, best)
		}
	}
	return out
}

// svg draws the timeline: one panel per series group, the requests' lane
// at the bottom; data coordinates are seconds, so that the script zooms
// by changing each panel's viewBox.
func (tl *timeline) svg() string {
	const w, l, r = 1100.0, 70.0, 16.0
	const ph, gap, laneH = 80.0, 30.0, 150.0
	pw := w - l - r
	h := 10 + float64(len(tl.Panels))*(18+ph+gap) + 18 + laneH + 4 + 36
	c := newCanvas(w, h, "timeline", "timeline of the capture")
	y := 10.0
	span := tnum(tl.Span)
	bandClass := map[bool]string{false: "band", true: "band warm"} // by Warmup
	for _, p := range tl.Panels {
		c.text(l, y+12, "start", "ptitle", p.Title)
		top := y + 18
		ys := scale{0, p.Max, top + ph, top}
		for _, t := range ticks(0, p.Max, 2) {
			yy := ys.at(t)
			c.line(l, yy, l+pw, yy, "grid")
			c.text(l-5, yy+4, "end", "tick", tickval(t)+p.Unit)
		}
		c.f(`<svg class="tl-data" x="%s" y="%s" width="%s" height="%s" viewBox="0 0 %s 100" preserveAspectRatio="none">`, num(l), num(top), num(pw), num(ph), span)
		for _, ps := range tl.Passes {
			c.f(`<rect class="%s" x="%s" y="0" width="%s" height="100"><title>%s: %s–%s s</title></rect>`, bandClass[ps.Warmup], tnum(ps.T0), tnum(ps.T1-ps.T0), esc(ps.Label), val(ps.T0), val(ps.T1))
		}
		for _, s := range p.Ser {
			for _, seg := range s.Segs {
				pts := make([][2]float64, len(seg))
				for i, q := range seg {
					pts[i] = [2]float64{q[0], 100 - 100*q[1]/p.Max}
				}
				c.polyline(pts, tnum, s.Color, "tls")
			}
		}
		c.raw(`</svg>`)
		lx := l + pw
		for _, s := range slices.Backward(p.Ser) {
			lx -= 24 + 7*float64(len([]rune(s.Name)))
			c.rect(lx, y+3, 12, 10, s.Color, "")
			c.text(lx+16, y+12, "start", "legend", s.Name)
		}
		y = top + ph + gap
	}
	title := fmt.Sprintf("requests (%d of %d drawn; click one for its waterfall)", len(tl.Reqs), tl.Total)
	c.text(l, y+12, "start", "ptitle", title)
	top := y + 18
	c.f(`<svg class="tl-data tl-reqs" x="%s" y="%s" width="%s" height="%s" viewBox="0 0 %s %d" preserveAspectRatio="none">`, num(l), num(top), num(pw), num(laneH), span, tl.Lanes)
	for _, p := range tl.Passes {
		c.f(`<rect class="%s" x="%s" y="0" width="%s" height="%d"/>`, bandClass[p.Warmup], tnum(p.T0), tnum(p.T1-p.T0), tl.Lanes)
	}
	for i, q := range tl.Reqs {
		cls := "rq"
		if q.Status != "ok" {
			cls = "rq bad"
		}
		c.f(`<line class="%s" data-r="%d" x1="%s" x2="%s" y1="%s" y2="%s" stroke="%s"><title>#req=%d %s (%s): %s s, %s</title></line>`,
			cls, i, tnum(q.T0), tnum(max(q.T1, q.T0+tl.Span/5000)), num(float64(q.Lane)+0.5), num(float64(q.Lane)+0.5), color(q.level),
			i, esc(q.ID), esc(q.Level), val(q.Lat), esc(q.Status))
	}
	c.raw(`</svg>`)
	axisY := top + laneH + 4
	c.f(`<g class="tl-axis" data-y="%s" data-l="%s" data-w="%s">`, num(axisY), num(l), num(pw))
	xs := scale{0, tl.Span, l, l + pw}
	c.xTicks(xs, ticks(0, tl.Span, 10), axisY, 5, 17, tickval)
	c.raw(`</g>`)
	c.text(l+pw/2, axisY+30, "middle", "axis", "seconds since the capture's first request")
	c.f(`<rect class="tl-sel" x="0" y="0" width="0" height="%s"/>`, num(h))
	return c.String()
}

// json is the data the page's script reads (hover values, waterfalls).
func (tl *timeline) json() string {
	b, _ := json.Marshal(tl)
	// Inside <script>: no "</" may appear.
	return strings.ReplaceAll(string(b), "</", `<\/`)
}

// waterfallSVG draws one request's waterfall (the same drawing as the
// page's script makes for a clicked request).
func waterfallSVG(q tlRequest) string {
	const w, l, r, rowH = 760.0, 150.0, 60.0, 18.0
	rows := 1 + len(q.Stages)
	if q.Client != [3]float64{} {
		rows += 3
	}
	h := 26 + rowH*float64(rows) + 24
	c := newCanvas(w, h, "plot waterfall", "waterfall of request "+q.ID)
	c.text(8, 14, "start", "ptitle", fmt.Sprintf("%s (%s): %s s", q.ID, label(q.Level), val(q.Lat)))
	end := q.Lat
	for _, s := range q.Stages {
		end = max(end, s.Off+s.Dur)
	}
	xs := scale{0, end, l, w - r}
	y := 24.0
	bar := func(name string, off, dur float64, col string) {
		c.text(l-6, y+12, "end", "tick", name)
		c.rect(xs.at(off), y+2, max(xs.at(off+dur)-xs.at(off), 1), rowH-5, col, fmt.Sprintf("%s: %s ms from %s ms", name, val(dur*1e3), val(off*1e3)))
		c.text(xs.at(off+dur)+4, y+12, "start", "tick small", val(dur*1e3)+" ms")
		y += rowH
	}
	if len(q.States) > 0 {
		// The client's latency, split by where it went.
		c.text(l-6, y+12, "end", "tick", "client latency")
		for _, p := range q.States {
			c.f(`<rect class="state" x="%s" y="%s" width="%s" height="%s" fill="%s"><title>%s: %s ms from %s ms</title></rect>`,
				num(xs.at(p.Off)), num(y+2), num(max(xs.at(p.Off+p.Dur)-xs.at(p.Off), 0.5)), num(rowH-5), stateColor(p.name),
				esc(p.name), val(p.Dur*1e3), val(p.Off*1e3))
		}
		c.text(xs.at(q.Lat)+4, y+12, "start", "tick small", val(q.Lat*1e3)+" ms")
		y += rowH
	} else {
		bar("client latency", 0, q.Lat, "#555")
	}
	if q.Client != [3]float64{} {
		bar("client upload", 0, q.Client[0], "#888")
		bar("client wait", q.Client[0], q.Client[1], "#888")
		bar("client response", q.Client[0]+q.Client[1], q.Client[2], "#888")
	}
	for i, s := range q.Stages {
		col := color(i)
		if s.Name == "total" {
			col = "#444"
		}
		bar(s.Name, s.Off, s.Dur, col)
	}
	c.xTicks(xs, ticks(0, end, 6), y+2, 4, 16, func(t float64) string { return tickval(t*1e3) + " ms" })
	return c.String()
}
