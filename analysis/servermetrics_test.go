package analysis

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarktest"
)

// metricsBundle copies testdata/servermetrics, a hand-written bundle
// whose server_metrics.jsonl is in the metrics probe's format (vLLM's
// names; its README says what it holds), to a temporary directory: Load
// writes the bundle's tables into it.
func metricsBundle(t *testing.T) *Capture {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "servermetrics")
	if err := os.CopyFS(dir, os.DirFS(filepath.Join("testdata", "servermetrics"))); err != nil {
		t.Fatal(err)
	}
	c, err := loadT(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestMetricsStagesGolden runs metrics_stages over the hand-written
// bundle: the numbers are the hand-computed ones of its README (queue at
// c=4: 16 observations, mean 220 ms, p50 150 ms, p95 800 ms; running at
// c=4: mean 20/9, max 3, the two engines summed per scrape).
func TestMetricsStagesGolden(t *testing.T) {
	c := metricsBundle(t)
	got := runScripts(t, c, Options{}, "text", "metrics_stages")
	golden(t, filepath.Join("testdata", "golden", "servermetrics", "metrics_stages.txt"), got)

	jt := decodeTables(t, runScripts(t, c, Options{}, "json", "metrics_stages"))
	if len(jt.Tables) != 1 || jt.Tables[0].Name != "metrics_stages" {
		t.Fatalf("tables %+v", jt.Tables)
	}
	rows := map[string][]any{}
	for _, r := range jt.Tables[0].Rows {
		rows[r[0].(string)+" "+r[1].(string)] = r
	}
	for key, want := range map[string][]any{
		"c1 queue":   {"c1", "queue", 8.0, 20.0, 25.0, 47.5, nil, nil},
		"c1 e2e":     {"c1", "e2e", 8.0, 120.0, 150.0, 195.0, nil, nil},
		"c4 queue":   {"c4", "queue", 16.0, 220.0, 150.0, 800.0, nil, nil},
		"c4 e2e":     {"c4", "e2e", 16.0, 320.0, 320.0, 800.0, nil, nil},
		"c4 running": {"c4", "running", nil, nil, nil, nil, 20.0 / 9, 3.0},
		"c4 waiting": {"c4", "waiting", nil, nil, nil, nil, 1.0, 2.0},
	} {
		r := rows[key]
		if len(r) != len(want) {
			t.Errorf("%s: row %v", key, r)
			continue
		}
		for i := range want {
			w, wf := want[i].(float64)
			g, gf := r[i].(float64)
			if wf && gf && math.Abs(g-w) < 1e-9 || !wf && r[i] == want[i] {
				continue
			}
			t.Errorf("%s: column %s = %v, want %v", key, jt.Tables[0].Columns[i], r[i], want[i])
		}
	}
	if _, ok := rows["c1 ttft"]; ok {
		t.Error("a row for ttft, which the server does not export")
	}
	if !slices.Contains(DefaultScripts(c), "metrics_stages") {
		t.Errorf("default scripts %v lack metrics_stages", DefaultScripts(c))
	}
}

// The module from Starlark: levels (scored passes, run order), passes
// (warmup included), info, and lib/metrics.star's helpers.
func TestServerMetricsModule(t *testing.T) {
	c := metricsBundle(t)
	assert, err := starlarktest.LoadAssertModule()
	if err != nil {
		t.Fatal(err)
	}
	script := writeScript(t, "metrics_test.star", `
load("assert.star", "assert")
load("servermetrics", "levels", "passes", "info", "ROLES", "GAUGES")
load("lib/metrics.star", "metrics_by_level", "metrics_info", "largest_stage")

assert.eq(ROLES, ["queue", "prefill", "decode", "inference", "e2e", "ttft"])
assert.eq(GAUGES, ["running", "waiting"])
i = info(capture)
assert.eq(i.file, True)
assert.eq(i.server, "vllm")
assert.eq(i.unit, "s")
assert.true("loggers.py" in i.source)
assert.eq(list(i.names.keys()), ["queue", "inference", "e2e", "running", "waiting"])
assert.eq(i.names["queue"], "vllm:request_queue_time_seconds")
assert.eq(metrics_info(capture).server, "vllm")

ls = levels(capture)
assert.eq([l.level for l in ls], ["c1", "c4"])
assert.eq([l.passes for l in ls], [2, 2])
assert.eq(ls[0].server, "vllm")
q = ls[1].roles["queue"]
assert.eq(q.count, 16)
assert.true(abs(q.mean_ms - 220) < 1e-6)
assert.true(abs(q.p50_ms - 150) < 1e-6)
assert.true(abs(q.p95_ms - 800) < 1e-6)
assert.true("ttft" not in ls[1].roles)
assert.eq(ls[1].gauges["running"].max, 3.0)
assert.eq(ls[1].gauges["running"].scrapes, 18)

ps = passes(capture)
assert.eq([(p.level, p.repeat, p.warmup) for p in ps], [("c1", 0, True), ("c1", 1, False), ("c1", 2, False), ("c4", 1, False), ("c4", 2, False)])
assert.eq(ps[0].roles["queue"].count, 2)
assert.eq(ps[0].gauges["running"].mean, 5.0)
assert.true(ps[1].from_unix_ns < ps[1].start_unix_ns and ps[1].to_unix_ns > ps[1].end_unix_ns)

by = metrics_by_level(capture)
assert.eq(list(by.keys()), ["c1", "c4"])
assert.eq(largest_stage(by["c4"]).role, "queue")
assert.true(abs(largest_stage(by["c4"]).mean_ms - 220) < 1e-6)
assert.eq(largest_stage(by["c1"]).role, "inference")
assert.eq(largest_stage(struct(roles = {})), None)
`)
	s := NewSession(c, Options{
		Modules: map[string]starlark.StringDict{"assert.star": assert},
		Setup:   func(th *starlark.Thread) { starlarktest.SetReporter(th, t) },
	})
	if _, err := s.Run(context.Background(), script); err != nil {
		t.Fatal(err)
	}
}

// Without server_metrics.jsonl, or with none of the map's names, the
// analysis says so in one line and is not among the default analyses; a
// user's map (options["metrics_map"], --metrics-map) is read first, and a
// bad one fails the script with the file and the field.
func TestMetricsStagesWithoutMetrics(t *testing.T) {
	dir, _ := writeFixture(t, "refserver")
	c, err := loadT(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(DefaultScripts(c), "metrics_stages") {
		t.Errorf("default scripts %v name metrics_stages without server_metrics.jsonl", DefaultScripts(c))
	}
	got := runScripts(t, c, Options{}, "text", "metrics_stages")
	if want := "no server_metrics.jsonl in this capture"; !strings.HasPrefix(got, want) || strings.Count(got, "\n") != 1 {
		t.Errorf("without the file:\n%s\nwant one line, %q", got, want)
	}

	mc := metricsBundle(t)
	write := func(name, src string) string {
		p := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	none := write("none.json", `{"servers": [{"server": "mine", "histograms": {"queue": "my_queue_seconds"}}]}`)
	if !slices.Contains(DefaultScriptsFor(c, Options{MetricsMap: none}), "metrics_stages") {
		t.Error("a user's map does not put metrics_stages among the default analyses")
	}
	// The file holds vLLM's names, not the user's: the built-in map reads it.
	if got := runScripts(t, mc, Options{MetricsMap: none}, "text", "metrics_stages"); !strings.Contains(got, "vLLM names") {
		t.Errorf("a user's map of absent names:\n%s", got)
	}
	mine := write("mine.json", `{"servers": [{"server": "mine", "unit": "s", "histograms": {"queue": "vllm:request_inference_time_seconds"}}]}`)
	got = runScripts(t, mc, Options{MetricsMap: mine}, "text", "metrics_stages")
	if !strings.Contains(got, "(per level; mine names)") || !strings.Contains(got, "queue = vllm:request_inference_time_seconds") ||
		strings.Contains(got, "running") {
		t.Errorf("a user's map:\n%s", got)
	}
	bad := write("bad.json", `{"servers": [{"server": "x", "histograms": {"queu": "a"}}]}`)
	_, err = NewSession(mc, Options{MetricsMap: bad}).Run(context.Background(), "metrics_stages")
	if err == nil || !strings.Contains(err.Error(), "metrics map "+bad+": field servers[0].histograms: unknown role \"queu\"") {
		t.Errorf("a bad map: %v", err)
	}
}
