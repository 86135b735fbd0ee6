package summary

import (
	"slices"
	"sort"

	"github.com/asrprof/asrprof/model"
)

// Passes groups a capture's request records by pass (level, repeat,
// warmup) and computes each pass's metrics with an Acc: warmup passes
// included (Warmup set), ordered by level in the order the capture ran
// them (the manifest's runs, then any level only the requests name), then
// by repeat. A pass is timed by its run in runs (the manifest's levels):
// the monotonic WallS the capture measured (so the metrics equal those the
// capture computed), else its start and end; a pass without a run (one
// that a kill cut short) by its first send and last completion.
// Concurrency and Rate come from runs (0 when the pass has none). Each
// pass's goodput is under slo (NewAcc; none for an empty slo).
func Passes(recs []model.Request, runs []model.LevelRun, slo SLO) []model.PassMetrics {
	type key struct {
		level  string
		repeat int
		warmup bool
	}
	type pass struct {
		key
		acc        *Acc
		start, end int64 // the first send and the last completion
	}
	run := map[key]model.LevelRun{}
	rank := map[string]int{}
	for _, lr := range runs {
		run[key{lr.Level, lr.Repeat, lr.Warmup}] = lr
		if _, ok := rank[lr.Level]; !ok {
			rank[lr.Level] = len(rank)
		}
	}
	// Each record goes into its pass's Acc as it is read (copying 100,000
	// records of ~400 bytes into groups spent most of this function).
	byKey := map[key]*pass{}
	var passes []*pass
	for i := range recs {
		r := &recs[i]
		k := key{r.Level, r.Repeat, r.Warmup}
		p := byKey[k]
		if p == nil {
			p = &pass{key: k, acc: NewAcc(slo), start: r.StartUnixNs, end: r.EndUnixNs}
			byKey[k], passes = p, append(passes, p)
			if _, ok := rank[r.Level]; !ok {
				rank[r.Level] = len(rank)
			}
		}
		p.acc.Add(r)
		p.start, p.end = min(p.start, r.StartUnixNs), max(p.end, r.EndUnixNs)
	}
	sort.SliceStable(passes, func(i, j int) bool {
		a, b := passes[i], passes[j]
		if a.level != b.level {
			return rank[a.level] < rank[b.level]
		}
		if a.warmup != b.warmup {
			return a.warmup
		}
		return a.repeat < b.repeat
	})
	out := make([]model.PassMetrics, 0, len(passes))
	for _, p := range passes {
		wall := float64(p.end-p.start) / 1e9
		lr, ok := run[p.key]
		if ok && lr.Wall() > 0 {
			wall = lr.Wall()
		}
		pm := p.acc.Pass(wall)
		pm.Level, pm.Repeat, pm.Warmup = p.level, p.repeat, p.warmup
		pm.Concurrency, pm.Rate = lr.Concurrency, lr.Rate
		out = append(out, pm)
	}
	return out
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
