package main

import (
	"encoding/json"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/asrprof/asrprof/internal/fixture"
)

// attrTables is `analyze --format json`'s output.
type attrTables struct {
	Tables []struct {
		Name    string   `json:"name"`
		Columns []string `json:"columns"`
		Rows    [][]any  `json:"rows"`
		Notes   []string `json:"notes"`
	} `json:"tables"`
}

// attributionCLI runs `asrprof analyze DIR attribution --format json` and
// returns, per table name, its rows as column → value.
func attributionCLI(t *testing.T, dir string) (map[string][]map[string]any, map[string][]string) {
	t.Helper()
	code, out, errs := runCLI("analyze", dir, "attribution", "--format", "json")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	var jt attrTables
	if err := json.Unmarshal([]byte(out), &jt); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	rows, notes := map[string][]map[string]any{}, map[string][]string{}
	for _, tb := range jt.Tables {
		for _, r := range tb.Rows {
			m := map[string]any{}
			for i, c := range tb.Columns {
				m[c] = r[i]
			}
			rows[tb.Name] = append(rows[tb.Name], m)
		}
		notes[tb.Name] = tb.Notes
	}
	return rows, notes
}

// checkShares: every level's shares add up to 100 %; it returns each
// level's rank-1 state and state → mean ms.
func checkShares(t *testing.T, rows []map[string]any) (map[string]string, map[string]map[string]float64) {
	t.Helper()
	sum := map[string]float64{}
	top := map[string]string{}
	mean := map[string]map[string]float64{}
	for _, r := range rows {
		lv, st := r["level"].(string), r["state"].(string)
		share := r["share (%)"].(float64)
		if share < 0 {
			t.Errorf("%s %s: share %g < 0", lv, st, share)
		}
		sum[lv] += share
		if rk, ok := r["rank"].(float64); ok && rk == 1 {
			top[lv] = st
		}
		if mean[lv] == nil {
			mean[lv] = map[string]float64{}
		}
		mean[lv][st] = r["mean (ms)"].(float64)
	}
	for lv, s := range sum {
		if math.Abs(s-100) > 1e-6 {
			t.Errorf("%s: shares add up to %.9f %%", lv, s)
		}
	}
	return top, mean
}

// TestAttributionCLI runs `asrprof analyze BUNDLE attribution` over
// simulated servers whose time goes to one place each.
func TestAttributionCLI(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name   string
		cfg    fixture.AttrConfig
		levels []string
		want   string
		check  func(t *testing.T, rows map[string][]map[string]any, mean map[string]map[string]float64)
		// cause: the bottleneck table's first at levels, its evidence
		// saying evidence
		cause, evidence string
	}{
		{
			// idle 60 % of the time, its thread busy whenever a request runs
			name: "host work", levels: []string{"c1", "c2"}, want: fixture.AttrHost,
			cfg: fixture.AttrConfig{Levels: []fixture.AttrLevel{
				{Concurrency: 1, Receive: 1 * ms, Build: 2 * ms, FirstForward: 5 * ms, Decode: 60 * ms, Delivery: 1 * ms, Think: 100 * ms, OnCPU: 1},
				{Concurrency: 2, Receive: 1 * ms, Build: 2 * ms, FirstForward: 5 * ms, Decode: 60 * ms, Delivery: 1 * ms, Think: 110 * ms, OnCPU: 1},
			}, Repeats: 2, Warmup: true, RequestsPerPass: 12, Seed: 1},
			check: func(t *testing.T, rows map[string][]map[string]any, _ map[string]map[string]float64) {
				th := rows["attribution_thread"]
				if len(th) != 2 {
					t.Fatalf("thread rows %v", th)
				}
				for _, r := range th {
					run, pass := r["on-CPU while running (%)"].(float64), r["on-CPU over the pass (%)"].(float64)
					if r["serving thread"] != "asr-sched" || run < 95 || pass > 50 || pass < 30 {
						t.Errorf("thread row %v: want asr-sched, ~100 %% while running, ~40 %% over the pass", r)
					}
				}
			},
		},
		{
			// the answer reaches the client 40 ms after the server's last event; the server's clock 1.5 s ahead
			name: "response delivery", levels: []string{"c2"}, want: fixture.AttrDelivery,
			cfg: fixture.AttrConfig{Levels: []fixture.AttrLevel{
				{Concurrency: 2, Build: 1 * ms, FirstForward: 2 * ms, Decode: 10 * ms, Delivery: 40 * ms, OnCPU: 1},
			}, RequestsPerPass: 16, ClockOffset: 1500 * ms, Seed: 2},
			check: func(t *testing.T, _ map[string][]map[string]any, mean map[string]map[string]float64) {
				if up := mean["c2"][fixture.AttrUpload]; up > 0.5 {
					t.Errorf("upload %.2f ms, want ≈ 0", up)
				}
			},
		},
		{
			name: "off-CPU", levels: []string{"c4"}, want: fixture.AttrOffCPU,
			cfg: fixture.AttrConfig{Levels: []fixture.AttrLevel{
				{Concurrency: 4, Build: 2 * ms, FirstForward: 3 * ms, Decode: 50 * ms, Delivery: 1 * ms, OnCPU: 0.1},
			}, RequestsPerPass: 16, Seed: 3},
		},
		{
			name: "runnable", levels: []string{"c4"}, want: fixture.AttrRunnable,
			cfg: fixture.AttrConfig{Levels: []fixture.AttrLevel{
				{Concurrency: 4, Build: 2 * ms, FirstForward: 3 * ms, Decode: 50 * ms, Delivery: 1 * ms, OnCPU: 0.2, Runq: 0.75},
			}, RequestsPerPass: 16, Seed: 4},
		},
		{
			// bursts into one build worker and an admission cap of 2
			name: "bursty", levels: []string{"c8"}, want: fixture.AttrAdmission,
			cfg: fixture.AttrConfig{Levels: []fixture.AttrLevel{
				{Concurrency: 8, Upload: 2 * ms, Receive: 1 * ms, Build: 8 * ms, FirstForward: 15 * ms, Decode: 30 * ms, DecodeSpread: 10 * ms,
					Delivery: 2 * ms, BuildWorkers: 1, MaxRunning: 2, Bursty: true, Think: 300 * ms, OnCPU: 0.9, Sync: 0.3, GPUUtil: 0.5},
			}, Repeats: 2, RequestsPerPass: 24, CUDA: true, GPU: true, Seed: 6},
			check: func(t *testing.T, rows map[string][]map[string]any, mean map[string]map[string]float64) {
				for _, s := range []string{fixture.AttrBuildWait, fixture.AttrStall, fixture.AttrGPUWait} {
					if mean["c8"][s] < 1 {
						t.Errorf("%s: %.2f ms, want some", s, mean["c8"][s])
					}
				}
				th := rows["attribution_thread"]
				if len(th) != 1 || th[0]["GPU busy (%)"] == nil {
					t.Fatalf("thread rows %v: want one with the GPU", th)
				}
				r := th[0]
				if sum := r["GPU busy (%)"].(float64) + r["GPU idle, host work (%)"].(float64) + r["GPU idle, GPU wait (%)"].(float64) + r["GPU idle, other (%)"].(float64); math.Abs(sum-100) > 1e-6 {
					t.Errorf("the GPU's time adds up to %g %%: %v", sum, r)
				}
			},
		},
		{
			// a listen backlog too small for c=8: 3 of a pass's 8 new
			// connections wait a second for a SYN's retry; the upload
			// (5 ms) stays apart from them, and the diagnosis names the
			// connection, with its count
			name: "connection setup", levels: []string{"c8"}, want: fixture.AttrConnect,
			cfg: fixture.AttrConfig{Levels: []fixture.AttrLevel{
				{Concurrency: 8, Connect: ms / 5, SlowConnects: 3, Upload: 5 * ms, Build: 2 * ms, FirstForward: 3 * ms, Decode: 30 * ms,
					Delivery: 1 * ms, OnCPU: 0.9},
			}, RequestsPerPass: 16, Seed: 7},
			check: func(t *testing.T, _ map[string][]map[string]any, mean map[string]map[string]float64) {
				// 3 × 1000.2 ms and 5 × 0.2 ms over 16 requests
				if c := mean["c8"][fixture.AttrConnect]; math.Abs(c-187.6) > 0.5 {
					t.Errorf("connect %.2f ms a request, want 187.6", c)
				}
				if up := mean["c8"][fixture.AttrUpload]; math.Abs(up-5) > 0.5 {
					t.Errorf("upload %.2f ms a request, want 5", up)
				}
			},
			cause: "connection setup", evidence: "3 of the 8 requests that opened a connection waited a second or more for it",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "b")
			if _, err := fixture.WriteAttribution(dir, tc.cfg); err != nil {
				t.Fatal(err)
			}
			rows, _ := attributionCLI(t, dir)
			top, mean := checkShares(t, rows["attribution"])
			for _, lv := range tc.levels {
				if top[lv] != tc.want {
					t.Errorf("%s: largest state %q, want %q (%v)", lv, top[lv], tc.want, mean[lv])
				}
			}
			if tc.check != nil {
				tc.check(t, rows, mean)
			}
			code, out, errs := runCLI("analyze", dir, "attribution")
			if code != 0 || !strings.Contains(out, "Where the client latency went") {
				t.Errorf("text: exit %d\n%s\n%s", code, out, errs)
			}
			if tc.cause != "" {
				got, text := verdicts(t, dir)
				for _, lv := range tc.levels {
					if c := got[lv]; len(c) == 0 || c[0] != tc.cause || !strings.Contains(text, tc.evidence) {
						t.Errorf("at %s the verdict is %v, want %q first, saying %q\n%s", lv, c, tc.cause, tc.evidence, text)
					}
				}
			}
		})
	}
}

// TestAttributionCLIWithoutBins: a capture without sched bins (the golden
// refserver bundle) still adds up, and says why the running batch is not
// split.
func TestAttributionCLIWithoutBins(t *testing.T) {
	tmp := t.TempDir()
	dir := writeGolden(t, tmp, "refserver")
	rows, notes := attributionCLI(t, dir)
	_, mean := checkShares(t, rows["attribution"])
	if len(mean) != 4 {
		t.Errorf("levels %v, want the 4 of the bundle", mean)
	}
	for lv, m := range mean {
		if m["running: no thread data"] < 40 || m[fixture.AttrHost] != 0 {
			t.Errorf("%s: %v: want the running batch (50 ms) without thread data", lv, m)
		}
	}
	if len(rows["attribution_thread"]) != 0 {
		t.Errorf("a thread table without bins: %v", rows["attribution_thread"])
	}
	if !strings.Contains(strings.Join(notes["attribution"], "\n"), "no sched_bins.jsonl") {
		t.Errorf("notes %q: want the missing bins said", notes["attribution"])
	}
	code, out, _ := runCLI("analyze", "--list")
	if code != 0 || !strings.Contains(out, "  attribution ") {
		t.Errorf("analyze --list does not list attribution:\n%s", out)
	}
}
