package report_test

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/asrprof/asrprof/analysis/engine"
	"github.com/asrprof/asrprof/internal/fixture"
)

// figureOf returns the <figure id="id"> element of doc ("" when absent).
func figureOf(doc, id string) string {
	i := strings.Index(doc, `<figure id="`+id+`"`)
	if i < 0 {
		return ""
	}
	j := strings.Index(doc[i:], "</figure>")
	return doc[i : i+j]
}

var (
	rectRe   = regexp.MustCompile(`<rect class="state"( data-state="([^"]*)")? x="([0-9.]+)" y="([0-9.]+)" width="([0-9.]+)" height="[0-9.]+" fill="(#[0-9a-f]+)"><title>([^<]*)</title>`)
	legendRe = regexp.MustCompile(`<rect x="[0-9.]+" y="[0-9.]+" width="12" height="10" fill="(#[0-9a-f]+)"></rect><text x="[0-9.]+" y="[0-9.]+" text-anchor="start" class="legend">([^<]*)</text>`)
)

func attributionReport(t *testing.T) (string, string) {
	t.Helper()
	const ms = time.Millisecond
	dir := filepath.Join(t.TempDir(), "attr")
	if _, err := fixture.WriteAttribution(dir, fixture.AttrConfig{Levels: []fixture.AttrLevel{
		{Concurrency: 2, Upload: 5 * ms, Receive: 3 * ms, Build: 8 * ms, FirstForward: 20 * ms, Decode: 60 * ms, Delivery: 2 * ms, OnCPU: 0.8, Runq: 0.1},
		{Concurrency: 8, Upload: 5 * ms, Receive: 3 * ms, Build: 8 * ms, FirstForward: 20 * ms, Decode: 60 * ms, Delivery: 2 * ms,
			BuildWorkers: 1, MaxRunning: 2, OnCPU: 0.7, Runq: 0.2, Sync: 0.2, GPUUtil: 0.5},
	}, RequestsPerPass: 16, CUDA: true, GPU: true, Seed: 9}); err != nil {
		t.Fatal(err)
	}
	return dir, render(t, dir)
}

// Per level, the attribution as one 100 % bar of its states, in
// AttributionStates order, with a legend; per request, its waterfall's
// latency bar split into the same states in the same colours.
func TestReportAttribution(t *testing.T) {
	_, doc := attributionReport(t)
	fig := figureOf(doc, "plot-attribution")
	if fig == "" {
		t.Fatal("no plot-attribution figure")
	}
	colorOf := map[string]string{}
	order := map[string]int{}
	for i, s := range engine.AttributionStates {
		order[s] = i
	}
	var legend []string
	for _, m := range legendRe.FindAllStringSubmatch(fig, -1) {
		legend = append(legend, m[2])
		colorOf[m[2]] = m[1]
	}
	for i := 1; i < len(legend); i++ {
		if order[legend[i]] <= order[legend[i-1]] {
			t.Errorf("legend out of AttributionStates order: %q", legend)
		}
	}
	for _, want := range []string{engine.StateBuildWait, engine.StateAdmission, engine.StateHost, engine.StateUnattributed} {
		if _, ok := colorOf[want]; !ok {
			t.Errorf("legend lacks %q: %q", want, legend)
		}
	}
	// Two bars (c2, c8), each 100 %: the widths of a bar's states add up
	// to the same total, in AttributionStates order from left to right.
	type bar struct {
		y     string
		width float64
		last  int
		n     int
	}
	bars := map[string]*bar{}
	var ys []string
	for _, m := range rectRe.FindAllStringSubmatch(fig, -1) {
		state, y, col := m[2], m[4], m[6]
		w, _ := strconv.ParseFloat(m[5], 64)
		if colorOf[state] != col {
			t.Errorf("%s drawn %s, its legend says %s", state, col, colorOf[state])
		}
		b := bars[y]
		if b == nil {
			b = &bar{y: y, last: -1}
			bars[y] = b
			ys = append(ys, y)
		}
		if order[state] <= b.last {
			t.Errorf("bar at y=%s: %s after a later state", y, state)
		}
		b.last = order[state]
		b.width += w
		b.n++
	}
	if len(bars) != 2 {
		t.Fatalf("%d bars, want 2 (one per level)", len(bars))
	}
	w0 := bars[ys[0]].width
	for _, y := range ys {
		if math.Abs(bars[y].width-w0) > 0.5 || bars[y].n < 3 {
			t.Errorf("bar at y=%s: %d states, %.2f px wide, want as wide as the first (%.2f)", y, bars[y].n, bars[y].width, w0)
		}
	}
	if bars[ys[1]].n <= bars[ys[0]].n {
		t.Errorf("c=8 (admission cap, one build worker) shows no more states than c=2")
	}
	// The waterfalls: their latency bars split into states, in the same
	// colours, as wide together as the latency.
	wf := figureOf(doc, "plot-waterfall")
	parts := rectRe.FindAllStringSubmatch(wf, -1)
	if len(parts) < 4 {
		t.Fatalf("waterfalls: %d state segments, want the slowest requests' states", len(parts))
	}
	for _, m := range parts {
		name := m[7][:strings.Index(m[7], ":")]
		if c, ok := colorOf[name]; ok && c != m[6] {
			t.Errorf("waterfall: %s drawn %s, the attribution plot %s", name, m[6], c)
		}
	}
	// The page's data: every drawn request's states add up to its latency.
	var tl struct {
		States []string `json:"states"`
		Reqs   []struct {
			Lat float64      `json:"lat"`
			A   [][3]float64 `json:"a"`
		} `json:"reqs"`
	}
	i := strings.Index(doc, `id="tl-json">`)
	j := strings.Index(doc[i:], "</script>")
	if err := json.Unmarshal([]byte(doc[i+len(`id="tl-json">`):i+j]), &tl); err != nil {
		t.Fatal(err)
	}
	with := 0
	for _, r := range tl.Reqs {
		if len(r.A) == 0 {
			continue
		}
		with++
		// In time order, each from where the last ended, to the latency.
		at := 0.0
		for _, p := range r.A {
			if math.Abs(p[1]-at) > 2e-6 || p[2] <= 0 {
				t.Fatalf("a request's states do not tile its latency: %v", r.A)
			}
			at += p[2]
		}
		if math.Abs(at-r.Lat) > 1e-5 {
			t.Errorf("a request's states add up to %g s, its latency %g s", at, r.Lat)
		}
	}
	if with < len(tl.Reqs)/2 || len(tl.States) != engine.NumStates {
		t.Errorf("%d of %d requests carry their states; %d state names", with, len(tl.Reqs), len(tl.States))
	}
}

// Every stage of every level reads off the log-scale chart, the ones
// under a millisecond included: a bar at least a few pixels long.
func TestReportStagesReadable(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "b")
	if _, err := fixture.Write(dir, fixture.Golden()["refserver"]); err != nil {
		t.Fatal(err)
	}
	doc := render(t, dir)
	fig := figureOf(doc, "plot-stages-log")
	if fig == "" {
		t.Fatal("no plot-stages-log figure")
	}
	re := regexp.MustCompile(`<rect class="logbar" data-label="([^"]*)" x="[0-9.]+" y="[0-9.]+" width="([0-9.]+)"`)
	bars := re.FindAllStringSubmatch(fig, -1)
	small := 0
	for _, m := range bars {
		w, _ := strconv.ParseFloat(m[2], 64)
		if w < 20 {
			t.Errorf("%s: %g px, too short to read", m[1], w)
		}
		if strings.Contains(m[1], "build→queued") {
			small++
		}
	}
	if len(bars) < 4*6 || small != 4 {
		t.Errorf("%d stage bars (%d of build→queued), want every stage of 4 levels", len(bars), small)
	}
}

// The knee marker sits only where the knee analysis found a knee: not on
// the first level of a sweep whose throughput never rose.
func TestReportKneeMarker(t *testing.T) {
	for _, tc := range []struct {
		name   string
		levels int // keep the last n levels of the refserver fixture (c1, c8, c32, c64)
		knee   string
	}{
		{"rising then falling", 4, "c=32"},
		{"falling from the first", 1 + 1, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := fixture.Golden()["refserver"]
			cfg.Levels = cfg.Levels[len(cfg.Levels)-tc.levels:]
			dir := filepath.Join(t.TempDir(), "b")
			if _, err := fixture.Write(dir, cfg); err != nil {
				t.Fatal(err)
			}
			doc := render(t, dir)
			fig := figureOf(doc, "plot-sweep-rps")
			marks := strings.Count(fig, `class="knee"`)
			switch {
			case tc.knee == "" && marks != 0:
				t.Errorf("a knee marker on a sweep without a knee:\n%s", doc[strings.Index(doc, "no knee")-200:][:600])
			case tc.knee != "" && marks != 1:
				t.Errorf("%d knee markers, want one at %s", marks, tc.knee)
			}
			if tc.knee == "" && !strings.Contains(doc, "no knee in this sweep") {
				t.Error("the report does not say why there is no knee")
			}
		})
	}
}

// A flame graph of stacks whose frame-pointer walk ran off into garbage
// (addresses in no mapping) roots its samples at real functions, not at
// [unknown].
func TestReportFlameUnmapped(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "b")
	cfg := fixture.Golden()["refserver"]
	cfg.Levels = cfg.Levels[:1]
	if _, err := fixture.Write(dir, cfg); err != nil {
		t.Fatal(err)
	}
	libm := &profile.Mapping{ID: 1, Start: 0x7f0000000000, Limit: 0x7f0000100000, File: "/usr/lib/libdecoder.so"}
	unk := &profile.Mapping{ID: 2, File: "[unknown]"}
	fn := []*profile.Function{{ID: 1, Name: "frame_eval"}, {ID: 2, Name: "search"}, {ID: 3, Name: "[unknown]"}, {ID: 4, Name: "main"}}
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "cpu", Unit: "nanoseconds"}},
		PeriodType: &profile.ValueType{Type: "cpu", Unit: "nanoseconds"}, Period: 10000000,
		Mapping:  []*profile.Mapping{libm, unk},
		Function: fn,
	}
	loc := func(id uint64, m *profile.Mapping, addr uint64, f *profile.Function) *profile.Location {
		l := &profile.Location{ID: id, Mapping: m, Address: addr, Line: []profile.Line{{Function: f}}}
		p.Location = append(p.Location, l)
		return l
	}
	eval := loc(1, libm, 0x7f0000001000, fn[0])
	search := loc(2, libm, 0x7f0000002000, fn[1])
	mainL := loc(5, libm, 0x7f0000003000, fn[3])
	// Garbage return addresses, each different (as a wild walk reads).
	for k := 0; k < 40; k++ {
		g1 := loc(uint64(100+2*k), unk, 0xfff6a7d600000000+uint64(k), fn[2])
		g2 := loc(uint64(101+2*k), unk, 0x10e42bf0+uint64(k), fn[2])
		p.Sample = append(p.Sample, &profile.Sample{Location: []*profile.Location{eval, g1, g2}, Value: []int64{10000000}})
	}
	for k := 0; k < 10; k++ {
		p.Sample = append(p.Sample, &profile.Sample{Location: []*profile.Location{search, mainL}, Value: []int64{10000000}})
	}
	os.MkdirAll(filepath.Join(dir, "cpu"), 0o755)
	f, err := os.Create(filepath.Join(dir, "cpu", "c"+strconv.Itoa(cfg.Levels[0].Concurrency)+"-1.pb.gz"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Write(f); err != nil {
		t.Fatal(err)
	}
	f.Close()
	doc := render(t, dir)
	fig := figureOf(doc, "plot-flame-"+"c"+strconv.Itoa(cfg.Levels[0].Concurrency))
	if fig == "" {
		t.Fatal("no flame graph")
	}
	// The second row (y = 16) names the roots of the call paths.
	row := regexp.MustCompile(`<rect x="[0-9.]+" y="16" width="[0-9.]+" height="15" fill="[^"]*"/><title>([^:<]*):`)
	var roots []string
	for _, m := range row.FindAllStringSubmatch(fig, -1) {
		roots = append(roots, m[1])
	}
	if len(roots) != 2 || roots[0] != "frame_eval" || roots[1] != "main" {
		t.Errorf("flame graph roots %q, want [frame_eval main]", roots)
	}
	if !strings.Contains(fig, "80 % of the samples&#39; stacks reached an address in no mapping") {
		t.Errorf("the flame graph does not say how many stacks it cut:\n%.600s", fig[len(fig)-600:])
	}
}

// Probes that were off say off, not that they lost nothing.
func TestReportProbesOff(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "b")
	if _, err := fixture.Write(dir, fixture.Golden()["refserver"]); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	mb, _ := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err := json.Unmarshal(mb, &m); err != nil {
		t.Fatal(err)
	}
	extra, _ := m["extra"].(map[string]any)
	if extra == nil {
		extra = map[string]any{}
		m["extra"] = extra
	}
	extra["probes"] = map[string]any{"gpu": "off: no NVML: library not found (libnvidia-ml.so.1)", "sched": "on", "cuda": "off"}
	mb, _ = json.Marshal(m)
	os.WriteFile(filepath.Join(dir, "manifest.json"), mb, 0o644)
	doc := render(t, dir)
	for probe, lost := range map[string]string{"gpu": "off", "cuda": "off", "sched": "none reported"} {
		re := regexp.MustCompile(`<tr><td>` + probe + `</td><td>[^<]*</td><td>([^<]*)</td>`)
		got := re.FindStringSubmatch(doc)
		if got == nil || got[1] != lost {
			t.Errorf("probe %s: lost %q, want %q", probe, got, lost)
		}
	}
}

// The plots fill the page: no SVG has a fixed pixel size (each scales to
// its column), two plots share a row, and the wide ones (the timeline,
// the stages) span it.
func TestReportLayout(t *testing.T) {
	doc := render(t, func() string {
		dir := filepath.Join(t.TempDir(), "b")
		if _, err := fixture.Write(dir, fixture.Golden()["refserver"]); err != nil {
			t.Fatal(err)
		}
		return dir
	}())
	for _, m := range regexp.MustCompile(`<svg [^>]*>`).FindAllString(doc, -1) {
		if strings.Contains(m, `class="tl-data`) {
			continue // the timeline's panels: sized inside their parent
		}
		if regexp.MustCompile(`\swidth="`).MatchString(m) || regexp.MustCompile(`\sheight="`).MatchString(m) {
			t.Errorf("an svg with a fixed size: %s", m)
		}
	}
	for _, want := range []string{"grid-template-columns:repeat(auto-fill,minmax(min(560px,100%),1fr))", "figure.fig svg,div.fig svg{width:100%"} {
		if !strings.Contains(doc, want) {
			t.Errorf("the page's CSS lacks %q", want)
		}
	}
	if strings.Contains(doc, "max-width:1160px") {
		t.Error("the page is still 1160 px wide at most")
	}
	for id, class := range map[string]string{"plot-sweep-rps": "fig", "plot-sweep-rtfx": "fig", "plot-timeline": "fig wide", "plot-stages": "fig wide"} {
		if !strings.Contains(doc, `<figure id="`+id+`" class="`+class+`">`) {
			t.Errorf("%s is not of class %q", id, class)
		}
	}
}
