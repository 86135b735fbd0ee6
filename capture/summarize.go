package capture

import (
	"sort"

	"github.com/asrprof/asrprof/bench/metrics"
	"github.com/asrprof/asrprof/trace"
	"github.com/asrprof/asrprof/trace/bundle"
)

// Summarize recomputes results.json's content from a bundle's requests,
// for bundles that have none (a capture killed before it finished). Passes
// are timed by the manifest's level records where present, else by their
// first send and last completion.
func Summarize(b *bundle.Bundle) (*trace.Results, error) {
	recs, err := b.Requests()
	if err != nil {
		return nil, err
	}
	type key struct {
		level  string
		repeat int
	}
	runs := map[key]trace.LevelRun{}
	for _, lr := range b.Manifest.Levels {
		if !lr.Warmup {
			runs[key{lr.Level, lr.Repeat}] = lr
		}
	}
	groups := map[key][]trace.Request{}
	var order []string
	seen := map[string]bool{}
	for _, r := range recs {
		if r.Warmup {
			continue
		}
		k := key{r.Level, r.Repeat}
		groups[k] = append(groups[k], r)
		if !seen[r.Level] {
			seen[r.Level] = true
			order = append(order, r.Level)
		}
	}
	res := &trace.Results{Schema: trace.Schema, Results: []trace.LevelResult{}}
	for _, lv := range order {
		var passes []trace.PassMetrics
		var keys []key
		for k := range groups {
			if k.level == lv {
				keys = append(keys, k)
			}
		}
		sort.Slice(keys, func(i, j int) bool { return keys[i].repeat < keys[j].repeat })
		for _, k := range keys {
			g := groups[k]
			start, end := g[0].StartUnixNs, g[0].EndUnixNs
			for _, r := range g {
				start = min(start, r.StartUnixNs)
				end = max(end, r.EndUnixNs)
			}
			var conc int
			var rate float64
			if lr, ok := runs[k]; ok {
				conc, rate = lr.Concurrency, lr.Rate
				if lr.EndUnixNs > lr.StartUnixNs {
					start, end = lr.StartUnixNs, lr.EndUnixNs
				}
			}
			pm := metrics.Pass(g, float64(end-start)/1e9)
			pm.Level, pm.Repeat, pm.Concurrency, pm.Rate = lv, k.repeat, conc, rate
			passes = append(passes, pm)
		}
		res.Results = append(res.Results, metrics.Level(passes))
	}
	return res, nil
}
