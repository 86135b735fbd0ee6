package servermetrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/probe"
	"github.com/asrprof/asrprof/probe/internal/probetest"
)

func TestResolve(t *testing.T) {
	for _, tc := range []struct {
		url, base, want string
		auto, err       bool
	}{
		{"", "http://127.0.0.1:8000", "http://127.0.0.1:8000/metrics", true, false},
		{"auto", "http://h:8000/", "http://h:8000/metrics", true, false},
		{"auto", "https://h/api/?x=1", "https://h/api/metrics", true, false},
		{"auto", "ws://h:10095", "http://h:10095/metrics", true, false},
		{"auto", "wss://h", "https://h/metrics", true, false},
		{"auto", "ftp://h", "", true, true},
		{"auto", "", "", true, true},
		{"off", "http://h", "", false, false},
		{"http://other:9090/metrics", "http://h", "http://other:9090/metrics", false, false},
		{"other:9090", "http://h", "", false, true},
	} {
		got, auto, err := Resolve(Config{URL: tc.url, Base: tc.base})
		if got != tc.want || auto != tc.auto || (err != nil) != tc.err {
			t.Errorf("Resolve(%q, %q) = %q, %v, %v; want %q, %v, error %v", tc.url, tc.base, got, auto, err, tc.want, tc.auto, tc.err)
		}
	}
}

// A counter's increase over a pass counts from the baseline, through a
// reset, and a series that appears during the pass counts from zero;
// gauges take only the scrapes sent inside the pass.
func TestPeriodFold(t *testing.T) {
	c := &series{name: "c_total", typ: "counter", cumulative: true, labels: []byte("{}")}
	fresh := &series{name: "r_total", typ: "counter", cumulative: true, labels: []byte(`{"reason":"stop"}`)}
	g := &series{name: "g", typ: "gauge", labels: []byte("{}")}
	p := probe.Period{Level: "c4", Repeat: 2, StartUnixNs: 1000, EndUnixNs: 3000}
	pd := newPeriod(p, 900, map[*series]float64{c: 10})
	for _, f := range []frame{
		{ts: 950, vals: []value{{c, 10}, {g, 99}}}, // in flight at Begin: before the pass
		{ts: 1500, vals: []value{{c, 14}, {g, 2}}},
		{ts: 2000, vals: []value{{c, 3}, {g, 4}, {fresh, 1}}}, // the server restarted
		{ts: 2500, vals: []value{{c, 5}, {g, math.NaN()}, {fresh, 2}}},
		{ts: 3100, vals: []value{{c, 6}, {g, 50}, {fresh, 4}}}, // after the pass
	} {
		pd.add(f, holdback, maxPending)
	}
	recs := pd.finish(p)
	if len(recs) != 3 {
		t.Fatalf("%d records %+v, want 3", len(recs), recs)
	}
	byName := map[string]bundle.ServerMetricsRecord{}
	for _, r := range recs {
		byName[r.Name] = r
		if r.Kind != bundle.MetricsKindPeriod || r.Level != "c4" || r.Repeat != 2 || r.StartUnixNs != 1000 || r.EndUnixNs != 3000 {
			t.Errorf("period fields of %s: %+v", r.Name, r)
		}
	}
	// 10 → 14 (+4), reset to 3 (+3), 5 (+2), 6 (+1).
	rc := byName["c_total"]
	if *rc.Delta != 10 || rc.Resets != 1 || rc.FromUnixNs != 900 || rc.ToUnixNs != 3100 || rc.Samples != 5 || rc.Mean != nil {
		t.Errorf("counter: %+v (delta %v)", rc, *rc.Delta)
	}
	if r := float64(*rc.RatePerS); math.Abs(r-10/2e-6) > 1e-6 {
		t.Errorf("rate %v, want delta / pass wall", r)
	}
	if rf := byName["r_total"]; *rf.Delta != 4 || rf.FromUnixNs != 900 {
		t.Errorf("new series: %+v, want 4 from 0 at the baseline", rf)
	}
	rg := byName["g"]
	if *rg.Mean != 3 || *rg.Min != 2 || *rg.Max != 4 || *rg.Last != 4 || rg.Samples != 2 || rg.Delta != nil {
		t.Errorf("gauge: mean %v min %v max %v last %v samples %d; want 3 2 4 4 2", *rg.Mean, *rg.Min, *rg.Max, *rg.Last, rg.Samples)
	}

	// Without a baseline scrape the first value is the base.
	pd = newPeriod(p, 0, nil)
	pd.add(frame{ts: 1200, vals: []value{{c, 7}}}, holdback, maxPending)
	pd.add(frame{ts: 3200, vals: []value{{c, 9}}}, holdback, maxPending)
	if r := pd.finish(p)[0]; *r.Delta != 2 || r.FromUnixNs != 1200 {
		t.Errorf("no baseline: %+v, want 2 from the first sample", r)
	}

	// A long pass folds old scrapes on the way and keeps few pending.
	long := probe.Period{StartUnixNs: 0, EndUnixNs: 1 << 62}
	pd = newPeriod(long, 0, nil)
	for i := range 3000 {
		pd.add(frame{ts: int64(i) * int64(time.Second), vals: []value{{g, float64(i % 2)}}}, holdback, maxPending)
	}
	if len(pd.pending) > 62 {
		t.Errorf("%d scrapes pending, want those of the last 60 s", len(pd.pending))
	}
	if r := pd.finish(long)[0]; r.Samples != 3000 || *r.Mean != 0.5 {
		t.Errorf("long pass: %d samples, mean %v", r.Samples, *r.Mean)
	}
}

// fakeMetrics is a /metrics endpoint whose values the test sets; it counts
// the scrapes it served with each value of the gauge.
type fakeMetrics struct {
	mu      sync.Mutex
	gauge   float64
	counter float64
	bucket  float64
	extra   string // more exposition lines
	mode    string // "", "hang" or "500"
	hits    int    // every request
	bad     int    // requests in a failing mode
	after   int64  // count served requests that arrived after this time (unix ns)
	late    int    // how many did
	byGauge map[float64]int
}

func (f *fakeMetrics) set(fn func(*fakeMetrics)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *fakeMetrics) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	arrived := time.Now().UnixNano()
	f.mu.Lock()
	f.hits++
	mode := f.mode
	if mode != "" {
		f.bad++
	}
	body := fmt.Sprintf(`# HELP asr_running_requests Requests admitted by the scheduler and decoding.
# TYPE asr_running_requests gauge
asr_running_requests %g
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{model_name="m"} %g
# TYPE asr_stage_duration_seconds histogram
asr_stage_duration_seconds_bucket{stage="e2e",le="0.5"} %g
asr_stage_duration_seconds_bucket{stage="e2e",le="+Inf"} %g
asr_stage_duration_seconds_sum{stage="e2e"} 1.25
asr_stage_duration_seconds_count{stage="e2e"} %g
%s`, f.gauge, f.counter, f.bucket, f.bucket, f.bucket, f.extra)
	g := f.gauge
	f.mu.Unlock()
	switch mode {
	case "hang":
		<-r.Context().Done()
		return
	case "500":
		http.Error(w, "boom", http.StatusInternalServerError)
		return
	}
	_, _ = w.Write([]byte(body))
	f.mu.Lock()
	if f.byGauge == nil {
		f.byGauge = map[float64]int{}
	}
	f.byGauge[g]++
	if f.after != 0 && arrived > f.after {
		f.late++
	}
	f.mu.Unlock()
}

// waitFor polls cond (under the fake's lock) until it holds, failing the
// test after 10 s.
func (f *fakeMetrics) waitFor(t *testing.T, what string, cond func(*fakeMetrics) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		f.mu.Lock()
		ok := cond(f)
		f.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func startProbe(t *testing.T, cfg Config, sink *probetest.Sink) *Probe {
	t.Helper()
	p := New(cfg)
	probetest.Start(t, p, probe.Target{}, sink, "metrics")
	return p
}

func records(t *testing.T, sink *probetest.Sink) []bundle.ServerMetricsRecord {
	t.Helper()
	recs, err := probetest.Decode[bundle.ServerMetricsRecord](sink, File)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

func periodOf(t *testing.T, recs []bundle.ServerMetricsRecord, name string) bundle.ServerMetricsRecord {
	t.Helper()
	var found []bundle.ServerMetricsRecord
	for _, r := range recs {
		if r.Kind == bundle.MetricsKindPeriod && r.Name == name {
			found = append(found, r)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d period records for %s, want 1", len(found), name)
	}
	return found[0]
}

// The probe records every scrape's samples, and a pass's summary: the
// mean, min, max and last of a gauge inside the pass (not the value after
// it), a counter's increase through the end of the pass.
func TestProbeRecordsAndPeriod(t *testing.T) {
	f := &fakeMetrics{gauge: 1, counter: 10, bucket: 1}
	srv := httptest.NewServer(f)
	defer srv.Close()
	sink := &probetest.Sink{}
	p := startProbe(t, Config{Base: srv.URL, Interval: 10 * time.Millisecond}, sink)
	if d := p.Detail(); !strings.Contains(d, srv.URL+"/metrics") || !strings.Contains(d, "(6 series)") {
		t.Errorf("Detail() = %q", d)
	}

	// Every scrape sent once one of 2 was served reads 2 (they run one at
	// a time), so the pass's first gauge sample is 2.
	f.set(func(f *fakeMetrics) { f.gauge = 2 })
	f.waitFor(t, "a scrape of 2", func(f *fakeMetrics) bool { return f.byGauge[2] >= 1 })
	pr := probe.Period{Level: "c2", Repeat: 1, StartUnixNs: time.Now().UnixNano()}
	p.Begin(pr)
	f.set(func(f *fakeMetrics) { f.counter, f.bucket = 12, 2 })
	f.waitFor(t, "two more scrapes of 2", func(f *fakeMetrics) bool { return f.byGauge[2] >= 3 })
	f.set(func(f *fakeMetrics) { f.gauge, f.counter, f.bucket = 4, 20, 3 })
	f.waitFor(t, "two scrapes of 4", func(f *fakeMetrics) bool { return f.byGauge[4] >= 2 })
	f.set(func(f *fakeMetrics) { f.counter = 27 }) // the pass's last tokens
	pr.EndUnixNs = time.Now().UnixNano()
	// Scrapes run one at a time: once one that arrived after the end was
	// served, every later one was sent after the end.
	f.set(func(f *fakeMetrics) { f.after = pr.EndUnixNs })
	f.waitFor(t, "a scrape after the end", func(f *fakeMetrics) bool { return f.late >= 1 })
	f.set(func(f *fakeMetrics) { f.gauge = 100 })
	f.waitFor(t, "a scrape of 100", func(f *fakeMetrics) bool { return f.byGauge[100] >= 1 })
	if err := p.End(context.Background(), pr); err != nil {
		t.Fatal(err)
	}

	recs := records(t, sink)
	// Samples are written when a series changes; a scrape's value of a
	// series is its newest sample at or before the scrape.
	type tv struct {
		ts int64
		v  float64
	}
	var running []tv
	var scrapeTs []int64
	scrapes, samples := 0, 0
	for _, r := range recs {
		switch r.Kind {
		case bundle.MetricsKindSample:
			samples++
			if r.Name == "asr_running_requests" {
				running = append(running, tv{r.TsUnixNs, float64(*r.Value)})
			}
			if r.Name == "vllm:generation_tokens_total" && (r.Type != "counter" || r.Labels.Map["model_name"] != "m") {
				t.Errorf("sample record %+v", r)
			}
		case bundle.MetricsKindScrape:
			scrapes++
			scrapeTs = append(scrapeTs, r.TsUnixNs)
			if r.Series != 6 || r.Bytes == 0 || r.DurationS <= 0 {
				t.Errorf("scrape record %+v", r)
			}
		}
	}
	if samples < 6 || samples >= 6*scrapes || scrapes < 6 {
		t.Errorf("%d sample records for %d scrapes of 6 series: want every series once, then only changes", samples, scrapes)
	}
	var inPass []float64
	for _, ts := range scrapeTs {
		if ts < pr.StartUnixNs || ts > pr.EndUnixNs {
			continue
		}
		for i := len(running) - 1; i >= 0; i-- {
			if running[i].ts <= ts {
				inPass = append(inPass, running[i].v)
				break
			}
		}
	}
	var sum float64
	for _, v := range inPass {
		sum += v
	}
	g := periodOf(t, recs, "asr_running_requests")
	if g.Samples != len(inPass) || math.Abs(float64(*g.Mean)-sum/float64(len(inPass))) > 1e-12 {
		t.Errorf("gauge mean %v over %d samples, want the mean of the pass's %d samples %v", *g.Mean, g.Samples, len(inPass), sum/float64(len(inPass)))
	}
	if *g.Min != 2 || *g.Max != 4 || *g.Last != 4 || *g.Mean <= 2 || *g.Mean >= 4 || g.Type != "gauge" {
		t.Errorf("gauge min %v max %v last %v mean %v; want 2, 4 (not the 100 after the pass), 4, between", *g.Min, *g.Max, *g.Last, *g.Mean)
	}
	c := periodOf(t, recs, "vllm:generation_tokens_total")
	wall := float64(pr.EndUnixNs-pr.StartUnixNs) / 1e9
	if *c.Delta != 17 || math.Abs(float64(*c.RatePerS)-17/wall) > 1e-9 || c.ToUnixNs < pr.EndUnixNs || c.Level != "c2" || c.Repeat != 1 {
		t.Errorf("counter period %+v (delta %v), want 17 = 27 - 10 through a scrape after the end", c, *c.Delta)
	}
	var buckets int
	for _, r := range recs {
		if r.Kind == bundle.MetricsKindPeriod && r.Name == "asr_stage_duration_seconds_bucket" {
			buckets++
			if *r.Delta != 2 || r.Type != "histogram" || r.Labels.Map["stage"] != "e2e" {
				t.Errorf("bucket period %+v, want delta 2", r)
			}
		}
	}
	if buckets != 2 {
		t.Errorf("%d bucket period records, want 2 (le 0.5, +Inf)", buckets)
	}
	if l := p.Losses(); l != "" {
		t.Errorf("Losses() = %q after no failure", l)
	}
}

// End asks for a scrape after the pass, so a pass shorter than the
// interval still gets its counters' increase; a series that appeared in
// the pass counts from zero; a gauge with no scrape inside the pass gets
// no period record.
func TestEndScrapesAfterThePass(t *testing.T) {
	f := &fakeMetrics{gauge: 1, counter: 10}
	srv := httptest.NewServer(f)
	defer srv.Close()
	sink := &probetest.Sink{}
	p := startProbe(t, Config{URL: srv.URL, Interval: time.Hour}, sink)
	pr := probe.Period{Level: "c1", Repeat: 1, StartUnixNs: time.Now().UnixNano()}
	p.Begin(pr)
	f.set(func(f *fakeMetrics) {
		f.counter = 17
		f.extra = "# TYPE vllm:request_success counter\nvllm:request_success_total{finished_reason=\"stop\"} 4\n"
	})
	pr.EndUnixNs = time.Now().UnixNano()
	if err := p.End(context.Background(), pr); err != nil {
		t.Fatal(err)
	}
	recs := records(t, sink)
	if c := periodOf(t, recs, "vllm:generation_tokens_total"); *c.Delta != 7 || c.Samples != 1 {
		t.Errorf("counter %+v, want delta 7 from End's scrape", c)
	}
	if c := periodOf(t, recs, "vllm:request_success_total"); *c.Delta != 4 || c.Labels.Map["finished_reason"] != "stop" {
		t.Errorf("new counter %+v, want 4 from zero", c)
	}
	for _, r := range recs {
		if r.Kind == bundle.MetricsKindPeriod && r.Name == "asr_running_requests" {
			t.Errorf("a gauge period record without a scrape inside the pass: %+v", r)
		}
	}
	f.mu.Lock()
	hits := f.hits
	f.mu.Unlock()
	if hits != 2 {
		t.Errorf("%d scrapes, want Start's and End's", hits)
	}
}

var lossRE = regexp.MustCompile(`^(\d+) of (\d+) scrapes failed: last error (.*)`)

// delivered counts, on the client's side, the answers that came back whole
// with status 200: a good answer the server wrote but the client gave up
// on (a stall past Timeout on a loaded host) is not one.
type delivered struct {
	base http.RoundTripper
	mu   sync.Mutex
	n    int
}

func (d *delivered) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := d.base.RoundTrip(r)
	if err == nil && resp.StatusCode == http.StatusOK {
		resp.Body = &countEOF{ReadCloser: resp.Body, d: d}
	}
	return resp, err
}

func (d *delivered) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.n
}

type countEOF struct {
	io.ReadCloser
	d    *delivered
	seen bool
}

func (c *countEOF) Read(b []byte) (int, error) {
	n, err := c.ReadCloser.Read(b)
	if err == io.EOF && !c.seen {
		c.seen = true
		c.d.mu.Lock()
		c.d.n++
		c.d.mu.Unlock()
	}
	return n, err
}

// A server that hangs or fails does not stall the capture: a scrape is cut
// at Timeout, End returns within twice that, Stop at once, and the losses
// count the failed scrapes exactly.
func TestSlowAndFailingServer(t *testing.T) {
	f := &fakeMetrics{gauge: 1}
	srv := httptest.NewServer(f)
	defer srv.Close()
	sink := &probetest.Sink{}
	// A good answer the client reads after Timeout counts as failed on the
	// client and good here, so Timeout is long beside a loaded host's
	// stalls (50 ms failed 1 run in 200 beside four busy loops).
	const timeout = 300 * time.Millisecond
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 1
	got := &delivered{base: tr}
	p := New(Config{Base: srv.URL, Interval: 5 * time.Millisecond, Timeout: timeout, Client: &http.Client{Transport: got}})
	if err := p.Start(context.Background(), probe.Target{}, sink); err != nil {
		t.Fatal(err)
	}
	pr := probe.Period{Level: "c1", Repeat: 1, StartUnixNs: time.Now().UnixNano()}
	p.Begin(pr)
	f.set(func(f *fakeMetrics) { f.mode = "hang" })
	f.waitFor(t, "three hung scrapes", func(f *fakeMetrics) bool { return f.bad >= 3 })
	pr.EndUnixNs = time.Now().UnixNano()
	t0 := time.Now()
	if err := p.End(context.Background(), pr); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(t0); took > 2*timeout+200*time.Millisecond {
		t.Errorf("End took %v against a hanging server, want at most ~%v", took, 2*timeout)
	}
	if l := p.Losses(); !strings.Contains(l, "context deadline exceeded") {
		t.Errorf("Losses() = %q, want the timeout", l)
	}
	f.set(func(f *fakeMetrics) { f.mode = "500"; f.bad = 0 })
	f.waitFor(t, "three failed scrapes", func(f *fakeMetrics) bool { return f.bad >= 3 })
	f.set(func(f *fakeMetrics) { f.mode = "" })
	f.waitFor(t, "a good scrape again", func(f *fakeMetrics) bool { return f.byGauge[1] >= 2 })
	f.set(func(f *fakeMetrics) { f.mode = "hang" }) // Stop must cut this one
	f.waitFor(t, "a hung scrape", func(f *fakeMetrics) bool { return f.bad >= 1 })
	t0 = time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(t0); took > timeout {
		t.Errorf("Stop took %v during a hung scrape", took)
	}
	m := lossRE.FindStringSubmatch(p.Losses())
	if m == nil {
		t.Fatalf("Losses() = %q, want N of M scrapes failed", p.Losses())
	}
	failed, _ := strconv.Atoi(m[1])
	total, _ := strconv.Atoi(m[2])
	f.mu.Lock()
	hits, good := f.hits, 0
	for _, n := range f.byGauge {
		good += n
	}
	f.mu.Unlock()
	// Every request but the one Stop cut (if the test got there within
	// the timeout) is counted; a failure is a request whose exposition
	// did not reach the client whole. The server's good count is the
	// bound: a good answer can still be lost to a stall past Timeout.
	whole := got.count()
	if (total != hits-1 && total != hits) || failed != total-whole || whole > good || failed < 7 {
		t.Errorf("losses say %d of %d failed; the server served %d requests, %d of them good, %d reached the client whole, one cut by Stop", failed, total, hits, good, whole)
	}
	if !strings.Contains(m[3], "HTTP 500") && !strings.Contains(m[3], "deadline") {
		t.Errorf("last error %q", m[3])
	}
}

// Start says why it cannot run: with auto, "not supported" naming the URL
// and the answer; with an explicit URL, a failure.
func TestStartWithoutMetrics(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /html/metrics", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("<html><body>hello</body></html>"))
	})
	mux.HandleFunc("GET /empty/metrics", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("GET /slow/metrics", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for _, tc := range []struct {
		cfg         Config
		unsupported bool
		want        string
	}{
		{Config{Base: srv.URL}, true, "no /metrics at " + srv.URL + "/metrics: HTTP 404"},
		{Config{Base: srv.URL + "/html"}, true, "not the Prometheus text format"},
		{Config{Base: srv.URL + "/empty"}, true, "holds no sample"},
		{Config{Base: srv.URL + "/slow", Timeout: 50 * time.Millisecond}, true, "deadline exceeded"},
		{Config{URL: "off", Base: srv.URL}, true, "scraping turned off"},
		{Config{URL: srv.URL + "/metrics"}, false, "scraping " + srv.URL + "/metrics: HTTP 404"},
		{Config{URL: "nonsense"}, false, "want an http(s) URL"},
	} {
		p := New(tc.cfg)
		err := p.Start(context.Background(), probe.Target{}, &probetest.Sink{})
		if err == nil || errors.Is(err, probe.ErrNotSupported) != tc.unsupported || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: Start = %v; want unsupported=%v containing %q", tc.cfg, err, tc.unsupported, tc.want)
		}
	}
	// An explicit URL that answers with no sample yet starts.
	p := New(Config{URL: srv.URL + "/empty/metrics", Interval: time.Hour})
	if err := p.Start(context.Background(), probe.Target{}, &probetest.Sink{}); err != nil {
		t.Errorf("explicit URL, empty exposition: %v", err)
	} else if err := p.Stop(context.Background()); err != nil {
		t.Error(err)
	}
}

// Series beyond MaxSeries are not recorded, and said.
func TestMaxSeries(t *testing.T) {
	f := &fakeMetrics{}
	srv := httptest.NewServer(f)
	defer srv.Close()
	sink := &probetest.Sink{}
	p := startProbe(t, Config{Base: srv.URL, Interval: time.Hour, MaxSeries: 4}, sink)
	names := map[string]bool{}
	for _, r := range records(t, sink) {
		if r.Kind == bundle.MetricsKindSample {
			names[r.Name+fmt.Sprint(r.Labels.Map)] = true
		}
	}
	if len(names) != 4 {
		t.Errorf("%d series recorded, want 4", len(names))
	}
	if l := p.Losses(); !strings.Contains(l, "up to 2 series a scrape not recorded (beyond the limit of 4 series)") {
		t.Errorf("Losses() = %q", l)
	}
}
