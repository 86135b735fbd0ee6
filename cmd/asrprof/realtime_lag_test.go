package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/bundle/columns"
	"github.com/asrprof/asrprof/internal/fakeasr"
)

// A realtime capture keeps every session's update lags over session time
// (realtime_lags.jsonl); `asrprof analyze BUNDLE realtime` turns them into
// the realtime_lag table (per level and second of session time: updates,
// p50, p95, max) and the report draws it. Against a server that answers
// each frame 150 ms after reading it while the client sends a frame every
// 100 ms, the lag grows with session time, and the table shows it.
func TestRealtimeLagOverTime(t *testing.T) {
	srv := fakeasr.NewWSServer(t, fakeasr.WSConfig{Delay: 150 * time.Millisecond})
	ds := dataset(t, 2) // 0.5 s clips, played 5 times: 2.5 s sessions
	out := filepath.Join(t.TempDir(), "b")
	code, stdout, stderr := runCLI("capture", "--target", srv.URL, "--protocol", "funasr-ws", "--pace", "realtime",
		"--chunk-ms", "100", "--loops", "5", "--dataset", ds, "--concurrency", "2", "--repeats", "1", "--out", out,
		"--otlp-http", "off", "--otlp-grpc", "off", "--probes", "none", "--quiet", "--verbose")
	if code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "Realtime update lag over session time") {
		t.Errorf("capture's tables lack the lag over time:\n%s", stdout)
	}
	b := &bundle.Bundle{Dir: out}
	reqs, err := columns.ReadRequestsJSONL(b.Path(bundle.RequestsFile))
	if err != nil || len(reqs) != 2 {
		t.Fatalf("%d sessions (%v)", len(reqs), err)
	}
	partials := 0
	for _, r := range reqs {
		partials += r.Partials
		// each session opened its own connection, recorded as the HTTP
		// protocols' are (docs/BUNDLE.md)
		if r.ConnectedUnixNs < r.StartUnixNs || r.ConnectedUnixNs == 0 || r.ConnectedUnixNs > r.EndUnixNs {
			t.Errorf("session %s: connected %d, start %d, end %d", r.ID, r.ConnectedUnixNs, r.StartUnixNs, r.EndUnixNs)
		}
	}
	rows, _ := analyzeJSON(t, out, "realtime", "realtime_lag")
	t.Logf("realtime_lag: %v", rows)
	updates := 0.0
	for _, r := range rows {
		updates += r["updates"].(float64)
		if r["level"] != "c2" {
			t.Errorf("row of level %v, want c2", r["level"])
		}
	}
	if int(updates) != partials || partials == 0 {
		t.Errorf("the table counts %v updates, the sessions %d partials", updates, partials)
	}
	if len(rows) < 3 {
		t.Fatalf("%d bins of 1 s over 2.5 s sessions, want at least 3", len(rows))
	}
	first, last := rows[0]["lag p50 (s)"].(float64), rows[len(rows)-1]["lag p50 (s)"].(float64)
	// 50 ms more lag per 100 ms frame: about 0.5 s more per second of
	// session; 0.3 s leaves room for a loaded machine's timer slack.
	if last-first < 0.3 {
		t.Errorf("lag p50 %.3f s in the first second, %.3f s in the last: want it to grow by ≥ 0.3 s", first, last)
	}
	// The driver's self-check times its readers: one stall per session.
	if c := selfChecks(t, out)[0]; c.Streams != 2 || c.ReadStallMaxS == nil || *c.ReadStallMaxS < 0 {
		t.Errorf("self-check of a realtime pass: %d streams, read stall max %v; want 2 and a time", c.Streams, c.ReadStallMaxS)
	}
	html := filepath.Join(t.TempDir(), "r.html")
	if code, _, stderr := runCLI("report", out, "--out", html); code != exitOK {
		t.Fatalf("report: exit %d\n%s", code, stderr)
	}
	doc, _ := os.ReadFile(html)
	if !strings.Contains(string(doc), `id="plot-rt-lag-time"`) {
		t.Errorf("the report does not draw the lag over session time")
	}
}
