// Package summary turns the request records of a pass into the numbers the
// SGLang-Omni ASR benchmark reports (throughput, RTFx, latency percentiles,
// RTF, corpus WER, coverage), and summarises passes over repeats.
//
// It is the one place where per-pass metrics are computed: the capture
// calls Pass as each pass ends (progress, coverage, results.json), and
// Passes recomputes the same numbers from a bundle's requests for readers
// (the Starlark `capture.passes`, and Levels over them for a killed capture
// that has no results.json).
package summary

import (
	"cmp"
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/asrprof/asrprof/model"
	"github.com/asrprof/asrprof/stats"
)

// Pass computes the metrics of one pass from its records (warmup records of
// the same pass are expected to be excluded by the caller) and the pass's
// wall-clock duration in seconds.
//
//   - throughput_samples_per_s: successful, evaluated samples / wall
//   - rtfx: audio seconds of successful requests / wall
//   - latency and RTF statistics: over successful requests
//   - corpus WER: Σ(S+D+I) / Σ(S+D+H) over scored samples
//   - coverage: skipped = total − evaluated, as SGLang-Omni counts it (a
//     failed request is skipped); failed and empty_ref say why
func Pass(recs []model.Request, wallS float64) model.PassMetrics {
	var a Acc
	for i := range recs {
		a.Add(&recs[i])
	}
	return a.Pass(wallS)
}

// Acc computes a pass's metrics one record at a time, so that a pass need
// not keep its records: Pass(recs, wall) is an Acc fed recs. It holds only
// what exact percentiles need, one float64 per successful request for
// latency and RTF (and per TTFT, per stream chunk gap, per realtime
// session's fields), 8 bytes each, beside counters: about 16 bytes a
// request where Pass over records holds the whole model.Request. The
// zero value is ready; Add is not safe for concurrent use.
type Acc struct {
	lat, rtf, ttft, gaps []float64
	rt                   realtimeAcc
	audioOK              float64
	errs, refWords       int
	cov                  model.Coverage
	slo                  sloTally
}

// NewAcc is an Acc that also counts the requests against slo (the
// goodput; a zero SLO counts nothing).
func NewAcc(slo SLO) *Acc { return &Acc{slo: sloTally{slo: slo}} }

// Add takes one record of the pass.
func (a *Acc) Add(r *model.Request) {
	a.slo.add(r)
	a.cov.Total++
	if r.Status != model.StatusOK {
		a.cov.Failed++
		if a.cov.FailureKinds == nil {
			a.cov.FailureKinds = map[string]int{}
		}
		a.cov.FailureKinds[cmp.Or(r.ErrorKind, model.FailOther)]++
		return
	}
	a.lat = append(a.lat, r.LatencyS)
	a.audioOK += r.AudioDurationS
	if r.AudioDurationS > 0 {
		a.rtf = append(a.rtf, r.LatencyS/r.AudioDurationS)
	}
	if r.FirstTokenUnixNs != 0 {
		a.ttft = append(a.ttft, r.TTFTS)
	}
	a.gaps = append(a.gaps, r.ChunkGapsS...)
	a.rt.add(r)
	if r.Scored && r.Errors != nil {
		a.cov.Evaluated++
		a.errs += r.Errors.Sub + r.Errors.Del + r.Errors.Ins
		a.refWords += r.Errors.RefWords
	} else {
		a.cov.EmptyRef++
	}
}

// Pass is the metrics of the records added so far over a pass of wallS
// seconds, with the SLO's goodput when NewAcc was given one. It sorts
// what it holds; call it once, at the pass's end.
func (a *Acc) Pass(wallS float64) model.PassMetrics {
	m := model.PassMetrics{WallS: wallS, Coverage: a.cov}
	m.Coverage.Skipped = a.cov.Total - a.cov.Evaluated
	if wallS > 0 {
		m.ThroughputSamplesPerS = float64(a.cov.Evaluated) / wallS
		m.RequestsPerS = float64(len(a.lat)) / wallS
		m.RTFx = a.audioOK / wallS
	}
	sort.Float64s(a.lat)
	m.LatencyMeanS = stats.Mean(a.lat)
	if len(a.lat) > 0 {
		m.LatencyMedianS = stats.PercentileSorted(a.lat, 50)
		m.LatencyP95S = stats.PercentileSorted(a.lat, 95)
		m.LatencyP99S = stats.PercentileSorted(a.lat, 99)
	}
	m.RTFMean = stats.Mean(a.rtf)
	m.RTFP95 = stats.Percentile(a.rtf, 95)
	if a.refWords > 0 {
		m.CorpusWER = float64(a.errs) / float64(a.refWords)
	}
	if len(a.ttft) > 0 {
		m.TTFTMeanS, m.TTFTP95S = new(stats.Mean(a.ttft)), new(stats.Percentile(a.ttft, 95))
	}
	if len(a.gaps) > 0 {
		m.ChunkGapMeanS, m.ChunkGapP95S = new(stats.Mean(a.gaps)), new(stats.Percentile(a.gaps, 95))
	}
	a.rt.fill(&m, wallS)
	a.slo.fill(&m)
	return m
}

// realtimeAcc gathers the realtime sessions' fields of a pass.
type realtimeAcc struct {
	n                 int
	audioS            float64
	first, final, lag []float64
	growth            []float64
}

func (a *realtimeAcc) add(r *model.Request) {
	if r.AudioS == 0 && r.FirstUpdateS == nil && r.FinalAfterStopS == nil {
		return // not a realtime session
	}
	a.n++
	a.audioS += r.AudioS
	for _, x := range []struct {
		v   *float64
		dst *[]float64
	}{{r.FirstUpdateS, &a.first}, {r.FinalAfterStopS, &a.final}, {r.LagP95S, &a.lag}, {r.LagGrowthS, &a.growth}} {
		if x.v != nil {
			*x.dst = append(*x.dst, *x.v)
		}
	}
}

// fill sets the realtime metrics of m (docs/REALTIME.md):
//
//   - audio_s_per_wall_s = Σ audio_s of successful sessions / wall
//   - first_update_p50_s, first_update_p95_s, final_after_stop_p50_s,
//     final_after_stop_p95_s: percentiles over the sessions
//   - lag_p95_worst_s = max over sessions of lag_p95_s
//   - lag_growth_mean_s = mean over sessions of lag_growth_s
func (a *realtimeAcc) fill(m *model.PassMetrics, wallS float64) {
	if a.n == 0 {
		return
	}
	if wallS > 0 {
		m.AudioSPerWallS = new(a.audioS / wallS)
	}
	if len(a.first) > 0 {
		m.FirstUpdateP50S, m.FirstUpdateP95S = new(stats.Percentile(a.first, 50)), new(stats.Percentile(a.first, 95))
	}
	if len(a.final) > 0 {
		m.FinalAfterStopP50S, m.FinalAfterStopP95S = new(stats.Percentile(a.final, 50)), new(stats.Percentile(a.final, 95))
	}
	if len(a.lag) > 0 {
		m.LagP95WorstS = new(slices.Max(a.lag))
	}
	if len(a.growth) > 0 {
		m.LagGrowthMeanS = new(stats.Mean(a.growth))
	}
}

// StatOf summarises values over repeats.
func StatOf(xs []float64) model.Stat {
	if len(xs) == 0 {
		return model.Stat{}
	}
	return model.Stat{Mean: stats.Mean(xs), Min: slices.Min(xs), Max: slices.Max(xs), N: len(xs)}
}

// Level summarises the scored passes of one level in results.json's shape.
// Coverage counts are summed over the repeats.
func Level(passes []model.PassMetrics) model.LevelResult {
	if len(passes) == 0 {
		return model.LevelResult{}
	}
	r := model.LevelResult{Level: passes[0].Level, Concurrency: passes[0].Concurrency, Rate: passes[0].Rate, Repeats: len(passes), PerRepeat: passes}
	for _, p := range passes {
		r.Evaluated += p.Coverage.Evaluated
		r.Total += p.Coverage.Total
		r.Skipped += p.Coverage.Skipped
		r.Failed += p.Coverage.Failed
	}
	// Every model.Stat of the result is its passes' field of its json name.
	v := reflect.ValueOf(&r).Elem()
	for _, f := range reflect.VisibleFields(v.Type()) {
		if f.Type == reflect.TypeFor[model.Stat]() {
			key, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			v.FieldByIndex(f.Index).Set(reflect.ValueOf(StatOf(LevelValues(r, key))))
		}
	}
	levelGoodput(&r, passes)
	return r
}

// levelGoodput summarises the passes' goodput (when they have an SLO):
// goodput and attainment over repeats, met and counted summed.
func levelGoodput(r *model.LevelResult, passes []model.PassMetrics) {
	var g, a []float64
	for _, p := range passes {
		if p.GoodputReqS == nil {
			continue
		}
		r.SLO = p.SLO
		g = append(g, *p.GoodputReqS)
		if p.SLOAttainment != nil {
			a = append(a, *p.SLOAttainment)
		}
		r.SLOMet += p.SLOMet
		r.SLOCounted += p.SLOCounted
	}
	if len(g) > 0 {
		r.GoodputReqS = new(StatOf(g))
	}
	if len(a) > 0 {
		r.SLOAttainment = new(StatOf(a))
	}
}
