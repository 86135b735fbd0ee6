package capture_test

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/internal/fakeasr"
	"github.com/asrprof/asrprof/probe/servermetrics"
)

// readServerMetrics reads a bundle's server_metrics.jsonl.
func readServerMetrics(t *testing.T, dir string) []bundle.ServerMetricsRecord {
	t.Helper()
	var recs []bundle.ServerMetricsRecord
	if _, err := bundle.ReadJSONL(filepath.Join(dir, servermetrics.File), func(r bundle.ServerMetricsRecord) error {
		recs = append(recs, r)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return recs
}

// --probes metrics against a server with /metrics: the probe is on,
// server_metrics.jsonl has the scrapes, and each pass's summary says what
// the server did in it: a counter of answered requests grows by exactly
// the pass's requests, the running gauge stays within the concurrency.
func TestCaptureScrapesServerMetrics(t *testing.T) {
	srv := fakeasr.NewServer(t, fakeasr.Config{Metrics: true, Delay: 20 * time.Millisecond})
	cfg := baseConfig(t, srv.URL, makeDataset(t, 10))
	cfg.Probes = []string{"metrics"}
	cfg.Warmup, cfg.Repeats = true, 2
	cfg.ServerMetricsInterval = 10 * time.Millisecond
	o, out, err := runCapture(t, context.Background(), cfg)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	status := o.Manifest.Extra["probes"].(map[string]string)
	details := o.Manifest.Extra["probe_details"].(map[string]string)
	if status["metrics"] != "on" || !strings.Contains(details["metrics"], "scraping "+srv.URL+"/metrics every 10ms") {
		t.Fatalf("probe status %q, detail %q\n%s", status["metrics"], details["metrics"], out)
	}
	if !o.Manifest.Complete || o.Manifest.Extra["probe_losses"] != nil || o.Manifest.Extra["probe_empty"] != nil {
		t.Errorf("complete=%v incomplete=%q losses=%v empty=%v", o.Manifest.Complete, o.Manifest.Incomplete,
			o.Manifest.Extra["probe_losses"], o.Manifest.Extra["probe_empty"])
	}
	if !slices.Contains(o.Manifest.Files, servermetrics.File) {
		t.Errorf("manifest files %v lack %s", o.Manifest.Files, servermetrics.File)
	}

	recs := readServerMetrics(t, cfg.Out)
	type pass struct {
		level  string
		repeat int
	}
	periods := map[pass]map[string]bundle.ServerMetricsRecord{}
	running := 0
	for _, r := range recs {
		switch r.Kind {
		case bundle.MetricsKindSample:
			if r.Name == "vllm:num_requests_running" && *r.Value > 0 {
				running++
			}
		case bundle.MetricsKindPeriod:
			k := pass{r.Level, r.Repeat}
			if periods[k] == nil {
				periods[k] = map[string]bundle.ServerMetricsRecord{}
			}
			name := r.Name
			if le := r.Labels.Map["le"]; le != "" {
				name += "{le=" + le + "}"
			}
			periods[k][name] = r
		}
	}
	if running == 0 {
		t.Error("no scrape saw a request running")
	}
	if len(periods) != len(o.Manifest.Levels) || len(periods) != 3 {
		t.Fatalf("period summaries for %d passes, want the %d passes run", len(periods), len(o.Manifest.Levels))
	}
	for _, lv := range o.Manifest.Levels {
		ps := periods[pass{lv.Level, lv.Repeat}]
		ok := ps["vllm:request_success_total"]
		if ok.Warmup != lv.Warmup || ok.Delta == nil || *ok.Delta != 10 {
			t.Errorf("%s repeat %d: request_success_total %+v, want an increase of exactly the pass's 10 requests", lv.Level, lv.Repeat, ok)
			continue
		}
		wall := float64(ok.EndUnixNs-ok.StartUnixNs) / 1e9
		if math.Abs(float64(*ok.RatePerS)-10/wall) > 1e-9 || math.Abs(wall-lv.WallS) > 0.05 {
			t.Errorf("%s repeat %d: rate %v/s over %.3f s (pass wall %.3f s)", lv.Level, lv.Repeat, *ok.RatePerS, wall, lv.WallS)
		}
		run := ps["vllm:num_requests_running"]
		if run.Mean == nil || *run.Mean <= 0 || *run.Max > 2 || *run.Max < 1 || run.Samples < 3 || run.Type != "gauge" {
			t.Errorf("%s repeat %d: running gauge %+v, want a mean in (0, 2] over the pass's scrapes", lv.Level, lv.Repeat, run)
		}
		if c := ps["vllm:e2e_request_latency_seconds_count"]; c.Delta == nil || *c.Delta != 10 {
			t.Errorf("%s repeat %d: latency count %+v, want 10", lv.Level, lv.Repeat, c)
		}
		if b := ps["vllm:e2e_request_latency_seconds_bucket{le=0.01}"]; b.Delta == nil || *b.Delta != 0 || b.Type != "histogram" {
			t.Errorf("%s repeat %d: bucket le=0.01 %+v, want no request under the 20 ms delay", lv.Level, lv.Repeat, b)
		}
	}
}

// --server-metrics off: the probe does not run and the server is never
// scraped; auto against a server without /metrics: off, saying why, and
// the capture is complete.
func TestCaptureServerMetricsOff(t *testing.T) {
	for _, tc := range []struct {
		name, setting string
		metrics       bool
		want          string
	}{
		{"off", "off", true, "off: metrics: scraping turned off"},
		{"auto without /metrics", "auto", false, "/metrics: HTTP 404"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := fakeasr.NewServer(t, fakeasr.Config{Metrics: tc.metrics})
			cfg := baseConfig(t, srv.URL, makeDataset(t, 2))
			cfg.Probes = []string{"metrics"}
			cfg.ServerMetrics = tc.setting
			cfg.Quiet = false // the probe's line is a note, which --quiet silences
			o, out, err := runCapture(t, context.Background(), cfg)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			status := o.Manifest.Extra["probes"].(map[string]string)
			if !strings.HasPrefix(status["metrics"], "off: ") || !strings.Contains(status["metrics"], tc.want) {
				t.Errorf("probe status %q, want off with %q", status["metrics"], tc.want)
			}
			if !strings.Contains(out, "probe metrics: off (") || !o.Manifest.Complete {
				t.Errorf("complete=%v; output:\n%s", o.Manifest.Complete, out)
			}
			if _, err := os.Stat(filepath.Join(cfg.Out, servermetrics.File)); !os.IsNotExist(err) {
				t.Errorf("%s written (%v)", servermetrics.File, err)
			}
			if srv.Scrapes() != 0 {
				t.Errorf("the server was scraped %d times", srv.Scrapes())
			}
		})
	}
}

// checkRefserverMetrics checks what the metrics probe recorded of the
// reference server's /metrics in TestRefserverQueueingShowsInSpansAndEvents
// (--max-running-requests 4, 16 requests a pass at c=1 and c=16): the
// running gauge stays within the limit and fills up at c=16, the queue
// builds there, and every pass's answers are counted.
func checkRefserverMetrics(t *testing.T, dir string, status map[string]string) {
	t.Helper()
	if status["metrics"] != "on" {
		t.Errorf("metrics probe %q against the reference server, want on", status["metrics"])
		return
	}
	got := map[string]bundle.ServerMetricsRecord{}
	for _, r := range readServerMetrics(t, dir) {
		if r.Kind == bundle.MetricsKindPeriod && !r.Warmup && (r.Labels.Map["status"] == "" || r.Labels.Map["status"] == "200") {
			got[r.Level+" "+r.Name] = r
		}
	}
	run1, run16, q16 := got["c1 asr_running_requests"], got["c16 asr_running_requests"], got["c16 asr_queue_depth"]
	if run1.Max == nil || run16.Mean == nil || q16.Mean == nil {
		t.Fatalf("no period summaries of asr_running_requests / asr_queue_depth: %v", got)
	}
	t.Logf("/metrics: asr_running_requests mean c=1 %.2f, c=16 %.2f (max %v); asr_queue_depth mean c=16 %.2f",
		*run1.Mean, *run16.Mean, *run16.Max, *q16.Mean)
	if *run1.Max > 1 || *run16.Max > 4 || *run16.Mean < 2 || *q16.Mean < 1 {
		t.Errorf("running: c=1 max %v, c=16 mean %v max %v; queue c=16 mean %v: want ≤ 1 at c=1, the 4 slots mostly full and a queue at c=16",
			*run1.Max, *run16.Mean, *run16.Max, *q16.Mean)
	}
	for _, lv := range []string{"c1", "c16"} {
		// The server counts a request just after writing its answer, so
		// the pass's last one can, rarely, miss the scrape after the pass.
		if d := got[lv+" asr_requests_total"].Delta; d == nil || *d < 15 || *d > 16 {
			t.Errorf("%s: asr_requests_total{status=200} increase %v, want the pass's 16 answers", lv, d)
		}
	}
}
