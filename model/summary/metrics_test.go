package summary

import (
	"math"
	"testing"

	"github.com/asrprof/asrprof/model"
)

func TestPass(t *testing.T) {
	ok := func(lat, audio float64, e *model.WordErrors) model.Request {
		return model.Request{Status: model.StatusOK, LatencyS: lat, AudioDurationS: audio, Scored: e != nil, Errors: e}
	}
	recs := []model.Request{
		ok(1, 5, &model.WordErrors{Sub: 1, RefWords: 3}),
		ok(2, 10, &model.WordErrors{Del: 1, Ins: 1, RefWords: 2}),
		ok(3, 5, nil), // empty normalized reference: skipped
		{Status: model.StatusFailed, ErrorKind: model.FailHTTP5xx, AudioDurationS: 100},
		{Status: model.StatusFailed, ErrorKind: model.FailTimeout},
	}
	m := Pass(recs, 4)
	c := m.Coverage
	// skipped = total − evaluated, as SGLang-Omni counts it: the two
	// failures and the empty reference.
	if c.Total != 5 || c.Evaluated != 2 || c.Skipped != 3 || c.Failed != 2 || c.EmptyRef != 1 {
		t.Fatalf("coverage %+v", c)
	}
	if c.FailureKinds[model.FailHTTP5xx] != 1 || c.FailureKinds[model.FailTimeout] != 1 {
		t.Errorf("failure kinds %v", c.FailureKinds)
	}
	check := func(name string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-9 {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	check("throughput", m.ThroughputSamplesPerS, 2.0/4)
	check("req/s", m.RequestsPerS, 3.0/4)
	check("rtfx", m.RTFx, 20.0/4) // failed requests' audio does not count
	check("latency mean", m.LatencyMeanS, 2)
	check("latency median", m.LatencyMedianS, 2)
	check("latency p95", m.LatencyP95S, 2.9)
	check("corpus wer", m.CorpusWER, 3.0/5)
	check("rtf mean", m.RTFMean, (0.2+0.2+0.6)/3)
}

func TestLevel(t *testing.T) {
	ps := []model.PassMetrics{
		{Level: "c8", Concurrency: 8, CorpusWER: 0.1, RTFx: 10, Coverage: model.Coverage{Total: 5, Evaluated: 5}},
		{Level: "c8", Concurrency: 8, CorpusWER: 0.3, RTFx: 20, Coverage: model.Coverage{Total: 5, Evaluated: 4, Failed: 1}},
	}
	r := Level(ps)
	if r.Repeats != 2 || r.Total != 10 || r.Evaluated != 9 || r.Failed != 1 || r.Concurrency != 8 {
		t.Fatalf("%+v", r)
	}
	if r.CorpusWER != (model.Stat{Mean: 0.2, Min: 0.1, Max: 0.3, N: 2}) {
		t.Errorf("wer %+v", r.CorpusWER)
	}
	if r.RTFx.Mean != 15 || len(r.PerRepeat) != 2 {
		t.Errorf("rtfx %+v", r.RTFx)
	}
}
