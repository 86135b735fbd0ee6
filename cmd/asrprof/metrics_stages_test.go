package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/internal/fakeasr"
)

// `asrprof capture` against a server with /metrics prints the server's own
// per-request times: a server that runs one request at a time (Capacity
// 1) for 100 ms, sent 4 requests at once, admits them after 0, 100, 200
// and 300 ms, so its queue histogram's mean is 150 ms, and its inference
// time 100 ms.
func TestCaptureMetricsStages(t *testing.T) {
	srv := fakeasr.NewServer(t, fakeasr.Config{Metrics: true, Capacity: 1, Delay: 100 * time.Millisecond})
	out := filepath.Join(t.TempDir(), "cap")
	var stdout, stderr bytes.Buffer
	code := runTest([]string{"capture", "--target", srv.URL, "--dataset", dataset(t, 4),
		"--concurrency", "4", "--repeats", "1", "--out", out, "--format", "json", "--verbose",
		"--otlp-http", "127.0.0.1:0", "--otlp-grpc", "off", "--span-grace", "0s",
		"--probes", "metrics", "--server-metrics-interval", "20ms"}, &stdout, &stderr)
	if code != exitOK {
		t.Fatalf("exit %d\n%s", code, stderr.String())
	}
	var doc struct {
		Tables []struct {
			Name    string   `json:"name"`
			Title   string   `json:"title"`
			Columns []string `json:"columns"`
			Rows    [][]any  `json:"rows"`
			Notes   []string `json:"notes"`
		} `json:"tables"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &doc); err != nil {
		t.Fatalf("%v\n%s", err, stdout.String())
	}
	var names []string
	for _, tab := range doc.Tables {
		names = append(names, tab.Name)
		if tab.Name != "metrics_stages" {
			continue
		}
		if !strings.Contains(tab.Title, "vLLM names") || len(tab.Notes) == 0 || !strings.Contains(tab.Notes[0], "queue = vllm:request_queue_time_seconds") {
			t.Errorf("title %q, notes %q", tab.Title, tab.Notes)
		}
		means := map[string]float64{}
		counts := map[string]float64{}
		for _, r := range tab.Rows {
			if r[0] != "c4" {
				t.Errorf("row of level %v", r[0])
			}
			role, _ := r[1].(string)
			means[role], _ = r[3].(float64)
			counts[role], _ = r[2].(float64)
		}
		t.Logf("metrics_stages rows: %v", tab.Rows)
		if q := means["queue"]; counts["queue"] != 4 || q < 130 || q > 200 {
			t.Errorf("queue: %v requests, mean %.1f ms; want 4 requests, mean ≈ 150 ms (waits of 0, 100, 200, 300 ms)", counts["queue"], q)
		}
		if inf := means["inference"]; inf < 95 || inf > 150 {
			t.Errorf("inference mean %.1f ms, want ≈ 100 ms", inf)
		}
		if e2e := means["e2e"]; e2e < means["queue"]+means["inference"]-1 {
			t.Errorf("e2e mean %.1f ms < queue %.1f + inference %.1f", e2e, means["queue"], means["inference"])
		}
		return
	}
	t.Fatalf("no metrics_stages table among %v\n%s", names, stderr.String())
}

// A probe that is on and recorded nothing fails the capture: the ERROR
// line, the bundle written and marked incomplete, and exit status 1
// (--help's table), so that a script sees it too. Here the metrics probe
// scrapes a /metrics that answers its first scrape (the probe starts) and
// 500 after it, in every pass.
func TestCaptureProbeEmptyExits1(t *testing.T) {
	srv := fakeasr.NewServer(t, fakeasr.Config{Delay: 20 * time.Millisecond})
	var scrapes atomic.Int32
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if scrapes.Add(1) == 1 {
			fmt.Fprint(w, "# TYPE requests_total counter\nrequests_total 1\n")
			return
		}
		http.Error(w, "metrics registry locked", http.StatusInternalServerError)
	}))
	t.Cleanup(broken.Close)
	out := filepath.Join(t.TempDir(), "cap")
	code, _, stderr := runCLI("capture", "--target", srv.URL, "--dataset", dataset(t, 2),
		"--concurrency", "1", "--repeats", "1", "--out", out, "--otlp-http", "off", "--otlp-grpc", "off",
		"--probes", "metrics", "--server-metrics", broken.URL+"/metrics", "--server-metrics-interval", "20ms")
	if code != exitFailed || !strings.Contains(stderr, "ERROR: probe metrics was on but recorded nothing") ||
		!strings.Contains(stderr, "the bundle in "+out+" is written, marked incomplete") {
		t.Fatalf("exit %d, want %d with the ERROR line and the bundle named:\n%s", code, exitFailed, stderr)
	}
	b, err := bundle.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	if b.Manifest.Complete {
		t.Errorf("the manifest says complete")
	}
}
