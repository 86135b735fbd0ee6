package analysis

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/asrprof/asrprof/trace/bundle"
)

// SaveStages writes one line per derived stage of every measured request,
// and the durations of those boundaries average to the stage table's means.
func TestSaveStages(t *testing.T) {
	for _, fx := range []string{"refserver", "sglang", "vllm"} {
		t.Run(fx, func(t *testing.T) {
			dir, _ := writeFixture(t, fx)
			c, err := loadT(t, dir)
			if err != nil {
				t.Fatal(err)
			}
			s := NewSession(c, Options{})
			n, err := SaveStages(context.Background(), s)
			if err != nil {
				t.Fatal(err)
			}
			measured := 0
			reqs, err := c.Requests()
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range reqs {
				if !r.Warmup && r.Status == "ok" {
					measured++
				}
			}
			perReq := 5
			switch fx {
			case "vllm":
				perReq = 3 // queue, prefill, decode: vLLM gives no build boundaries
			case "sglang":
				perReq = 6 // its events also bound the wait for a build worker
			}
			if n != perReq*measured {
				t.Fatalf("%d stage lines for %d measured requests, want %d", n, measured, perReq*measured)
			}
			sum := map[string]float64{}
			cnt := map[string]int{}
			ids := map[string]bool{}
			if _, err := bundle.ReadJSONL(filepath.Join(dir, StagesFile), func(l struct {
				RequestID string `json:"request_id"`
				TraceID   string `json:"trace_id"`
				Stage     string `json:"stage"`
				Start     int64  `json:"start_unix_ns"`
				End       int64  `json:"end_unix_ns"`
			}) error {
				if l.End < l.Start || l.Start == 0 || l.RequestID == "" {
					t.Errorf("bad stage line %+v", l)
				}
				sum[l.Stage] += float64(l.End-l.Start) / 1e9
				cnt[l.Stage]++
				ids[l.RequestID] = true
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if len(ids) != measured {
				t.Errorf("%d requests have stages, want %d", len(ids), measured)
			}
			tab := decodeTables(t, runScripts(t, c, Options{}, "json", "stage_spans")).Tables[0]
			if len(tab.Rows) != n {
				t.Errorf("stage_spans table has %d rows, file %d lines", len(tab.Rows), n)
			}
			for stage, total := range sum {
				if cnt[stage] != measured {
					t.Errorf("stage %s on %d requests, want %d", stage, cnt[stage], measured)
				}
				if total <= 0 && stage != "build→queued" && stage != "build wait" { // the simulated server waits for neither
					t.Errorf("stage %s has no duration", stage)
				}
			}
		})
	}
}
