package servermetrics

import (
	"cmp"
	"encoding/json"
	"github.com/asrprof/asrprof/bundle"
	"math"
	"slices"

	"github.com/asrprof/asrprof/probe"
)

// series is one series (name and label set) the probe has seen.
type series struct {
	name, typ  string
	labels     json.RawMessage // the label set as a JSON object
	cumulative bool
	last       float64 // value in the newest successful scrape that had it
	lastTs     int64
}

// value is one series' value in one scrape.
type value struct {
	s *series
	v float64
}

// frame is one successful scrape: when it was sent and what it read.
type frame struct {
	ts   int64
	vals []value
}

// acc accumulates one series over one pass.
type acc struct {
	// Not cumulative: the samples taken inside the pass (NaN left out).
	n                   int
	sum, min, max, last float64
	// Cumulative: the increase from the baseline through every later
	// scrape, resets (a value that went down) counted as restarts from 0.
	init     bool
	prev     float64
	delta    float64
	resets   int
	cn       int
	from, to int64
}

// period is the pass in progress: the baseline taken at Begin and the
// scrapes since, folded into accs once it is sure which side of the pass's
// end they fall on.
type period struct {
	p       probe.Period
	baseTs  int64               // the baseline scrape's time; 0 when there was none
	base    map[*series]float64 // cumulative series' values in the baseline scrape
	pending []frame             // scrapes not yet folded, oldest first
	accs    map[*series]*acc
}

func newPeriod(p probe.Period, baseTs int64, base map[*series]float64) *period {
	return &period{p: p, baseTs: baseTs, base: base, accs: map[*series]*acc{}}
}

// fold adds a scrape to the pass. Cumulative series take every scrape
// (the one after the pass ends gives the final value); the others only
// those sent inside [start, end] when inPass.
func (pd *period) fold(f frame, inPass bool) {
	for _, sv := range f.vals {
		a := pd.accs[sv.s]
		if a == nil {
			a = &acc{}
			pd.accs[sv.s] = a
		}
		v := sv.v
		if math.IsNaN(v) {
			continue
		}
		if sv.s.cumulative {
			if !a.init {
				a.init = true
				if pd.baseTs != 0 {
					// From the baseline scrape; a series absent from it
					// appeared since, from zero.
					a.prev, a.from = pd.base[sv.s], pd.baseTs
				} else {
					// No baseline at all: the first value is the base.
					a.prev, a.from = v, f.ts
				}
			}
			if v >= a.prev {
				a.delta += v - a.prev
			} else {
				a.delta += v
				a.resets++
			}
			a.prev, a.to = v, f.ts
			a.cn++
			continue
		}
		if !inPass {
			continue
		}
		if a.n == 0 {
			a.min, a.max = v, v
		}
		a.n++
		a.sum += v
		a.min, a.max, a.last = math.Min(a.min, v), math.Max(a.max, v), v
	}
}

// add queues a scrape; scrapes older than holdback before the newest one
// (or beyond maxPending) are folded at once as inside the pass when sent
// after its start: End comes soon after a pass ends, far sooner than
// that.
func (pd *period) add(f frame, holdback int64, maxPending int) {
	pd.pending = append(pd.pending, f)
	for len(pd.pending) > 0 && (pd.pending[0].ts < f.ts-holdback || len(pd.pending) > maxPending) {
		old := pd.pending[0]
		pd.pending = pd.pending[1:]
		pd.fold(old, old.ts >= pd.p.StartUnixNs)
	}
}

// finish folds what is pending, now that the pass's end is known, and
// returns one record per series with data in the pass, sorted by name and
// labels.
func (pd *period) finish(p probe.Period) []bundle.ServerMetricsRecord {
	pd.p = p
	for _, f := range pd.pending {
		pd.fold(f, f.ts >= p.StartUnixNs && f.ts <= p.EndUnixNs)
	}
	pd.pending = nil
	wall := float64(p.EndUnixNs-p.StartUnixNs) / 1e9
	var out []bundle.ServerMetricsRecord
	for s, a := range pd.accs {
		r := bundle.ServerMetricsRecord{
			Kind: bundle.MetricsKindPeriod, Level: p.Level, Repeat: p.Repeat, Warmup: p.Warmup,
			StartUnixNs: p.StartUnixNs, EndUnixNs: p.EndUnixNs,
			Name: s.name, Type: s.typ, Labels: bundle.MetricLabels{JSON: s.labels},
		}
		switch {
		case s.cumulative && a.cn > 0:
			r.Samples = a.cn
			r.Delta = fp(a.delta)
			if wall > 0 {
				r.RatePerS = fp(a.delta / wall)
			}
			r.Resets, r.FromUnixNs, r.ToUnixNs = a.resets, a.from, a.to
		case !s.cumulative && a.n > 0:
			r.Samples = a.n
			r.Mean, r.Min, r.Max, r.Last = fp(a.sum/float64(a.n)), fp(a.min), fp(a.max), fp(a.last)
		default:
			continue
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b bundle.ServerMetricsRecord) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(string(a.Labels.JSON), string(b.Labels.JSON)))
	})
	return out
}

func fp(v float64) *bundle.MetricValue {
	f := bundle.MetricValue(v)
	return &f
}
