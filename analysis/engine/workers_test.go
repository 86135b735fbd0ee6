package engine

import (
	"math"
	"testing"

	"github.com/asrprof/asrprof/bundle/columns"
)

// Summarize is SummarizeGroups per level alone.
func Summarize(reqs *columns.RequestCols, rows *columns.StageRows, order []string, names []string) []LevelStages {
	return SummarizeGroups(reqs, rows, order, names, nil, nil)
}

// SummarizeWorkers is SummarizeGroups per level and worker (w.Of), the
// workers of each level in w.Names order.
func SummarizeWorkers(reqs *columns.RequestCols, rows *columns.StageRows, order []string, names []string, w *Workers) []LevelStages {
	return SummarizeGroups(reqs, rows, order, names, w.Of, w.Names)
}

func strs(vs ...string) columns.Strings {
	s := columns.Strings{}
	ix := map[string]int32{}
	for _, v := range vs {
		c, ok := ix[v]
		if !ok {
			c = int32(len(s.Dict))
			ix[v] = c
			s.Dict = append(s.Dict, v)
		}
		s.Codes = append(s.Codes, c)
	}
	return s
}

// Three requests through a router: the first two name their worker in the
// router's span and the worker's own spans agree (w0) or not (w1 named, w9
// answered); the third has only the worker's own name; a client span's
// attributes are not read.
func TestFindWorkers(t *testing.T) {
	s := &columns.Spans{
		RequestIndex: []int32{0, 0, 1, 1, 2, 2},
		Name:         strs("route", "transcription", "route", "transcription", "transcription", "asr.request"),
		Service:      strs("asrprof-router", "asrprof-refserver", "asrprof-router", "asrprof-refserver", "asrprof-refserver", "asrprof"),
		Attributes: []string{`{"router.worker":"w0"}`, `{"service.instance.id":"w0"}`, `{"router.worker":"w1"}`,
			`{"service.instance.id":"w9"}`, `{"service.instance.id":"w2"}`, `{"router.worker":"client"}`},
	}
	w := FindWorkers(3, s)
	if got := w.Of; got[0] != "w0" || got[1] != "w1" || got[2] != "w2" {
		t.Errorf("workers %v", got)
	}
	if len(w.Names) != 3 || w.Routed != 2 || w.Confirmed != 1 || w.Mismatched != 1 {
		t.Errorf("names %v routed %d confirmed %d mismatched %d", w.Names, w.Routed, w.Confirmed, w.Mismatched)
	}
	if n := FindWorkers(2, nil); len(n.Of) != 2 || len(n.Names) != 0 {
		t.Errorf("without spans: %+v", n)
	}
}

// The router stage: the route span less the transcription span, outside
// the total: unattributed stays 0 and the client overhead loses it.
func TestRouterGapStage(t *testing.T) {
	p := &Preset{Name: "r", Requires: Point{Span: "transcription"}, Stages: []Stage{
		{Name: "decode tail", From: Point{Span: "decode"}, To: Point{Span: "decode", End: true}},
		{Name: Total, From: Point{Span: "transcription"}, To: Point{Span: "transcription", End: true}},
		{Name: Router, Outer: "route", Inner: "transcription"},
	}}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	s := &columns.Spans{
		RequestIndex: []int32{0, 0, 0},
		SpanID:       []string{"a", "b", "c"},
		Name:         strs("route", "transcription", "decode"),
		Service:      strs("asrprof-router", "asrprof-refserver", "asrprof-refserver"),
		StartUnixNs:  []int64{0, 2e6, 2e6},
		EndUnixNs:    []int64{110e6, 102e6, 102e6},
		Attributes:   []string{"", "", ""},
	}
	rows := Derive(p, 1, nil, s)
	rc := &columns.RequestCols{N: 1, Level: strs("c1"), Status: strs("ok"), Warmup: []bool{false}, LatencyS: []float64{0.120}, Repeat: []int32{1}}
	lv := Summarize(rc, rows, []string{"c1"}, []string{Router, Total, Unattributed, ClientOverhead})
	if len(lv) != 1 {
		t.Fatalf("levels %+v", lv)
	}
	near := func(name string, want float64) {
		if st := lv[0].Stages[name]; st == nil || math.Abs(st.MeanMs-want) > 1e-6 {
			t.Errorf("%s = %+v, want %.3f ms", name, st, want)
		}
	}
	near(Router, 10)         // 110 − 100 ms
	near(Total, 100)         // the worker's
	near(Unattributed, 0)    // the router is not inside total
	near(ClientOverhead, 10) // 120 − 100 − 10
}

// Balance: requests and busy time (the union of each worker's totals) per
// level and worker; SummarizeWorkers: one row per level and worker.
func TestBalance(t *testing.T) {
	p := &Preset{Name: "r", Requires: Point{Span: "transcription"}, Stages: []Stage{
		{Name: Total, From: Point{Span: "transcription"}, To: Point{Span: "transcription", End: true}},
	}}
	s := &columns.Spans{
		RequestIndex: []int32{0, 0, 1, 1, 2, 2},
		SpanID:       []string{"a", "b", "c", "d", "e", "f"},
		Name:         strs("route", "transcription", "route", "transcription", "route", "transcription"),
		Service:      strs("asrprof-router", "asrprof-refserver", "asrprof-router", "asrprof-refserver", "asrprof-router", "asrprof-refserver"),
		// w0: two overlapping requests, 0–100 and 50–150 ms (busy 150 ms); w1: 0–40 ms
		StartUnixNs: []int64{0, 0, 50e6, 50e6, 0, 0},
		EndUnixNs:   []int64{100e6, 100e6, 150e6, 150e6, 40e6, 40e6},
		Attributes:  []string{`{"router.worker":"w0"}`, "", `{"router.worker":"w0"}`, "", `{"router.worker":"w1"}`, ""},
	}
	rows := Derive(p, 3, nil, s)
	w := FindWorkers(3, s)
	rc := &columns.RequestCols{N: 3, Level: strs("c2", "c2", "c2"), Status: strs("ok", "ok", "ok"), Warmup: []bool{false, false, false},
		LatencyS: []float64{0.1, 0.1, 0.04}, Repeat: []int32{1, 1, 1}, AudioDurationS: []float64{1, 3, 0}}
	b := Balance(rc, rows, w, []string{"c2"})
	if len(b) != 2 || b[0].Worker != "w0" || b[0].Requests != 2 || math.Abs(b[0].BusyS-0.150) > 1e-9 ||
		b[1].Worker != "w1" || b[1].Requests != 1 || math.Abs(b[1].BusyS-0.040) > 1e-9 {
		t.Errorf("balance %+v", b)
	}
	// w0: 0.2 s of server total over 4 s of audio; w1's audio is unknown
	if math.Abs(b[0].TotalRTF-0.05) > 1e-9 || b[1].TotalRTF != 0 {
		t.Errorf("total RTF w0 %v (want 0.05), w1 %v (want 0: no audio length)", b[0].TotalRTF, b[1].TotalRTF)
	}
	lv := SummarizeWorkers(rc, rows, []string{"c2"}, []string{Total}, w)
	if len(lv) != 2 || lv[0].Worker != "w0" || lv[0].N != 2 || lv[1].Worker != "w1" || lv[1].N != 1 {
		t.Errorf("per-worker rows %+v", lv)
	}
}
