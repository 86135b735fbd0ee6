package diarize

import (
	"cmp"
	"github.com/asrprof/asrprof/bundle"
	"math"
	"slices"

	"github.com/asrprof/asrprof/bench/score"
	"github.com/asrprof/asrprof/model"
	"github.com/asrprof/asrprof/stats"
)

// Input is one dataset sample of a transcribe-diarize pass: its
// reference is in the markup.
type Input struct {
	ID        string
	AudioPath string
	Expected  string
}

// Score builds both files of one transcribe-diarize pass from its
// dataset and its (scored, non-warmup) records, as SGLang-Omni's
// build_evaluation_payload does: only successful requests are scored
// (bench/score/diarize), each sample appears in per_sample in dataset
// order, and the prediction is the server's text stripped.
func Score(samples []Input, recs []model.Request, cfg bundle.DiarizeConfig) (bundle.DiarizeResults, bundle.DiarizeSpeedResults) {
	byID := make(map[string]*model.Request, len(recs))
	for i := range recs {
		if _, dup := byID[recs[i].SampleID]; !dup && !recs[i].Warmup {
			byID[recs[i].SampleID] = &recs[i]
		}
	}
	ok := func(r *model.Request) bool { return r != nil && r.Status == model.StatusOK }
	var rows []Row
	for _, s := range samples {
		if r := byID[s.ID]; ok(r) {
			rows = append(rows, Row{ID: s.ID, Ref: s.Expected, Pred: score.PyStrip(r.Hyp)})
		}
	}
	scored := Compute(rows)
	bySample := make(map[string]*bundle.DiarizePerSample, len(scored.Samples))
	for i := range scored.Samples {
		bySample[scored.Samples[i].ID] = &scored.Samples[i]
	}
	res := bundle.DiarizeResults{
		Config:             cfg,
		DiarizationMetrics: scored.Metrics,
		MetricsPercent:     scored.Percent,
		PerSample:          make([]bundle.DiarizePerSample, 0, len(samples)),
	}
	res.Config.TimingScope = ""
	sum := &res.Summary
	for _, s := range samples {
		r := byID[s.ID]
		var p bundle.DiarizePerSample // a sample scored (its request succeeded) starts from its scores
		if d := bySample[s.ID]; d != nil {
			p = *d
		}
		p.ID, p.AudioPath, p.ExpectedText, p.ExpectedNormalized = s.ID, s.AudioPath, s.Expected, NormalizeExact(s.Expected)
		if r != nil {
			p.LatencyS, p.AudioDurationS = new(r.LatencyS), new(r.AudioDurationS)
			if r.Error != "" {
				p.Error = &r.Error
			}
		}
		if ok(r) {
			sum.Evaluated++
			p.ResultText = score.PyStrip(r.Hyp)
			if p.ResultText != "" {
				p.ResultNormalized = NormalizeExact(p.ResultText)
			}
			p.IsExactMatch = p.ExpectedNormalized == p.ResultNormalized
			if p.IsExactMatch {
				sum.ExactMatches++
			}
		}
		res.PerSample = append(res.PerSample, p)
	}
	sum.TotalSamples = len(samples)
	sum.Skipped = sum.TotalSamples - sum.Evaluated
	sum.Mismatches = sum.Evaluated - sum.ExactMatches
	if sum.Evaluated > 0 {
		sum.ExactMatchRate = float64(sum.ExactMatches) / float64(sum.Evaluated)
	}
	passRecs := slices.DeleteFunc(slices.Clone(recs), func(r model.Request) bool { return r.Warmup })
	res.Speed = diarizeSpeed(passRecs, cfg.WallClockS)
	speedCfg := cfg
	speedCfg.TimingScope = "asr_requests_only"
	return res, bundle.DiarizeSpeedResults{SchemaVersion: 1, Config: speedCfg, Speed: res.Speed}
}

// diarizeSpeed is compute_speed_metrics over a pass's records.
func diarizeSpeed(recs []model.Request, wallS float64) bundle.DiarizeSpeed {
	var lat, rtf, audio, ttft, gaps []float64
	sp := bundle.DiarizeSpeed{TotalRequests: len(recs)}
	for _, r := range recs {
		if r.Status != model.StatusOK {
			sp.FailedRequests++
			continue
		}
		sp.CompletedRequests++
		lat = append(lat, r.LatencyS)
		if r.AudioDurationS > 0 {
			audio = append(audio, r.AudioDurationS)
			if x := r.LatencyS / r.AudioDurationS; x > 0 && !math.IsInf(x, 0) {
				rtf = append(rtf, x)
			}
		}
		if r.FirstTokenUnixNs != 0 {
			ttft = append(ttft, r.TTFTS)
		}
		gaps = append(gaps, r.ChunkGapsS...)
	}
	if sp.CompletedRequests == 0 {
		return sp
	}
	pct := func(xs []float64, p float64) *float64 {
		if len(xs) == 0 {
			return nil
		}
		return new(stats.Percentile(xs, p))
	}
	mean := func(xs []float64) *float64 {
		if len(xs) == 0 {
			return nil
		}
		return new(stats.Mean(xs))
	}
	sp.LatencyMeanS, sp.LatencyMedianS, sp.LatencyP95S, sp.LatencyP99S = mean(lat), pct(lat, 50), pct(lat, 95), pct(lat, 99)
	sp.AudioDurationMean = cmp.Or(mean(audio), new(0.0))
	sp.RTFMean, sp.RTFMedian, sp.RTFP95, sp.RTFP99 = mean(rtf), pct(rtf, 50), pct(rtf, 95), pct(rtf, 99)
	if wallS > 0 {
		sp.ThroughputQPS = new(float64(sp.CompletedRequests) / wallS)
		sp.AudioThroughput = new(stats.Sum(audio) / wallS)
	}
	sp.TextTTFTMeanS, sp.TextTTFTMedianS, sp.TextTTFTP95S, sp.TextTTFTP99S = mean(ttft), pct(ttft, 50), pct(ttft, 95), pct(ttft, 99)
	sp.InterChunkMeanS, sp.InterChunkP95S, sp.InterChunkP99S = mean(gaps), pct(gaps, 95), pct(gaps, 99)
	return sp
}
