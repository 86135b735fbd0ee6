package summary

import (
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/asrprof/asrprof/model"
)

func TestParseSLO(t *testing.T) {
	s, err := ParseSLO("latency=0.5s, ttft=200ms,rtf=0.3,first_update=1")
	if err != nil {
		t.Fatal(err)
	}
	want := []Limit{{"latency", 0.5}, {"ttft", 0.2}, {"rtf", 0.3}, {"first_update", 1}}
	if !reflect.DeepEqual(s.Limits, want) {
		t.Fatalf("limits %+v, want %+v", s.Limits, want)
	}
	if got := s.String(); got != "latency=500ms,ttft=200ms,rtf=0.3,first_update=1s" {
		t.Errorf("String() = %q", got)
	}
	back, err := ParseSLO(s.String())
	if err != nil || !reflect.DeepEqual(back, s) {
		t.Errorf("round trip %+v %v", back, err)
	}
	for in, msg := range map[string]string{
		"latency_p95=0.5s": "statistic of a pass",
		"speed=3":          "unknown metric",
		"latency":          "want metric=limit",
		"latency=fast":     "duration",
		"rtf=0.3s":         "number",
		"latency=-1s":      "must be > 0",
		"rtf=1,rtf=2":      "twice",
	} {
		if _, err := ParseSLO(in); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("ParseSLO(%q) = %v, want an error with %q", in, err, msg)
		}
	}
	if err := s.Check("openai", false); err == nil || !strings.Contains(err.Error(), "ttft") {
		t.Errorf("ttft under plain openai: %v", err)
	}
	if err := (SLO{Limits: []Limit{{"latency", 1}}}).Check("openai", false); err != nil {
		t.Error(err)
	}
}

// Hand-computed: six requests over a 4 s pass under latency ≤ 1 s and
// rtf ≤ 0.3. One meets both; one is too slow (latency and rtf); one has
// rtf 0.5; one failed; one was canceled by the client's stop (left out);
// one meets both. Goodput 2/4 = 0.5 req/s; attainment 2/5 = 0.4.
func TestGoodput(t *testing.T) {
	ok := func(lat, audio float64) model.Request {
		return model.Request{Status: model.StatusOK, LatencyS: lat, AudioDurationS: audio}
	}
	recs := []model.Request{
		ok(0.5, 5),   // rtf 0.1: met
		ok(2, 5),     // latency 2 > 1, rtf 0.4 > 0.3
		ok(0.9, 1.8), // rtf 0.5
		{Status: model.StatusFailed, ErrorKind: model.FailHTTP5xx, LatencyS: 0.1, AudioDurationS: 5},
		{Status: model.StatusFailed, ErrorKind: model.FailCanceled, LatencyS: 0.1, AudioDurationS: 5},
		ok(1, 10), // latency exactly at the limit: met
	}
	slo, err := ParseSLO("latency=1s,rtf=0.3")
	if err != nil {
		t.Fatal(err)
	}
	m := passUnder(recs, 4, slo)
	if m.SLOMet != 2 || m.SLOCounted != 5 || m.SLOCanceled != 1 {
		t.Fatalf("met %d counted %d canceled %d", m.SLOMet, m.SLOCounted, m.SLOCanceled)
	}
	if m.GoodputReqS == nil || math.Abs(*m.GoodputReqS-0.5) > 1e-12 {
		t.Errorf("goodput %v, want 0.5", m.GoodputReqS)
	}
	if m.SLOAttainment == nil || math.Abs(*m.SLOAttainment-0.4) > 1e-12 {
		t.Errorf("attainment %v, want 0.4", m.SLOAttainment)
	}
	if want := map[string]int{"latency": 1, "rtf": 2, "error": 1}; !reflect.DeepEqual(m.SLOMisses, want) {
		t.Errorf("misses %v, want %v", m.SLOMisses, want)
	}
	if m.SLO != "latency=1s,rtf=0.3" {
		t.Errorf("slo %q", m.SLO)
	}

	// A second repeat with every request met: the level's goodput is
	// the mean over repeats, met and counted are summed.
	m2 := passUnder(recs[:1], 2, slo)
	lv := Level([]model.PassMetrics{m, m2})
	if lv.GoodputReqS == nil || math.Abs(lv.GoodputReqS.Mean-0.5) > 1e-12 || lv.GoodputReqS.Max != 0.5 {
		t.Errorf("level goodput %+v", lv.GoodputReqS)
	}
	if lv.SLOAttainment == nil || math.Abs(lv.SLOAttainment.Mean-0.7) > 1e-12 || lv.SLOAttainment.Min != 0.4 {
		t.Errorf("level attainment %+v", lv.SLOAttainment)
	}
	if lv.SLOMet != 3 || lv.SLOCounted != 6 {
		t.Errorf("level met %d counted %d", lv.SLOMet, lv.SLOCounted)
	}

	// No SLO: no goodput fields.
	m3 := passUnder(recs, 4, SLO{})
	if m3.GoodputReqS != nil || m3.SLO != "" || Level([]model.PassMetrics{m3}).GoodputReqS != nil {
		t.Errorf("goodput without an SLO: %+v", m3)
	}

	// Realtime limits read the session fields; a session that never
	// reached its final misses final_after_stop.
	one := 0.5
	rt, _ := ParseSLO("first_update=1s,final_after_stop=1s")
	r := []model.Request{{Status: model.StatusOK, FirstUpdateS: &one, FinalAfterStopS: &one}, {Status: model.StatusOK, FirstUpdateS: &one}}
	m4 := passUnder(r, 1, rt)
	if m4.SLOMet != 1 || m4.SLOMisses["final_after_stop"] != 1 {
		t.Errorf("realtime: met %d misses %v", m4.SLOMet, m4.SLOMisses)
	}
}

// passUnder is the metrics of a pass of recs, wall seconds long, under slo.
func passUnder(recs []model.Request, wall float64, slo SLO) model.PassMetrics {
	a := NewAcc(slo)
	for i := range recs {
		a.Add(&recs[i])
	}
	return a.Pass(wall)
}

func TestPassesSLO(t *testing.T) {
	sec := int64(1e9)
	recs := []model.Request{
		{Level: "c1", Repeat: 1, Status: model.StatusOK, LatencyS: 0.2, StartUnixNs: 0, EndUnixNs: sec},
		{Level: "c1", Repeat: 1, Status: model.StatusOK, LatencyS: 3, StartUnixNs: sec, EndUnixNs: 4 * sec},
	}
	runs := []model.LevelRun{{Level: "c1", Concurrency: 1, Repeat: 1, WallS: 4}}
	slo, _ := ParseSLO("latency=1s")
	ps := Passes(recs, runs, slo)
	if len(ps) != 1 || ps[0].SLOMet != 1 || *ps[0].GoodputReqS != 0.25 || *ps[0].SLOAttainment != 0.5 {
		t.Fatalf("%+v", ps)
	}
	res := Levels(Passes(recs, runs, slo))
	if res[0].GoodputReqS.Mean != 0.25 {
		t.Errorf("summary %+v", res[0])
	}
	if Passes(recs, runs, SLO{})[0].GoodputReqS != nil {
		t.Error("Passes without an SLO has goodput")
	}
}
