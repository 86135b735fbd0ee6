package summary

import (
	"testing"

	"github.com/asrprof/asrprof/model"
)

func TestPasses(t *testing.T) {
	sec := int64(1e9)
	req := func(level string, repeat int, warmup bool, start, end int64) model.Request {
		return model.Request{Level: level, Repeat: repeat, Warmup: warmup, Status: model.StatusOK, LatencyS: 0.5,
			AudioDurationS: 2, StartUnixNs: start * sec, EndUnixNs: end * sec, Scored: !warmup,
			Errors: &model.WordErrors{Sub: 1, RefWords: 4}}
	}
	// c8 ran first, then c1; c1 repeat 2 was cut short by a kill (no run
	// recorded); r2 appears only in the requests. Completion order mixes
	// the passes.
	recs := []model.Request{
		req("c1", 1, false, 10, 11), req("c8", 0, true, 0, 1), req("c8", 1, false, 2, 3),
		req("c1", 2, false, 20, 24), req("c8", 1, false, 2, 4), req("r2", 1, false, 30, 31), req("c1", 2, false, 21, 22),
	}
	runs := []model.LevelRun{
		{Level: "c8", Concurrency: 8, Repeat: 0, Warmup: true, StartUnixNs: 0, EndUnixNs: 1 * sec},
		{Level: "c8", Concurrency: 8, Repeat: 1, StartUnixNs: 2 * sec, EndUnixNs: 4 * sec, WallS: 2.5},
		{Level: "c1", Concurrency: 1, Repeat: 1, StartUnixNs: 9 * sec, EndUnixNs: 11 * sec},
	}
	ps := Passes(recs, runs, SLO{})
	type want struct {
		level         string
		repeat        int
		warmup        bool
		conc, total   int
		wall, reqPerS float64
	}
	wants := []want{
		{"c8", 0, true, 8, 1, 1, 1},
		{"c8", 1, false, 8, 2, 2.5, 2 / 2.5}, // the monotonic wall the capture measured
		{"c1", 1, false, 1, 1, 2, 0.5},       // the run's start and end
		{"c1", 2, false, 0, 2, 4, 0.5},       // no run: first send to last completion
		{"r2", 1, false, 0, 1, 1, 1},
	}
	if len(ps) != len(wants) {
		t.Fatalf("%d passes, want %d: %+v", len(ps), len(wants), ps)
	}
	for i, w := range wants {
		p := ps[i]
		if p.Level != w.level || p.Repeat != w.repeat || p.Warmup != w.warmup || p.Concurrency != w.conc ||
			p.Coverage.Total != w.total || p.WallS != w.wall || p.RequestsPerS != w.reqPerS {
			t.Errorf("pass %d = %s/%d warmup=%v c=%d total=%d wall=%v req/s=%v, want %+v",
				i, p.Level, p.Repeat, p.Warmup, p.Concurrency, p.Coverage.Total, p.WallS, p.RequestsPerS, w)
		}
		if p.CorpusWER != 0.25 && !p.Warmup {
			t.Errorf("pass %d: WER %v", i, p.CorpusWER)
		}
	}
	res := Levels(Passes(recs, runs, SLO{}))
	if len(res) != 3 {
		t.Fatalf("%d levels, want c8, c1, r2", len(res))
	}
	c8, c1 := res[0], res[1]
	if c8.Level != "c8" || c8.Repeats != 1 || c8.Total != 2 || c1.Level != "c1" || c1.Repeats != 2 || c1.Total != 3 || res[2].Level != "r2" {
		t.Errorf("summary %+v", res)
	}
	for _, lr := range res {
		for _, p := range lr.PerRepeat {
			if p.Warmup {
				t.Errorf("%s: a warmup pass in results", lr.Level)
			}
		}
	}
	if got := Levels(Passes(nil, runs, SLO{})); len(got) != 0 || got == nil {
		t.Errorf("no requests: %+v", got)
	}
}
