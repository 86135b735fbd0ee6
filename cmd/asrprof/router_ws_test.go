package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/bundle/columns"
	"github.com/asrprof/asrprof/model"
	"github.com/asrprof/asrprof/refserver/refservertest"
)

// A realtime capture through the router: `asrprof capture --protocol
// funasr-ws` at the router's address; the router hands each WebSocket
// session to a worker, round robin, and relays its frames both ways, so
// every session ends with its final transcript and the realtime fields
// (first update, final after STOP, lags) come back as they do from a
// worker; the router's /diagnostics counts the sessions on both workers.
func TestRouterRealtimeCapture(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three reference-server processes")
	}
	t.Parallel()
	refservertest.RequirePocketSphinx(t)
	const n = 4
	ds := refservertest.ShortClips(t, n)
	w0 := refservertest.Start(t, nil, "--instance", "w0", "--max-running-requests", "2")
	w1 := refservertest.Start(t, nil, "--instance", "w1", "--max-running-requests", "2")
	rt := refservertest.Start(t, nil, "--router", "--workers", w0.URL+","+w1.URL)
	out := filepath.Join(t.TempDir(), "b")
	code, stdout, stderr := runCLI("capture", "--target", rt.URL, "--protocol", "funasr-ws", "--pace", "none",
		"--dataset", ds, "--max-samples", fmt.Sprint(n), "--concurrency", "2", "--repeats", "1",
		"--out", out, "--otlp-http", "off", "--otlp-grpc", "off", "--probes", "none", "--timeout", "60s", "--quiet")
	if code != exitOK {
		t.Fatalf("realtime capture through the router: exit %d\n%s\n%s", code, stdout, stderr)
	}
	reqs, err := columns.ReadRequestsJSONL(filepath.Join(out, bundle.RequestsFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != n {
		t.Fatalf("%d sessions recorded, want %d\n%s", len(reqs), n, stderr)
	}
	for _, r := range reqs {
		if r.Status != model.StatusOK || r.HTTPStatus != 101 || r.Hyp == "" || r.FirstUpdateS == nil || r.FinalAfterStopS == nil || r.Partials == 0 {
			t.Errorf("session %s: status %s (%s), HTTP %d, hyp %q, first update %v, final after stop %v, partials %d",
				r.SampleID, r.Status, r.Error, r.HTTPStatus, r.Hyp, r.FirstUpdateS, r.FinalAfterStopS, r.Partials)
		}
	}
	resp, err := http.Get(rt.URL + "/diagnostics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var diag struct {
		Workers []struct {
			Name       string `json:"name"`
			Dispatched int    `json:"dispatched"`
			Completed  int    `json:"completed"`
			InFlight   int    `json:"in_flight"`
		} `json:"workers"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&diag); err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, w := range diag.Workers {
		total += w.Completed
		if w.Dispatched == 0 || w.InFlight != 0 {
			t.Errorf("worker %s: %d sessions dispatched, %d in flight after the capture", w.Name, w.Dispatched, w.InFlight)
		}
	}
	if total != n {
		t.Errorf("router counts %d completed sessions over %v, want %d", total, diag.Workers, n)
	}
}
