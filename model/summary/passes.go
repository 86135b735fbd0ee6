package summary

import (
	"slices"
	"sort"

	"github.com/asrprof/asrprof/model"
)

// Passes groups a capture's request records by pass (level, repeat,
// warmup) and computes each pass's metrics with Pass: warmup passes
// included (Warmup set), ordered by level in the order the capture ran
// them (the manifest's runs, then any level only the requests name), then
// by repeat. A pass is timed by its run in runs (the manifest's levels):
// the monotonic WallS the capture measured (so the metrics equal those the
// capture computed), else its start and end; a pass without a run (one
// that a kill cut short) by its first send and last completion.
// Concurrency and Rate come from runs (0 when the pass has none). Each
// pass's goodput is under slo (Goodput; none for an empty slo).
func Passes(recs []model.Request, runs []model.LevelRun, slo SLO) []model.PassMetrics {
	type key struct {
		level  string
		repeat int
		warmup bool
	}
	run := map[key]model.LevelRun{}
	rank := map[string]int{}
	for _, lr := range runs {
		run[key{lr.Level, lr.Repeat, lr.Warmup}] = lr
		if _, ok := rank[lr.Level]; !ok {
			rank[lr.Level] = len(rank)
		}
	}
	// Group the records by pass: count first, so that each group is
	// allocated once at its size (appending 100,000 records of ~400 bytes
	// one by one spent most of this function growing slices).
	counts := map[key]int{}
	var keys []key
	for i := range recs {
		r := &recs[i]
		k := key{r.Level, r.Repeat, r.Warmup}
		if _, ok := counts[k]; !ok {
			keys = append(keys, k)
		}
		counts[k]++
		if _, ok := rank[r.Level]; !ok {
			rank[r.Level] = len(rank)
		}
	}
	groups := make(map[key][]model.Request, len(counts))
	for k, n := range counts {
		groups[k] = make([]model.Request, 0, n)
	}
	for i := range recs {
		r := &recs[i]
		k := key{r.Level, r.Repeat, r.Warmup}
		groups[k] = append(groups[k], *r)
	}
	sort.SliceStable(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.level != b.level {
			return rank[a.level] < rank[b.level]
		}
		if a.warmup != b.warmup {
			return a.warmup
		}
		return a.repeat < b.repeat
	})
	out := make([]model.PassMetrics, 0, len(keys))
	for _, k := range keys {
		g := groups[k]
		start, end := g[0].StartUnixNs, g[0].EndUnixNs
		for _, r := range g {
			start = min(start, r.StartUnixNs)
			end = max(end, r.EndUnixNs)
		}
		wall := float64(end-start) / 1e9
		lr, ok := run[k]
		switch {
		case ok && lr.WallS > 0:
			wall = lr.WallS
		case ok && lr.EndUnixNs > lr.StartUnixNs:
			wall = float64(lr.EndUnixNs-lr.StartUnixNs) / 1e9
		}
		pm := Pass(g, wall)
		Goodput(&pm, g, slo)
		pm.Level, pm.Repeat, pm.Warmup = k.level, k.repeat, k.warmup
		pm.Concurrency, pm.Rate = lr.Concurrency, lr.Rate
		out = append(out, pm)
	}
	return out
}

// Summarize is results.json's content recomputed from a bundle's records
// and runs (for a capture killed before it wrote results.json): the scored
// passes of Passes under slo, summarised per level with Level, in run
// order.
func Summarize(recs []model.Request, runs []model.LevelRun, slo SLO) model.Results {
	return model.Results{Schema: model.Schema, Results: Levels(Passes(recs, runs, slo))}
}

// Levels are the scored passes of passes summarised per level with
// Level, in run order.
func Levels(passes []model.PassMetrics) []model.LevelResult {
	out := []model.LevelResult{}
	scored := slices.DeleteFunc(slices.Clone(passes), func(p model.PassMetrics) bool { return p.Warmup })
	for i, j := 0, 0; i < len(scored); i = j {
		for j = i; j < len(scored) && scored[j].Level == scored[i].Level; j++ {
		}
		out = append(out, Level(scored[i:j:j]))
	}
	return out
}
