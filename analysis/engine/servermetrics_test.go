package engine

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/probe"
	"github.com/asrprof/asrprof/probe/servermetrics"
)

func near(a, b float64) bool { return a == b || math.Abs(a-b) < 1e-9 }

// The built-in map parses and names vLLM's and SGLang's metrics; a bad
// map file is refused with an error that names the file and the field.
func TestParseMetricsMap(t *testing.T) {
	m, err := LoadMetricsMap("")
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Servers) != 2 || m.Servers[0].Server != "vllm" || m.Servers[1].Server != "sglang" ||
		m.Servers[0].Histograms["queue"] != "vllm:request_queue_time_seconds" ||
		m.Servers[1].Histograms["queue"] != "sglang:queue_time_seconds" ||
		m.Servers[1].Gauges["waiting"] != "sglang:num_queue_reqs" || m.Servers[0].Source == "" || m.Servers[1].Source == "" {
		t.Errorf("built-in map: %+v", m.Servers)
	}
	ok, err := ParseMetricsMap("mine.json", []byte(`{"servers": [{"histograms": {"queue": "q_seconds"}, "unit": "ms"}]}`))
	if err != nil || ok.Servers[0].Server != "custom" || ok.Servers[0].scale() != 1e-3 {
		t.Errorf("a map without a server name: %+v, %v; want server custom in ms", ok, err)
	}
	for _, tc := range []struct{ src, want string }{
		{`{"servers": [{"server": "x", "histograms": {"queu": "a"}}]}`, `field servers[0].histograms: unknown role "queu" (roles: queue, prefill`},
		{`{"servers": [{"server": "x", "gauges": {"queue": "a"}}]}`, `field servers[0].gauges: unknown role "queue" (roles: running, waiting)`},
		{`{"servers": [{"server": "x", "histograms": {"queue": "a_bucket"}}]}`, `field servers[0].histograms.queue: "a_bucket": give the histogram's name`},
		{`{"servers": [{"server": "x", "histograms": {"queue": ""}}]}`, `field servers[0].histograms.queue: no metric name`},
		{`{"servers": [{"server": "x", "unit": "us", "histograms": {"queue": "a"}}]}`, `field servers[0].unit: "us", want s or ms`},
		{`{"servers": [{"server": "x", "histogram": {"queue": "a"}}]}`, `unknown field "histogram"`},
		{`{"servers": [{"server": "x", "histograms": {"queue": 3}}]}`, `field servers.histograms: number, want string`},
		{`{"servers": [{"server": "x"}]}`, `servers[0] (x): no histograms and no gauges`},
		{`{"servers": []}`, `field servers: no server`},
		{"{\"servers\": [\n{\"server\": \"x\",, }]}", `line 2: invalid character ','`},
	} {
		_, err := ParseMetricsMap("mine.json", []byte(tc.src))
		if err == nil || !strings.HasPrefix(err.Error(), "metrics map mine.json: ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want metrics map mine.json: ... %s", tc.src, err, tc.want)
		}
	}
	if _, err := LoadMetricsMap(filepath.Join(t.TempDir(), "none.json")); err == nil || !strings.Contains(err.Error(), "none.json") {
		t.Errorf("a missing map file: %v", err)
	}
}

// The map in docs/ANALYSIS.md ("The server's own /metrics") is a valid
// map file.
func TestMetricsMapOfTheDocs(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "ANALYSIS.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(doc), "## The server's own /metrics")
	_, block, ok2 := strings.Cut(sec, "```json\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("no JSON block in docs/ANALYSIS.md's section \"The server's own /metrics\"")
	}
	m, err := ParseMetricsMap("docs/ANALYSIS.md", []byte(block))
	if err != nil {
		t.Fatal(err)
	}
	if s := m.Servers[0]; s.Server != "triton-asr" || s.scale() != 1e-3 || s.Histograms["queue"] == "" || s.Gauges["running"] == "" {
		t.Errorf("the docs' map: %+v", m.Servers)
	}
}

// period is a period line of a pass: a histogram series' increase.
func period(name string, labels map[string]string, delta float64) bundle.ServerMetricsRecord {
	d := bundle.MetricValue(delta)
	return bundle.ServerMetricsRecord{Kind: bundle.MetricsKindPeriod, Name: name, Type: "histogram", Labels: bundle.MetricLabels{Map: labels}, Delta: &d}
}

// histPeriods are the period lines of histogram name over a pass whose
// observations are obs, per label set (engine), over buckets.
func histPeriods(name string, buckets []float64, obs map[string][]float64) []bundle.ServerMetricsRecord {
	var out []bundle.ServerMetricsRecord
	for eng, vs := range obs {
		sum := 0.0
		for _, v := range vs {
			sum += v
		}
		for _, le := range append(buckets, math.Inf(1)) {
			n := 0
			for _, v := range vs {
				if v <= le {
					n++
				}
			}
			les := "+Inf"
			if !math.IsInf(le, 1) {
				les = fmt.Sprint(le)
			}
			out = append(out, period(name+"_bucket", map[string]string{"engine": eng, "le": les}, float64(n)))
		}
		out = append(out, period(name+"_count", map[string]string{"engine": eng}, float64(len(vs))),
			period(name+"_sum", map[string]string{"engine": eng}, sum))
	}
	return out
}

// A pass's histogram, from the increases of its series, label sets
// summed: count, Δsum/Δcount and the buckets' quantiles, hand-computed.
func TestHistogramOver(t *testing.T) {
	bk := []float64{0.05, 0.1, 0.2, 0.5, 1}
	// Two engines, 8 observations: cumulative 0, 2, 6, 7, 8, 8.
	mid := histPeriods("q", bk, map[string][]float64{"0": {0.08, 0.08, 0.15, 0.15}, "1": {0.15, 0.15, 0.3, 0.7}})
	// Another histogram's series and a counter are left alone.
	mid = append(mid, period("q_other_count", nil, 99), period("qq_count", nil, 99))
	for _, tc := range []struct {
		name  string
		recs  []bundle.ServerMetricsRecord
		scale float64
		want  HistStats
		ok    bool
	}{
		// p50: rank 4 in (0.1, 0.2] (4 of them, 2 before): 0.1 + 0.1·2/4.
		// p95: rank 7.6 in (0.5, 1] (1, 7 before): 0.5 + 0.5·0.6.
		{"middle buckets", mid, 1, HistStats{Count: 8, SumS: 1.76, MeanS: 0.22, P50S: 0.15, P95S: 0.8}, true},
		// In ms: the same in seconds.
		{"unit ms", histPeriods("q", []float64{50, 100, 200, 500, 1000}, map[string][]float64{"0": {80, 80, 150, 150, 150, 150, 300, 700}}), 1e-3,
			HistStats{Count: 8, SumS: 1.76, MeanS: 0.22, P50S: 0.15, P95S: 0.8}, true},
		// All four in the first bucket: p50 0.05·2/4, p95 0.05·3.8/4.
		{"first bucket", histPeriods("q", bk, map[string][]float64{"0": {0.01, 0.01, 0.01, 0.01}}), 1,
			HistStats{Count: 4, SumS: 0.04, MeanS: 0.01, P50S: 0.025, P95S: 0.0475}, true},
		// Beyond the last finite bucket: its bound, 1.
		{"+Inf bucket", histPeriods("q", bk, map[string][]float64{"0": {0.01, 3, 4, 5}}), 1,
			HistStats{Count: 4, SumS: 12.01, MeanS: 3.0025, P50S: 1, P95S: 1}, true},
		{"zero count", histPeriods("q", bk, map[string][]float64{"0": {}}), 1, HistStats{}, false},
		{"no series", nil, 1, HistStats{}, false},
		// A summary's _sum and _count: the mean, no quantiles.
		{"no buckets", []bundle.ServerMetricsRecord{period("q_count", nil, 4), period("q_sum", nil, 2)}, 1,
			HistStats{Count: 4, SumS: 2, MeanS: 0.5, P50S: math.NaN(), P95S: math.NaN()}, true},
	} {
		got, ok := HistogramOver(tc.recs, "q", tc.scale)
		if ok != tc.ok {
			t.Errorf("%s: ok %v, want %v (%+v)", tc.name, ok, tc.ok, got)
			continue
		}
		if !ok {
			continue
		}
		same := func(a, b float64) bool { return near(a, b) || math.IsNaN(a) && math.IsNaN(b) }
		if !same(got.Count, tc.want.Count) || !same(got.SumS, tc.want.SumS) || !same(got.MeanS, tc.want.MeanS) ||
			!same(got.P50S, tc.want.P50S) || !same(got.P95S, tc.want.P95S) {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// A gauge's value in each scrape is the newest sample of each label set
// (samples are written only when they change), summed; a pass takes the
// scrapes sent inside it.
func TestGaugeTrack(t *testing.T) {
	g := &gaugeTrack{cur: map[string]map[string]float64{"run": {}}, points: map[string][]gaugePoint{}}
	val := func(v float64) *bundle.MetricValue { x := bundle.MetricValue(v); return &x }
	smp := func(ts int64, eng string, v float64) bundle.ServerMetricsRecord {
		return bundle.ServerMetricsRecord{Kind: bundle.MetricsKindSample, TsUnixNs: ts, Name: "run", Labels: bundle.MetricLabels{Map: map[string]string{"engine": eng}}, Value: val(v)}
	}
	scr := func(ts int64) bundle.ServerMetricsRecord {
		return bundle.ServerMetricsRecord{Kind: bundle.MetricsKindScrape, TsUnixNs: ts}
	}
	other := bundle.ServerMetricsRecord{Kind: bundle.MetricsKindSample, TsUnixNs: 10, Name: "other", Value: val(100)}
	for _, r := range []bundle.ServerMetricsRecord{
		smp(10, "0", 1), smp(10, "1", 0), other, scr(10), // 1
		smp(20, "0", 2), scr(20), // 2 (engine 1 unchanged)
		smp(30, "1", 2), scr(30), // 4
		scr(40),                                            // 4 (nothing changed)
		smp(50, "0", math.NaN()), smp(50, "1", 1), scr(50), // 1 (NaN left out)
	} {
		g.add(&r)
	}
	want := []gaugePoint{{10, 1}, {20, 2}, {30, 4}, {40, 4}, {50, 1}}
	if got := g.points["run"]; fmt.Sprint(got) != fmt.Sprint(want) || g.points["other"] != nil {
		t.Fatalf("points %v, want %v (and none of other: %v)", got, want, g.points["other"])
	}
	if s, ok := gaugeOver(g.points["run"], 15, 45); !ok || s.Scrapes != 3 || !near(s.Mean, 10.0/3) || s.Max != 4 {
		t.Errorf("over [15, 45]: %+v %v, want mean 10/3, max 4 over 3 scrapes", s, ok)
	}
	if _, ok := gaugeOver(g.points["run"], 41, 49); ok {
		t.Error("a pass between two scrapes has a gauge")
	}
}

// A level is its scored passes: counts and sums added, quantiles
// averaged weighted by count, gauges over all their scrapes; levels in
// the order given, then the others.
func TestMetricsLevels(t *testing.T) {
	sm := &ServerMetrics{Passes: []MetricsPass{
		{Level: "c1", Warmup: true, Roles: map[string]HistStats{"queue": {Count: 100, SumS: 100, MeanS: 1, P50S: 1, P95S: 1}}},
		{Level: "c1", Repeat: 1, Roles: map[string]HistStats{"queue": {Count: 1, SumS: 0.1, MeanS: 0.1, P50S: 0.1, P95S: 0.2}},
			Gauges: map[string]GaugeStats{"running": {Mean: 1, Max: 1, Scrapes: 3}}},
		{Level: "c1", Repeat: 2, Roles: map[string]HistStats{"queue": {Count: 3, SumS: 0.9, MeanS: 0.3, P50S: 0.3, P95S: 0.6}},
			Gauges: map[string]GaugeStats{"running": {Mean: 2, Max: 3, Scrapes: 1}}},
		{Level: "c9", Repeat: 1, Roles: map[string]HistStats{"queue": {Count: 2, SumS: 1, MeanS: 0.5, P50S: math.NaN(), P95S: math.NaN()}}},
	}}
	ls := sm.Levels([]string{"c0", "c1"})
	if len(ls) != 2 || ls[0].Level != "c1" || ls[1].Level != "c9" || ls[0].Passes != 2 {
		t.Fatalf("levels %+v", ls)
	}
	q := ls[0].Roles["queue"]
	// mean (0.1 + 0.9) / 4; p50 (1·0.1 + 3·0.3) / 4; p95 (1·0.2 + 3·0.6) / 4.
	if q.Count != 4 || !near(q.MeanS, 0.25) || !near(q.P50S, 0.25) || !near(q.P95S, 0.5) {
		t.Errorf("c1 queue %+v", q)
	}
	if g := ls[0].Gauges["running"]; !near(g.Mean, 1.25) || g.Max != 3 || g.Scrapes != 4 {
		t.Errorf("c1 running %+v, want mean (3·1 + 1·2)/4, max 3", g)
	}
	if q := ls[1].Roles["queue"]; !near(q.MeanS, 0.5) || !math.IsNaN(q.P50S) {
		t.Errorf("c9 queue %+v, want mean 0.5 and no quantiles", q)
	}
}

// fakeMetrics serves a vLLM-shaped /metrics whose values the test sets.
type fakeMetrics struct {
	mu      sync.Mutex
	queue   map[string][]float64 // engine → observations
	running map[string]float64
	buckets []float64
}

func (f *fakeMetrics) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var b strings.Builder
	b.WriteString("# TYPE vllm:num_requests_running gauge\n")
	for _, eng := range []string{"0", "1"} {
		fmt.Fprintf(&b, "vllm:num_requests_running{engine=%q,model_name=\"m\"} %g\n", eng, f.running[eng])
	}
	b.WriteString("# TYPE vllm:request_queue_time_seconds histogram\n")
	for _, eng := range []string{"0", "1"} {
		sum := 0.0
		for _, v := range f.queue[eng] {
			sum += v
		}
		for _, le := range append(f.buckets, math.Inf(1)) {
			n := 0
			for _, v := range f.queue[eng] {
				if v <= le {
					n++
				}
			}
			fmt.Fprintf(&b, "vllm:request_queue_time_seconds_bucket{engine=%q,le=%q,model_name=\"m\"} %d\n", eng, fmt.Sprint(le), n)
		}
		fmt.Fprintf(&b, "vllm:request_queue_time_seconds_count{engine=%q,model_name=\"m\"} %d\n", eng, len(f.queue[eng]))
		fmt.Fprintf(&b, "vllm:request_queue_time_seconds_sum{engine=%q,model_name=\"m\"} %g\n", eng, sum)
	}
	w.Write([]byte(b.String()))
}

// The reader reads what the probe writes: server_metrics.jsonl written by
// probe/servermetrics itself, scraping a server whose queue histogram
// grows by known observations during a pass.
func TestReadServerMetricsFromProbe(t *testing.T) {
	f := &fakeMetrics{queue: map[string][]float64{"0": {1, 1, 1}}, running: map[string]float64{}, buckets: []float64{0.05, 0.1, 0.2, 0.5, 1}}
	srv := httptest.NewServer(f)
	defer srv.Close()
	dir := t.TempDir()
	w, err := bundle.Create(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	p := servermetrics.New(servermetrics.Config{URL: srv.URL + "/metrics", Interval: 5 * time.Millisecond})
	ctx := context.Background()
	if err := p.Start(ctx, probe.Target{}, w); err != nil {
		t.Fatal(err)
	}
	defer p.Stop(ctx)
	set := func(fn func()) {
		f.mu.Lock()
		fn()
		f.mu.Unlock()
	}
	pass := func(level string, repeat int, warmup bool, obs map[string][]float64, running map[string]float64) {
		// The gauges hold from before the pass to after its end; the
		// observations come in its middle.
		set(func() { f.running = running })
		pr := probe.Period{Level: level, Repeat: repeat, Warmup: warmup, StartUnixNs: time.Now().UnixNano()}
		p.Begin(pr)
		time.Sleep(30 * time.Millisecond)
		set(func() {
			for eng, vs := range obs {
				f.queue[eng] = append(f.queue[eng], vs...)
			}
		})
		time.Sleep(30 * time.Millisecond)
		pr.EndUnixNs = time.Now().UnixNano()
		if err := p.End(ctx, pr); err != nil {
			t.Fatal(err)
		}
	}
	pass("c4", 0, true, map[string][]float64{"0": {2, 2}}, map[string]float64{"0": 5})
	pass("c4", 1, false, map[string][]float64{"0": {0.08, 0.08, 0.15, 0.15}, "1": {0.15, 0.15, 0.3, 0.7}}, map[string]float64{"0": 1, "1": 2})
	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	m, err := LoadMetricsMap("")
	if err != nil {
		t.Fatal(err)
	}
	sm, err := ReadServerMetrics(filepath.Join(dir, bundle.ServerMetricsFile), m)
	if err != nil {
		t.Fatal(err)
	}
	if !sm.File || sm.Server != "vllm" || sm.Names["queue"] != "vllm:request_queue_time_seconds" || sm.Names["running"] != "vllm:num_requests_running" ||
		sm.Names["waiting"] != "" || len(sm.Passes) != 2 {
		t.Fatalf("server %q names %v, %d passes", sm.Server, sm.Names, len(sm.Passes))
	}
	wu, sc := sm.Passes[0], sm.Passes[1]
	if !wu.Warmup || wu.Roles["queue"].Count != 2 || sc.Warmup || sc.Level != "c4" || sc.Repeat != 1 {
		t.Errorf("passes %+v", sm.Passes)
	}
	// As TestHistogramOver's middle buckets: the observations before the
	// pass do not count.
	q := sc.Roles["queue"]
	if q.Count != 8 || !near(q.MeanS, 0.22) || !near(q.P50S, 0.15) || !near(q.P95S, 0.8) {
		t.Errorf("queue over the scored pass %+v, want 8, mean 0.22, p50 0.15, p95 0.8", q)
	}
	if sc.FromUnixNs >= sc.StartUnixNs || sc.ToUnixNs <= sc.EndUnixNs {
		t.Errorf("bracketing scrapes %d..%d do not bracket the pass %d..%d", sc.FromUnixNs, sc.ToUnixNs, sc.StartUnixNs, sc.EndUnixNs)
	}
	if g, ok := sc.Gauges["running"]; !ok || g.Mean != 3 || g.Max != 3 || g.Scrapes < 2 {
		t.Errorf("running over the scored pass %+v (%v), want 3 (1 + 2) in every scrape", g, ok)
	}
	if _, ok := sc.Gauges["waiting"]; ok {
		t.Error("a gauge the server does not export has a value")
	}
	lv := sm.Levels([]string{"c4"})
	if len(lv) != 1 || lv[0].Passes != 1 || lv[0].Roles["queue"].Count != 8 {
		t.Errorf("levels %+v, want c4 over its one scored pass", lv)
	}

	// No file: nothing, and no error.
	if sm, err := ReadServerMetrics(filepath.Join(t.TempDir(), bundle.ServerMetricsFile), m); err != nil || sm.File || sm.HasRoles() {
		t.Errorf("no file: %+v, %v", sm, err)
	}
	// A user's map is tried first: its server wins with fewer names.
	u, err := ParseMetricsMap("mine.json", []byte(`{"servers": [{"server": "mine", "histograms": {"inference": "vllm:request_queue_time_seconds"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	u.Servers = append(u.Servers, m.Servers...)
	for i := 1; i < len(u.Servers); i++ {
		u.Servers[i].builtin = true
	}
	if sm, err := ReadServerMetrics(filepath.Join(dir, bundle.ServerMetricsFile), u); err != nil || sm.Server != "mine" ||
		sm.Passes[1].Roles["inference"].Count != 8 || len(sm.Passes[1].Gauges) != 0 {
		t.Errorf("a user's map: server %q, %+v (%v)", sm.Server, sm.Passes, err)
	}
}
