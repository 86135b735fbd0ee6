package refserver

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// The router in front of two workers: round robin alternates them and says
// which served each request (X-Worker); the client's traceparent reaches
// the worker through the router's own span; the request id reaches the
// worker's events; /diagnostics counts the dispatches; /health, /v1/models
// and the request profiler are forwarded; SSE streams are relayed.
func TestRouter(t *testing.T) {
	requirePocketSphinx(t)
	otlp := &collector{}
	col := httptest.NewServer(otlp)
	defer col.Close()
	env := []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=" + col.URL + "/v1/traces"}
	w0 := startServer(t, env, "--instance", "w0", "--max-running-requests", "1")
	w1 := startServer(t, env, "--instance", "w1", "--max-running-requests", "1")
	base := startServer(t, env, "--router", "--workers", w0+","+w1)

	code, body := get(t, base+"/health")
	if code != 200 || !strings.Contains(body, `"name": "w0"`) || !strings.Contains(body, `"name": "w1"`) {
		t.Fatalf("/health: %d %s (want 200 naming both workers by their --instance)", code, body)
	}
	if code, body := get(t, base+"/v1/models"); code != 200 || !strings.Contains(body, "pocketsphinx-en-us") {
		t.Errorf("/v1/models: %d %s", code, body)
	}
	dir := t.TempDir()
	postJSON(t, base+"/start_request_profile", map[string]string{"run_id": "r", "event_dir": dir})

	audio := speechWAV(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var served []string
	traces := map[string]string{} // request id -> trace id
	for i := 0; i < 4; i++ {
		rid := fmt.Sprintf("rt-%d", i)
		tid := fmt.Sprintf("%032x", 0xabc0+i)
		h := http.Header{"X-Request-Id": {rid}, "Traceparent": {"00-" + tid + "-00000000000000aa-01"}}
		fields := map[string]string{"model": "x"}
		if i == 3 {
			fields["stream"] = "true"
		}
		resp, data, err := transcribe(ctx, t, base, audio, fields, h)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("request %d: %v %v %s", i, err, resp, data)
		}
		if got := resp.Header.Get("X-Request-Id"); got != rid {
			t.Errorf("request %d: X-Request-Id %q, want %q", i, got, rid)
		}
		if i == 3 && !strings.Contains(string(data), "transcript.text.done") {
			t.Errorf("stream through the router lost its done event: %s", data)
		}
		served = append(served, resp.Header.Get("X-Worker"))
		traces[rid] = tid
	}
	if strings.Join(served, ",") != "w0,w1,w0,w1" {
		t.Errorf("round robin served %v, want w0,w1,w0,w1", served)
	}
	postJSON(t, base+"/stop_request_profile", map[string]string{})

	var diag struct {
		Policy          string `json:"policy"`
		TotalDispatched int    `json:"total_dispatched"`
		Workers         []struct {
			Name                            string
			Dispatched, InFlight, Completed int
			BusyS                           float64 `json:"busy_s"`
		} `json:"workers"`
	}
	_, body = get(t, base+"/diagnostics")
	if err := json.Unmarshal([]byte(body), &diag); err != nil {
		t.Fatalf("/diagnostics: %v: %s", err, body)
	}
	if diag.Policy != "round-robin" || diag.TotalDispatched != 4 || len(diag.Workers) != 2 {
		t.Fatalf("/diagnostics: %s", body)
	}
	for _, w := range diag.Workers {
		if w.Dispatched != 2 || w.Completed != 2 || w.BusyS <= 0 {
			t.Errorf("/diagnostics worker %s: %+v (want 2 dispatched, 2 completed, busy > 0)", w.Name, w)
		}
	}

	// Each trace: the router's route span, child of the client's, parent of
	// the worker's transcription span, and both name the same worker.
	deadline := time.Now().Add(5 * time.Second)
	for i, rid := range []string{"rt-0", "rt-1", "rt-2", "rt-3"} {
		var route, tr *otlpSpan
		for time.Now().Before(deadline) {
			route, tr = nil, nil
			for _, s := range otlp.trace(traces[rid]) {
				s := s
				switch s.Name {
				case "route":
					route = &s
				case "transcription":
					tr = &s
				}
			}
			if route != nil && tr != nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if route == nil || tr == nil {
			t.Fatalf("%s: route %v, transcription %v in trace %s", rid, route, tr, traces[rid])
		}
		if route.ParentSpanID != "00000000000000aa" || tr.ParentSpanID != route.SpanID {
			t.Errorf("%s: route parent %s (want the client's), transcription parent %s (want route %s)", rid, route.ParentSpanID, tr.ParentSpanID, route.SpanID)
		}
		rw, _ := route.attr("router.worker")
		inst, _ := tr.attr("service.instance.id")
		if rw != served[i] || inst != served[i] {
			t.Errorf("%s: router.worker %v, worker's service.instance.id %v, X-Worker %s", rid, rw, inst, served[i])
		}
		if evs := readEvents(t, dir, rid); len(evs) != len(pipelineOrder) {
			t.Errorf("%s: %d events through the router, want %d", rid, len(evs), len(pipelineOrder))
		}
	}
	otlp.mu.Lock()
	defer otlp.mu.Unlock()
	if !otlp.services["asrprof-router"] || !otlp.services["asrprof-refserver"] {
		t.Errorf("services %v, want asrprof-router and asrprof-refserver", otlp.services)
	}
}

// least-loaded sends a request to the worker with the fewest in flight:
// while a long request holds w0, the next ones go to w1.
func TestRouterLeastLoaded(t *testing.T) {
	requirePocketSphinx(t)
	w0 := startServer(t, nil, "--instance", "w0", "--max-running-requests", "1", "--build-delay", "3")
	w1 := startServer(t, nil, "--instance", "w1", "--max-running-requests", "1")
	base := startServer(t, nil, "--router", "--workers", w0+","+w1, "--policy", "least-loaded")
	audio := speechWAV(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	first := make(chan string, 1)
	go func() {
		resp, _, err := transcribe(ctx, t, base, audio, nil, nil)
		if err != nil {
			first <- "error: " + err.Error()
			return
		}
		first <- resp.Header.Get("X-Worker")
	}()
	time.Sleep(500 * time.Millisecond) // w0 is building the first (3 s)
	for i := 0; i < 2; i++ {
		resp, data, err := transcribe(ctx, t, base, audio, nil, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("request %d: %v %s", i, err, data)
		}
		if w := resp.Header.Get("X-Worker"); w != "w1" {
			t.Errorf("request %d went to %s while w0 was busy, want w1", i, w)
		}
	}
	if w := <-first; w != "w0" {
		t.Errorf("first request went to %s, want w0", w)
	}
}
