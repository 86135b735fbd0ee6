package proxy

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/asrprof/asrprof/model"
)

// DefaultGap is the idle time (no request in flight) that ends a phase
// even when the concurrency around it is the same.
const DefaultGap = 200 * time.Millisecond

// holdMin is how long a number of requests in flight must last to count as
// a busy period's concurrency: shorter overlaps are the proxy noting a
// request's end a moment after its client sent the next one.
const holdMin = time.Millisecond

// Phase is one pass of the client's sweep as the proxy saw it.
type Phase struct {
	Level       string
	Concurrency int     // the level's concurrency: named (cN) or seen
	Rate        float64 // named rN levels only
	Repeat      int     // 1, 2, … among the phases of the same level
	Seen        int     // the most requests in flight the proxy saw, held ≥ 1 ms
	StartUnixNs int64   // first request's start
	EndUnixNs   int64   // last request's end
	WallS       float64
	Requests    []int // indices into the records
}

// LevelOptions say how InferLevels cuts phases.
type LevelOptions struct {
	// Gap: an idle time at least this long ends a phase (DefaultGap when 0).
	Gap time.Duration
	// Names, when set, names the phases in order (the user's --levels);
	// the records are cut into exactly len(Names) phases at the strongest
	// boundaries (see docs/PROXY.md). A name given twice in a row is the
	// same level's next repeat.
	Names []string
}

// busy is a stretch of time with at least one request in flight.
type busy struct {
	reqs       []int
	start, end int64
	peak       int
}

// InferLevels cuts the records (any order) into the client's phases and
// sets each record's Level and Repeat. The rule, for a client that runs
// its levels one after another in closed loop (SGLang-Omni's benchmark
// does): the proxy's timeline splits into busy periods, separated by
// instants with nothing in flight; a busy period's concurrency is the most
// requests in flight held for ≥ 1 ms. A new phase starts after an idle gap
// ≥ Gap, or where the concurrency changes, except that a run of busy
// periods of one lower concurrency holding fewer requests than the level's
// concurrency is that level's tail (a batching server answered the pass's
// last requests together), not a level of its own.
func InferLevels(recs []model.Request, opt LevelOptions) ([]Phase, error) {
	opt.Gap = cmp.Or(max(opt.Gap, 0), DefaultGap)
	if len(recs) == 0 {
		return nil, nil
	}
	bs := busyPeriods(recs)
	var cuts []int // index of the busy period that starts each phase after the first
	if len(opt.Names) > 0 {
		if len(opt.Names) > len(bs) {
			return nil, fmt.Errorf("--levels names %d levels, but the proxy saw only %d separate stretches of requests", len(opt.Names), len(bs))
		}
		cuts = strongestCuts(bs, len(opt.Names)-1)
	} else {
		cuts = inferCuts(bs, opt.Gap)
	}
	var phases []Phase
	repeats := map[string]int{}
	from := 0
	for i, to := range append(cuts, len(bs)) {
		ph := Phase{StartUnixNs: bs[from].start, EndUnixNs: bs[from].end}
		for _, b := range bs[from:to] {
			ph.Requests = append(ph.Requests, b.reqs...)
			ph.Seen = max(ph.Seen, b.peak)
			ph.EndUnixNs = max(ph.EndUnixNs, b.end)
		}
		ph.WallS = float64(ph.EndUnixNs-ph.StartUnixNs) / 1e9
		ph.Level = model.ConcurrencyLevel(ph.Seen)
		if len(opt.Names) > 0 {
			ph.Level = opt.Names[i]
		}
		ph.Concurrency, ph.Rate = levelOf(ph.Level, ph.Seen)
		repeats[ph.Level]++
		ph.Repeat = repeats[ph.Level]
		for _, r := range ph.Requests {
			recs[r].Level, recs[r].Repeat, recs[r].Warmup = ph.Level, ph.Repeat, false
		}
		phases = append(phases, ph)
		from = to
	}
	return phases, nil
}

// levelOf reads the concurrency or rate a level name says (c8, r2.5);
// another name takes the concurrency seen.
func levelOf(name string, seen int) (int, float64) {
	if n, r, ok := model.ParseLevel(name); ok && (n > 0 || r > 0) {
		return n, r
	}
	return seen, 0
}

// busyPeriods sorts the records by start into busy periods.
func busyPeriods(recs []model.Request) []busy {
	idx := make([]int, len(recs))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(recs[a].StartUnixNs, recs[b].StartUnixNs) })
	var bs []busy
	for _, i := range idx {
		r := &recs[i]
		end := max(r.EndUnixNs, r.StartUnixNs)
		if n := len(bs); n > 0 && r.StartUnixNs <= bs[n-1].end {
			bs[n-1].reqs = append(bs[n-1].reqs, i)
			bs[n-1].end = max(bs[n-1].end, end)
			continue
		}
		bs = append(bs, busy{reqs: []int{i}, start: r.StartUnixNs, end: end})
	}
	for k := range bs {
		bs[k].peak = heldPeak(recs, bs[k].reqs)
	}
	return bs
}

// heldPeak is the most requests in flight at once held for ≥ holdMin
// (at least 1).
func heldPeak(recs []model.Request, reqs []int) int {
	type ev struct {
		t int64
		d int
	}
	evs := make([]ev, 0, 2*len(reqs))
	for _, i := range reqs {
		evs = append(evs, ev{recs[i].StartUnixNs, +1}, ev{max(recs[i].EndUnixNs, recs[i].StartUnixNs), -1})
	}
	slices.SortFunc(evs, func(a, b ev) int { return cmp.Or(cmp.Compare(a.t, b.t), cmp.Compare(a.d, b.d)) }) // ends first
	peak, level := 1, 0
	for k, e := range evs {
		level += e.d
		if k+1 < len(evs) && time.Duration(evs[k+1].t-e.t) >= holdMin && level > peak {
			peak = level
		}
	}
	return peak
}

// inferCuts applies InferLevels' rule.
func inferCuts(bs []busy, gap time.Duration) []int {
	var cuts []int
	level := bs[0].peak
	for i := 1; i < len(bs); {
		b := bs[i]
		switch {
		case time.Duration(b.start-bs[i-1].end) >= gap, b.peak > level:
			cuts, level = append(cuts, i), b.peak
			i++
		case b.peak == level:
			i++
		default: // lower: the level's tail, or a lower level?
			j, n := i, 0
			for j < len(bs) && bs[j].peak == b.peak && (j == i || time.Duration(bs[j].start-bs[j-1].end) < gap) {
				n += len(bs[j].reqs)
				j++
			}
			if n < level {
				i = j // the tail
				continue
			}
			cuts, level = append(cuts, i), b.peak
			i++
		}
	}
	return cuts
}

// strongestCuts picks the k boundaries between busy periods that most
// look like a change of phase: a change of concurrency first, then the
// longest idle gaps.
func strongestCuts(bs []busy, k int) []int {
	type cand struct {
		i     int
		score float64
	}
	var cs []cand
	for i := 1; i < len(bs); i++ {
		s := float64(bs[i].start-bs[i-1].end) / 1e9
		if bs[i].peak != bs[i-1].peak {
			s += 1e6
		}
		cs = append(cs, cand{i, s})
	}
	slices.SortStableFunc(cs, func(a, b cand) int { return cmp.Compare(b.score, a.score) })
	cuts := make([]int, 0, k)
	for _, c := range cs[:k] {
		cuts = append(cuts, c.i)
	}
	slices.Sort(cuts)
	return cuts
}
