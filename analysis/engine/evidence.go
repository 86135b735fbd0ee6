package engine

import (
	"github.com/asrprof/asrprof/bundle/columns"
	"github.com/asrprof/asrprof/model"
)

// Evidence the diagnosis (scripts/bottleneck.star) weighs beside the stage
// table, computed here so that no script loops over every request.

// Occupancy is how many of a level's measured requests were inside an
// interval at once: the time-weighted mean over each pass (from the
// pass's first interval start to its last end), averaged over the passes,
// and the most at any instant.
type Occupancy struct {
	Mean float64
	Max  int
	// Busy is the share of the pass's span in which at least one request
	// was inside (averaged over the passes): how much of the time a
	// serial stage such as the first forward held its thread. BusyS is
	// that time in seconds, per pass.
	Busy, BusyS float64
}

// Occupancies is, per level, the occupancy of the interval from the start
// of stage from to the end of stage to (boundaries of rows), over the
// measured (non-warmup) successful requests that have both. It is how
// full a pool was: the running batch (first forward to decode tail end)
// against the admission cap, builds in progress against the build
// workers.
func Occupancies(reqs *columns.RequestCols, rows *columns.StageRows, from, to string) map[string]Occupancy {
	fc, tc := rows.Stage.Code(from), rows.Stage.Code(to)
	byPass := map[passCode][]interval{} // (warmup is false in every key)
	ok := reqs.Status.Code(model.StatusOK)
	k := 0
	for i := 0; i < reqs.N; i++ {
		start, end := int64(-1), int64(-1)
		for k < rows.Len() && int(rows.RequestIndex[k]) == i {
			if rows.HasBounds[k] && rows.Stage.Codes[k] == fc {
				start = rows.StartUnixNs[k]
			}
			if rows.HasBounds[k] && rows.Stage.Codes[k] == tc {
				end = rows.EndUnixNs[k]
			}
			k++
		}
		if reqs.Warmup[i] || reqs.Status.Codes[i] != ok || start < 0 || end < start {
			continue
		}
		p := passCodeOf(reqs, i)
		byPass[p] = append(byPass[p], interval{start, end})
	}
	out, n := map[string]Occupancy{}, map[string]int{} // sums over the passes with a span, then their means
	for p, ivs := range byPass {
		lv := reqs.Level.Dict[p.level]
		st := occupancySteps(ivs)
		var area, busy float64
		o := out[lv]
		for j, x := range st {
			o.Max = max(o.Max, x.n)
			if j+1 < len(st) {
				d := float64(st[j+1].t - x.t)
				area += float64(x.n) * d
				if x.n > 0 {
					busy += d
				}
			}
		}
		if span := st[len(st)-1].t - st[0].t; span > 0 {
			o.Mean, o.Busy, o.BusyS = o.Mean+area/float64(span), o.Busy+busy/float64(span), o.BusyS+busy/1e9
			n[lv]++
		}
		out[lv] = o
	}
	for lv, o := range out {
		if k := float64(n[lv]); k > 0 {
			o.Mean, o.Busy, o.BusyS = o.Mean/k, o.Busy/k, o.BusyS/k
			out[lv] = o
		}
	}
	return out
}

// passCode is request i's pass in the requests' columns: its level's
// code, its repeat and whether a warmup.
type passCode struct {
	level, repeat int32
	warmup        bool
}

func passCodeOf(rc *columns.RequestCols, i int) passCode {
	return passCode{rc.Level.Codes[i], repeatOf(rc, i), rc.Warmup[i]}
}

// entry is m[k], a new zero V put there on first use.
func entry[K comparable, V any](m map[K]*V, k K) *V {
	v := m[k]
	if v == nil {
		v = new(V)
		m[k] = v
	}
	return v
}

// ordinal is k's number in m, which numbers its keys in the order they
// came (a new key gets len(m)).
func ordinal[K comparable](m map[K]int, k K) int {
	i, ok := m[k]
	if !ok {
		i = len(m)
		m[k] = i
	}
	return i
}

func repeatOf(reqs *columns.RequestCols, i int) int32 {
	if len(reqs.Repeat) == reqs.N {
		return reqs.Repeat[i]
	}
	return 0
}

// MetaStat is a numeric metadata field of one event name over one pass's
// measured requests.
type MetaStat struct {
	Level         string
	Repeat        int
	Min, Max, Sum float64
	N             int
}

// EventMeta is, per scored pass in run order, the min, max and sum of the
// number key in the metadata that meta gives for each measured successful
// request (for example the whisper engine's stage_complete first_step and
// last_step: the server-wide decode steps a pass took). meta(i) returns
// request i's metadata of the event asked for, or false.
func EventMeta(reqs *columns.RequestCols, meta func(i int) (map[string]any, bool), key string) []MetaStat {
	ok := reqs.Status.Code(model.StatusOK)
	byPass, out := map[passCode]int{}, []MetaStat{} // a pass's index in out
	for i := 0; i < reqs.N; i++ {
		if reqs.Warmup[i] || reqs.Status.Codes[i] != ok {
			continue
		}
		m, found := meta(i)
		if !found {
			continue
		}
		v, isNum := m[key].(float64)
		if !isNum {
			continue
		}
		p := passCodeOf(reqs, i)
		k := ordinal(byPass, p)
		if k == len(out) {
			out = append(out, MetaStat{Level: reqs.Level.At(i), Repeat: int(p.repeat), Min: v, Max: v})
		}
		s := &out[k]
		s.Min, s.Max, s.Sum, s.N = min(s.Min, v), max(s.Max, v), s.Sum+v, s.N+1
	}
	return out
}
