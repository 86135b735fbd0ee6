package summary

import (
	"testing"

	"github.com/asrprof/asrprof/model"
)

func f(x float64) *float64 { return &x }

func TestPassRealtime(t *testing.T) {
	recs := []model.Request{
		{Status: model.StatusOK, AudioDurationS: 5, AudioS: 5, FirstUpdateS: f(0.5), FinalAfterStopS: f(1), LagP95S: f(0.4), LagGrowthS: f(0.1)},
		{Status: model.StatusOK, AudioDurationS: 5, AudioS: 5, FirstUpdateS: f(1.5), FinalAfterStopS: f(3), LagP95S: f(2.5), LagGrowthS: f(1.1)},
		// A failed session counts for coverage only.
		{Status: model.StatusFailed, ErrorKind: model.FailConnection, AudioS: 2, FirstUpdateS: f(9), LagP95S: f(9)},
	}
	m := Pass(recs, 10)
	check := func(name string, got *float64, want float64) {
		t.Helper()
		if got == nil || *got < want-1e-9 || *got > want+1e-9 {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	check("audio_s_per_wall_s", m.AudioSPerWallS, 1.0)
	check("first_update_p50_s", m.FirstUpdateP50S, 1.0)
	check("first_update_p95_s", m.FirstUpdateP95S, 1.45)
	check("final_after_stop_p50_s", m.FinalAfterStopP50S, 2.0)
	check("final_after_stop_p95_s", m.FinalAfterStopP95S, 2.9)
	check("lag_p95_worst_s", m.LagP95WorstS, 2.5)
	check("lag_growth_mean_s", m.LagGrowthMeanS, 0.6)

	// File requests have no realtime metrics.
	m = Pass([]model.Request{{Status: model.StatusOK, AudioDurationS: 5, LatencyS: 1}}, 10)
	if m.AudioSPerWallS != nil || m.FirstUpdateP50S != nil || m.LagP95WorstS != nil {
		t.Errorf("realtime metrics for file requests: %+v", m)
	}
}
