package main

import (
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/bundle/columns"
	"github.com/asrprof/asrprof/internal/fakeasr"
	"github.com/asrprof/asrprof/model/summary"
)

// The capture summarises each pass as its records come (summary.Acc; the
// driver keeps no records): results.json's per-repeat metrics, goodput
// under --slo included, are those summary.Passes recomputes from
// requests.jsonl, to the last digit, closed and open loop alike, with
// failures among the requests.
func TestStreamingSummaryMatchesRequests(t *testing.T) {
	t.Parallel() // two computations of the same records, whatever their times
	srv := fakeasr.NewServer(t, fakeasr.Config{Delay: 5 * time.Millisecond, Fail: fakeasr.FailOn(map[int]fakeasr.Failure{3: fakeasr.Status(500), 7: fakeasr.Status(500), 41: fakeasr.Status(503)})})
	out := filepath.Join(t.TempDir(), "b")
	code, _, stderr := runCLI("capture", "--target", srv.URL, "--dataset", dataset(t, 6), "--concurrency", "3", "--rate", "40",
		"--pass-requests", "30", "--repeats", "2", "--warmup", "--slo", "latency=8ms", "--out", out, "--quiet",
		"--probes", "none", "--otlp-http", "off", "--otlp-grpc", "off")
	if code != exitOK && code != exitIncomplete {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	b, err := bundle.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	reqs, err := columns.ReadRequestsJSONL(b.Path(bundle.RequestsFile))
	if err != nil {
		t.Fatal(err)
	}
	res, err := b.Results()
	if err != nil {
		t.Fatal(err)
	}
	slo, err := summary.ParseSLO("latency=8ms")
	if err != nil {
		t.Fatal(err)
	}
	again := summary.Levels(summary.Passes(reqs, b.Manifest.Levels, slo))
	got, _ := json.Marshal(res.Results)
	want, _ := json.Marshal(again)
	if len(res.Results) != 2 || string(got) != string(want) {
		t.Errorf("results.json's levels differ from requests.jsonl's:\n got %s\nwant %s", got, want)
	}
	for _, lr := range res.Results {
		if lr.PerRepeat[0].Coverage.Total != 30 || lr.PerRepeat[0].SLOCounted == 0 {
			t.Errorf("%s: %+v", lr.Level, lr.PerRepeat[0])
		}
	}
}
