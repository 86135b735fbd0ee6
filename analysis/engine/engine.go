// Package engine applies declarative stage presets to a capture's tables:
// each stage of a preset maps to a start and an end (an event, a span's
// start or end) or to a duration a span's attribute reports, and the
// engine derives every request's stages in one pass over the events and
// spans tables (trace/tables), then aggregates them per level in Go. A
// 100,000-request stage table so costs a few column scans instead of a
// Starlark loop over requests.
//
// The rules, which the built-in presets (scripts/stages/*.star) are
// written in:
//   - Event(name): the first event of that name (smallest timestamp; the
//     earliest line for equal timestamps); Last: the last (largest
//     timestamp, the latest line); SameStageAs: only the events whose stage
//     is that of the first event named SameStageAs, falling back to every
//     event of the name when none is.
//   - Span start or end: the first server span of that name (by start,
//     then span id: the order of r.spans); End with Last: the latest end of
//     any server span of that name.
//   - A stage Between two points lasts from the first to the second, and
//     those are its boundaries.
//   - An Attr stage is the number in a span attribute (seconds), summed
//     over the request's spans of that name when they run one after the
//     other, taken from the span that ends last when they overlap (the
//     critical path); its boundaries are laid back to back, in stage order,
//     so that the last ends where that span ends, from that span's own
//     attributes.
//   - A Rest stage is the stage "total" minus every Attr stage.
//   - A Gap stage is the first server span named Outer less the first
//     named Inner (a router's span around the worker's); it has no
//     boundaries. The stage named Router is such a stage outside the
//     server's total (SummarizeGroups keeps it out of the total's parts
//     and out of the client overhead).
//   - A request has the preset's telemetry when its Requires point exists
//     (or, with RequiresEvents, when it has any event); one without is
//     "missing" in the stage table.
//
// Durations are computed as the Starlark presets computed them (integer
// nanoseconds subtracted, then divided by 1e9), so the tables did not
// change when the presets became declarative.
package engine

import (
	"cmp"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/asrprof/asrprof/bundle/columns"
)

// Point is an instant of a request's telemetry.
type Point struct {
	Event       string // an event's name; or
	Span        string // a server span's name
	End         bool   // the span's end (else its start)
	Last        bool   // the last event; the latest end of the spans of the name
	SameStageAs string // events only: in the stage of the first event of this name
}

func (p Point) String() string {
	f, name := "span_start", p.Span
	switch {
	case p.Event != "":
		f, name = "event", p.Event
	case p.End:
		f = "span_end"
	}
	s := fmt.Sprintf("%s(%q", f, name)
	if p.Last {
		s += ", last"
	}
	if p.Event != "" && p.SameStageAs != "" {
		s += fmt.Sprintf(", same_stage_as=%q", p.SameStageAs)
	}
	return s + ")"
}

// Stage is one stage of a preset: Between From and To, an Attr of the
// spans named AttrSpan, the Rest of total, or the Gap of span Outer
// around span Inner.
type Stage struct {
	Name         string
	From, To     Point
	AttrSpan     string
	Attr         string
	Rest         bool
	Outer, Inner string
}

func (s Stage) String() string {
	switch {
	case s.Rest:
		return fmt.Sprintf("%q: rest()", s.Name)
	case s.Outer != "":
		return fmt.Sprintf("%q: gap(%q, %q)", s.Name, s.Outer, s.Inner)
	case s.Attr != "":
		return fmt.Sprintf("%q: attr(%q, %q)", s.Name, s.AttrSpan, s.Attr)
	}
	return fmt.Sprintf("%q: between(%s, %s)", s.Name, s.From, s.To)
}

// Total is the stage a Rest stage is the remainder of; the stage table's
// client overhead is client latency minus it.
const Total = "total"

// Preset is a declarative stage preset.
type Preset struct {
	Name           string
	Requires       Point
	RequiresEvents bool
	Stages         []Stage
}

// Key is the preset's declaration as text: the stage boundaries a Set
// keeps are reused only for the same key.
func (p *Preset) Key() string {
	parts := []string{"requires " + p.Requires.String()}
	if p.RequiresEvents {
		parts[0] = "requires events"
	}
	for _, s := range p.Stages {
		parts = append(parts, s.String())
	}
	return strings.Join(parts, "; ")
}

// UsesEvents reports whether p reads events.
func (p *Preset) UsesEvents() bool {
	return p.RequiresEvents || p.Requires.Event != "" ||
		slices.ContainsFunc(p.Stages, func(s Stage) bool { return s.From.Event != "" || s.To.Event != "" })
}

// UsesSpans reports whether p reads spans.
func (p *Preset) UsesSpans() bool {
	return p.Requires.Span != "" || slices.ContainsFunc(p.Stages, func(s Stage) bool {
		return s.From.Span != "" || s.To.Span != "" || s.AttrSpan != "" || s.Outer != ""
	})
}

// Validate checks the declaration.
func (p *Preset) Validate() error {
	if p.Name == "" {
		return fmt.Errorf("a preset needs a name")
	}
	if !p.RequiresEvents && p.Requires.Event == "" && p.Requires.Span == "" {
		return fmt.Errorf("preset %s: requires names no event or span", p.Name)
	}
	seen := map[string]bool{}
	total, rest := false, false
	for _, s := range p.Stages {
		if seen[s.Name] {
			return fmt.Errorf("preset %s: stage %q twice", p.Name, s.Name)
		}
		seen[s.Name] = true
		total = total || s.Name == Total
		rest = rest || s.Rest
		if s.Outer != "" && s.Inner == "" {
			return fmt.Errorf("preset %s: stage %q: a gap needs an inner span", p.Name, s.Name)
		}
		named := func(pt Point) bool { return pt.Event != "" || pt.Span != "" }
		if !s.Rest && s.Attr == "" && s.Outer == "" && !(named(s.From) && named(s.To)) {
			return fmt.Errorf("preset %s: stage %q: a point names no event or span", p.Name, s.Name)
		}
	}
	if rest && !total {
		return fmt.Errorf("preset %s: a rest() stage needs a %q stage", p.Name, Total)
	}
	return nil
}

// source is the events and spans of every request, grouped by request:
// the rows of request i are ev[evFrom[i]:evFrom[i+1]] (indexes into the
// tables, in table order), and likewise for spans.
type source struct {
	e              *columns.Events
	s              *columns.Spans
	ev, sp         []int32
	evFrom, spFrom []int32
	client         int32 // the service code of asrprof's client spans
	// The preset's points with their codes, looked up once: Requires,
	// and each stage's From, To, Attr span, and Outer and Inner spans.
	req                          code
	from, to, attr, outer, inner []code
}

// code is a point's name codes (-1: no row has it): its event's, its
// SameStageAs event's, its span's.
type code struct{ ev, same, sp int32 }

// code returns pt's codes.
func (src *source) code(pt Point) code {
	c := code{ev: src.e.EventName.Code(pt.Event), same: -1, sp: src.s.Name.Code(pt.Span)}
	if pt.SameStageAs != "" {
		c.same = src.e.EventName.Code(pt.SameStageAs)
	}
	return c
}

func group(owner []int32, n int) (idx, from []int32) {
	from = make([]int32, n+1)
	for _, o := range owner {
		if o >= 0 && int(o) < n {
			from[o+1]++
		}
	}
	for i := 1; i <= n; i++ {
		from[i] += from[i-1]
	}
	idx = make([]int32, from[n])
	next := append([]int32(nil), from[:n]...)
	for j, o := range owner {
		if o >= 0 && int(o) < n {
			idx[next[o]] = int32(j)
			next[o]++
		}
	}
	return idx, from
}

func newSource(p *Preset, n int, e *columns.Events, s *columns.Spans) *source {
	e, s = cmp.Or(e, &columns.Events{}), cmp.Or(s, &columns.Spans{}) // none for nil
	src := &source{e: e, s: s, client: s.Service.Code(clientService)}
	src.ev, src.evFrom = group(e.RequestIndex, n)
	src.sp, src.spFrom = group(s.RequestIndex, n)
	src.req = src.code(p.Requires)
	for _, st := range p.Stages {
		src.from, src.to = append(src.from, src.code(st.From)), append(src.to, src.code(st.To))
		src.attr = append(src.attr, src.code(Point{Span: st.AttrSpan}))
		src.outer, src.inner = append(src.outer, src.code(Point{Span: st.Outer})), append(src.inner, src.code(Point{Span: st.Inner}))
	}
	return src
}

// clientService is trace/spans.ClientService (not imported for one name).
const clientService = "asrprof"

// point finds pt, whose codes are c, in request i's telemetry.
func (src *source) point(i int, pt Point, c code) (int64, bool) {
	if pt.Event != "" {
		return src.event(i, pt, c)
	}
	s, latest := src.s, pt.End && pt.Last
	best := int32(-1)
	for _, j := range src.sp[src.spFrom[i]:src.spFrom[i+1]] {
		if s.Name.Codes[j] == c.sp && s.Service.Codes[j] != src.client &&
			(best < 0 || latest && s.EndUnixNs[j] > s.EndUnixNs[best] || !latest && spanOrder(s, j, best) < 0) {
			best = j
		}
	}
	switch {
	case best < 0:
		return 0, false
	case pt.End:
		return s.EndUnixNs[best], true
	}
	return s.StartUnixNs[best], true
}

// spanOrder is the order of r.spans: by start, then span id.
func spanOrder(s *columns.Spans, a, b int32) int {
	return cmp.Or(cmp.Compare(s.StartUnixNs[a], s.StartUnixNs[b]), cmp.Compare(s.SpanID[a], s.SpanID[b]))
}

func (src *source) event(i int, pt Point, c code) (int64, bool) {
	rows := src.ev[src.evFrom[i]:src.evFrom[i+1]]
	j := int32(-1)
	if at := src.pick(rows, c.same, -1, false); at >= 0 { // c.same is -1 without SameStageAs
		j = src.pick(rows, c.ev, src.e.Stage.Codes[at], pt.Last)
	}
	if j < 0 {
		j = src.pick(rows, c.ev, -1, pt.Last)
	}
	if j < 0 {
		return 0, false
	}
	return src.e.TimestampNs[j], true
}

// pick returns the row of the first event (by timestamp, then line) named
// code in stage (-1: any), or of the last (the latest line among equal
// timestamps); -1 for none.
func (src *source) pick(rows []int32, code, stage int32, last bool) int32 {
	e, best := src.e, int32(-1)
	if code < 0 {
		return best
	}
	for _, j := range rows {
		if e.EventName.Codes[j] != code || stage >= 0 && e.Stage.Codes[j] != stage {
			continue
		}
		if t := e.TimestampNs[j]; best < 0 || last && t >= e.TimestampNs[best] || !last && t < e.TimestampNs[best] {
			best = j
		}
	}
	return best
}

// has reports whether request i has the preset's telemetry.
func (src *source) has(p *Preset, i int) bool {
	if p.RequiresEvents {
		return src.evFrom[i+1] > src.evFrom[i]
	}
	_, ok := src.point(i, p.Requires, src.req)
	return ok
}

// attrSpans returns request i's server spans named code, in r.spans order.
func (src *source) attrSpans(i int, code int32, buf []int32) []int32 {
	buf = buf[:0]
	s := src.s
	for _, j := range src.sp[src.spFrom[i]:src.spFrom[i+1]] {
		if s.Name.Codes[j] == code && s.Service.Codes[j] != src.client {
			buf = append(buf, j)
		}
	}
	slices.SortStableFunc(buf, func(a, b int32) int { return spanOrder(s, a, b) })
	return buf
}

// StageValue is one stage of one request: its seconds (where HasDur)
// and its boundaries (unix ns, where HasBounds).
type StageValue struct {
	DurS       float64
	HasDur     bool
	Start, End int64
	HasBounds  bool
}

// derive computes request i's stages into out (len(p.Stages)).
func (src *source) derive(p *Preset, i int, out []StageValue, buf []int32) []int32 {
	s := src.s
	var attrLast int32 = -1 // the span that ends last, of the attr stages' name
	attrName := ""
	for k, st := range p.Stages {
		out[k] = StageValue{}
		switch {
		case st.Rest:
		case st.Outer != "":
			os, okOS := src.point(i, Point{Span: st.Outer}, src.outer[k])
			oe, okOE := src.point(i, Point{Span: st.Outer, End: true}, src.outer[k])
			is, okIS := src.point(i, Point{Span: st.Inner}, src.inner[k])
			ie, okIE := src.point(i, Point{Span: st.Inner, End: true}, src.inner[k])
			if okOS && okOE && okIS && okIE {
				out[k].DurS, out[k].HasDur = float64((oe-os)-(ie-is))/1e9, true
			}
		case st.Attr != "":
			buf = src.attrSpans(i, src.attr[k].sp, buf)
			if len(buf) == 0 {
				continue
			}
			last := slices.MaxFunc(buf, func(a, b int32) int { return cmp.Compare(s.EndUnixNs[a], s.EndUnixNs[b]) })
			use := buf
			for j := 1; j < len(buf); j++ {
				if s.StartUnixNs[buf[j]] < s.EndUnixNs[buf[j-1]] { // they overlap
					use = []int32{last}
				}
			}
			sum, ok := 0.0, true
			for j := 0; j < len(use) && ok; j++ {
				v, has := s.Attr(int(use[j]), st.Attr)
				sum, ok = sum+v, has
			}
			if ok {
				out[k].DurS, out[k].HasDur = sum, true
			}
			attrLast, attrName = last, st.AttrSpan
		default:
			a, okA := src.point(i, st.From, src.from[k])
			b, okB := src.point(i, st.To, src.to[k])
			if okA && okB {
				out[k] = StageValue{DurS: float64(b-a) / 1e9, HasDur: true, Start: a, End: b, HasBounds: true}
			}
		}
	}
	// Rest: total minus the attr stages, in stage order.
	for k, st := range p.Stages {
		if !st.Rest {
			continue
		}
		tot := out[slices.IndexFunc(p.Stages, func(t Stage) bool { return t.Name == Total })] // Validate: there is one
		if !tot.HasDur {
			continue
		}
		v, ok := tot.DurS, true
		for m, t := range p.Stages {
			if t.Attr != "" {
				v, ok = v-out[m].DurS, ok && out[m].HasDur
			}
		}
		if ok {
			out[k].DurS, out[k].HasDur = v, true
		}
	}
	// Attr stages' boundaries: back to back, ending where attrLast ends
	// (none unless attrLast has every one of them).
	if attrLast >= 0 {
		b, end, ok := slices.Clone(out), s.EndUnixNs[attrLast], true
		for k := len(p.Stages) - 1; k >= 0 && ok; k-- {
			if st := p.Stages[k]; st.Attr != "" && st.AttrSpan == attrName {
				var v float64
				v, ok = s.Attr(int(attrLast), st.Attr)
				b[k].Start, b[k].End, b[k].HasBounds = end-int64(v*1e9), end, true
				end = b[k].Start
			}
		}
		if ok {
			copy(out, b)
		}
	}
	return buf
}

// Derive applies p to every one of n requests, whose events and spans are
// e and s (either may be nil; their RequestIndex joins them), and returns
// one row per stage of each request that has the preset's telemetry.
func Derive(p *Preset, n int, e *columns.Events, s *columns.Spans) *columns.StageRows {
	src := newSource(p, n, e, s)
	rows := &columns.StageRows{}
	for _, st := range p.Stages {
		rows.Stage.Dict = append(rows.Stage.Dict, st.Name)
	}
	// at[i] is request i's first row: a row per stage of each request
	// with the preset's telemetry.
	at := make([]int32, n+1)
	for i := range n {
		at[i+1] = at[i]
		if src.has(p, i) {
			at[i+1] += int32(len(p.Stages))
		}
	}
	rows.Resize(int(at[n]))
	// The requests are independent: a part of them per core.
	parts := min(runtime.GOMAXPROCS(0), max(n/parallelRequests, 1))
	var wg sync.WaitGroup
	for w := range parts {
		wg.Go(func() {
			vals := make([]StageValue, len(p.Stages))
			var buf []int32
			for i := w * n / parts; i < (w+1)*n/parts; i++ {
				if at[i+1] == at[i] {
					continue
				}
				buf = src.derive(p, i, vals, buf)
				for k, v := range vals {
					rows.Set(int(at[i])+k, int32(i), int32(k), v.Start, v.End, v.HasBounds, v.DurS, v.HasDur)
				}
			}
		})
	}
	wg.Wait()
	return rows
}

// parallelRequests is the least a part of Derive's requests holds.
const parallelRequests = 10_000

// One applies p to one request's events and spans (those of r.events and
// r.spans): a value per stage of p; ok is false when the request lacks the
// preset's telemetry.
func One(p *Preset, e *columns.Events, s *columns.Spans) (vals []StageValue, ok bool) {
	src := newSource(p, 1, e, s)
	if !src.has(p, 0) {
		return nil, false
	}
	vals = make([]StageValue, len(p.Stages))
	src.derive(p, 0, vals, nil)
	return vals, true
}
