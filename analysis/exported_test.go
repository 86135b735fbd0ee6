package analysis

import (
	"context"
	"testing"
)

// StageRecords gives every derived stage of every measured request, named
// by its index in requests.jsonl, each request's in order of start.
func TestStageRecords(t *testing.T) {
	for _, fx := range []string{"refserver", "sglang", "vllm"} {
		t.Run(fx, func(t *testing.T) {
			dir, _ := writeFixture(t, fx)
			c, err := loadT(t, dir)
			if err != nil {
				t.Fatal(err)
			}
			recs, err := StageRecords(context.Background(), NewSession(c, Options{}))
			if err != nil {
				t.Fatal(err)
			}
			reqs, err := c.Requests()
			if err != nil {
				t.Fatal(err)
			}
			measured := 0
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
			if len(recs) != perReq*measured {
				t.Fatalf("%d stage records for %d measured requests, want %d", len(recs), measured, perReq*measured)
			}
			sum := map[string]float64{}
			cnt := map[string]int{}
			per := map[int]int{}
			for k, l := range recs {
				if l.Request < 0 || l.Request >= len(reqs) || reqs[l.Request].Warmup || reqs[l.Request].Status != "ok" {
					t.Fatalf("record %+v names no measured request", l)
				}
				if l.EndUnixNs < l.StartUnixNs || l.StartUnixNs == 0 {
					t.Errorf("bad stage record %+v", l)
				}
				if k > 0 && recs[k-1].Request == l.Request && recs[k-1].StartUnixNs > l.StartUnixNs {
					t.Errorf("request %d: %s starts before %s, listed after it", l.Request, l.Stage, recs[k-1].Stage)
				}
				sum[l.Stage] += float64(l.EndUnixNs-l.StartUnixNs) / 1e9
				cnt[l.Stage]++
				per[l.Request]++
			}
			if len(per) != measured {
				t.Errorf("%d requests have stages, want %d", len(per), measured)
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
