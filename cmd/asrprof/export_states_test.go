package main

import (
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"

	"github.com/asrprof/asrprof/analysis/engine"
	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/bundle/columns"
	"github.com/asrprof/asrprof/internal/fakeasr"
	"github.com/asrprof/asrprof/internal/fixture"
	"github.com/asrprof/asrprof/model"
	"github.com/asrprof/asrprof/trace/export"
)

// attrBundle is an attribution fixture: refserver spans, sched and cuda
// bins, an admission cap and a build pool, so that most states have time.
func attrBundle(t *testing.T) (string, []model.Request) {
	t.Helper()
	const ms = time.Millisecond
	dir := filepath.Join(t.TempDir(), "attr")
	if _, err := fixture.WriteAttribution(dir, fixture.AttrConfig{Levels: []fixture.AttrLevel{
		{Concurrency: 4, Upload: 5 * ms, Receive: 3 * ms, Build: 8 * ms, FirstForward: 20 * ms, Decode: 60 * ms, DecodeSpread: 10 * ms,
			Delivery: 2 * ms, BuildWorkers: 1, MaxRunning: 2, OnCPU: 0.7, Runq: 0.1, Sync: 0.2, GPUUtil: 0.5},
	}, RequestsPerPass: 12, CUDA: true, GPU: true, Seed: 3}); err != nil {
		t.Fatal(err)
	}
	b, err := bundle.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	reqs, err := columns.ReadRequestsJSONL(b.Path(bundle.RequestsFile))
	if err != nil {
		t.Fatal(err)
	}
	return dir, reqs
}

type traceEvent struct {
	Name string         `json:"name"`
	Cat  string         `json:"cat"`
	Ph   string         `json:"ph"`
	TS   float64        `json:"ts"`
	Dur  float64        `json:"dur"`
	PID  int            `json:"pid"`
	TID  int            `json:"tid"`
	Args map[string]any `json:"args"`
}

func readTrace(t *testing.T, path string) []traceEvent {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		TraceEvents []traceEvent `json:"traceEvents"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	return doc.TraceEvents
}

func isState(name string) bool {
	for _, s := range engine.AttributionStates {
		if s == name {
			return true
		}
	}
	return false
}

// asrprof export --perfetto draws, per request, a slice over its latency
// holding one slice per state, the states' durations adding up to the
// request's latency; and the stage slices it derives.
func TestExportPerfettoStates(t *testing.T) {
	dir, reqs := attrBundle(t)
	pf := filepath.Join(t.TempDir(), "p.json")
	code, out, errs := runCLI("export", dir, "--perfetto", pf)
	if code != 0 {
		t.Fatalf("export: exit %d\n%s%s", code, out, errs)
	}
	evs := readTrace(t, pf)
	// The requests' parent slices (named by sample id) and their states.
	parents := map[string]traceEvent{} // request id → its state parent
	sum := map[string]float64{}        // request id → µs of states
	var states []traceEvent
	stages := 0
	for _, e := range evs {
		if e.Ph != "X" {
			continue
		}
		switch e.Cat {
		case export.CatState:
			if isState(e.Name) {
				states = append(states, e)
			} else {
				parents[e.Args["request_id"].(string)] = e
			}
		case export.CatStage:
			stages++
		}
	}
	if stages == 0 {
		t.Errorf("no stage slices:\n%s", out)
	}
	if !strings.Contains(out, " stage slices") || strings.Contains(out, " 0 stage slices") || strings.Contains(out, " 0 state slices") {
		t.Errorf("summary line: %s", out)
	}
	// Each state slice lies inside its request's parent, on its track.
	for _, s := range states {
		found := false
		for id, p := range parents {
			if p.PID == s.PID && p.TID == s.TID && s.TS >= p.TS-0.001 && s.TS+s.Dur <= p.TS+p.Dur+0.001 {
				sum[id] += s.Dur
				found = true
				break
			}
		}
		if !found {
			t.Fatalf("state slice %+v lies under no request slice", s)
		}
	}
	ok := 0
	for i := range reqs {
		r := &reqs[i]
		if r.Status != model.StatusOK {
			continue
		}
		p, has := parents[r.RequestID]
		if !has {
			t.Errorf("request %s has no states", r.RequestID)
			continue
		}
		lat := r.LatencyS * 1e6
		if math.Abs(p.Dur-lat) > 0.01 || math.Abs(sum[r.RequestID]-lat) > 0.01 {
			t.Errorf("request %s: states %.3f µs in a parent of %.3f µs, latency %.3f µs", r.RequestID, sum[r.RequestID], p.Dur, lat)
		}
		ok++
	}
	if ok < 12 {
		t.Errorf("%d requests checked, want all 12", ok)
	}
	names := map[string]bool{}
	for _, s := range states {
		names[s.Name] = true
	}
	for _, want := range []string{engine.StateUpload, engine.StateBuildWait, engine.StateAdmission, engine.StateHost, engine.StateDelivery} {
		if !names[want] {
			t.Errorf("no %q slice (have %v)", want, names)
		}
	}
}

// asrprof export --otlp (Jaeger) sends, per request, a "where the time
// went" span under its client span and one child span per state, their
// durations adding up to the request's latency.
func TestExportJaegerStates(t *testing.T) {
	dir, reqs := attrBundle(t)
	var mu sync.Mutex
	var spans []ptrace.Span
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req := ptraceotlp.NewExportRequest()
		if err := req.UnmarshalProto(body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		rss := req.Traces().ResourceSpans()
		for i := 0; i < rss.Len(); i++ {
			sss := rss.At(i).ScopeSpans()
			for j := 0; j < sss.Len(); j++ {
				ss := sss.At(j).Spans()
				for k := 0; k < ss.Len(); k++ {
					sp := ptrace.NewSpan()
					ss.At(k).CopyTo(sp)
					spans = append(spans, sp)
				}
			}
		}
	}))
	defer srv.Close()
	code, out, errs := runCLI("export", dir, "--otlp", srv.URL, "--quiet")
	if code != 0 {
		t.Fatalf("export: exit %d\n%s%s", code, out, errs)
	}
	byID := map[string]ptrace.Span{}
	for _, sp := range spans {
		byID[sp.SpanID().String()] = sp
	}
	stageSpans := 0
	attr := map[string]ptrace.Span{} // trace id → its "where the time went" span
	sum := map[string]int64{}
	for _, sp := range spans {
		if _, ok := sp.Attributes().Get(export.AttrStage); ok {
			stageSpans++
		}
		if sp.Name() == export.AttributionSpan {
			attr[sp.TraceID().String()] = sp
			par, ok := byID[sp.ParentSpanID().String()]
			if !ok || !par.ParentSpanID().IsEmpty() {
				t.Errorf("%s: the states' parent is not under the request's root span", sp.TraceID())
			}
		}
	}
	for _, sp := range spans {
		v, ok := sp.Attributes().Get(export.AttrState)
		if !ok {
			continue
		}
		if !isState(v.Str()) || v.Str() != sp.Name() {
			t.Errorf("state span %q has asrprof.state %q", sp.Name(), v.Str())
		}
		p, ok := attr[sp.TraceID().String()]
		if !ok || sp.ParentSpanID() != p.SpanID() {
			t.Errorf("state span %q is not under its trace's %q span", sp.Name(), export.AttributionSpan)
			continue
		}
		sum[sp.TraceID().String()] += int64(sp.EndTimestamp() - sp.StartTimestamp())
	}
	if stageSpans == 0 {
		t.Errorf("no stage spans")
	}
	n := 0
	for i := range reqs {
		r := &reqs[i]
		if r.Status != model.StatusOK {
			continue
		}
		lat := int64(math.Round(r.LatencyS * 1e9))
		if got := sum[r.TraceID]; got != lat {
			t.Errorf("request %s: state spans sum to %d ns, latency %d ns", r.RequestID, got, lat)
		}
		n++
	}
	if n < 12 || !strings.Contains(out, "state spans") {
		t.Errorf("%d requests; output %s", n, out)
	}
}

// export derives the stages with the preset --stages names, and ignores
// the stages.jsonl that 'analyze --save-stages' left in older bundles.
func TestExportStages(t *testing.T) {
	dir, _ := attrBundle(t)
	old := `{"request_id":"x","stage":"build (saved)","start_unix_ns":1,"end_unix_ns":2}` + "\n"
	if err := os.WriteFile(filepath.Join(dir, "stages.jsonl"), []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	slices := func(args ...string) map[string]int {
		t.Helper()
		pf := filepath.Join(t.TempDir(), "p.json")
		if code, out, errs := runCLI(append([]string{"export", dir, "--perfetto", pf}, args...)...); code != 0 {
			t.Fatalf("export %v: exit %d\n%s%s", args, code, out, errs)
		}
		n := map[string]int{}
		for _, e := range readTrace(t, pf) {
			if e.Cat == export.CatStage && e.Ph == "X" {
				n[e.Name]++
			}
		}
		return n
	}
	if n := slices(); n["build"] == 0 || n["build (saved)"] != 0 {
		t.Errorf("stage slices %v: want the derived build, not stages.jsonl's", n)
	}
	if n := slices("--stages", "vllm"); len(n) != 0 { // the fixture has no vLLM telemetry
		t.Errorf("--stages vllm: stage slices %v, want none", n)
	}
	if code, _, errs := runCLI("export", dir, "--perfetto", "-", "--stages", "nope"); code != exitUsage || !strings.Contains(errs, `--stages "nope": want auto,`) {
		t.Errorf("--stages nope: exit %d %s", code, errs)
	}
}

// A server that sends nothing: the report and the Perfetto export carry
// the states seen from outside (connect, upload, waiting behind others, the service, delivery),
// and each request's states fill its latency.
func TestExportPerfettoBlackBoxStates(t *testing.T) {
	srv := fakeasr.NewServer(t, fakeasr.Config{Delay: 30 * time.Millisecond, Capacity: 1})
	out := filepath.Join(t.TempDir(), "b")
	code, stdout, stderr := runCLI("capture", "--target", srv.URL, "--dataset", dataset(t, 6), "--concurrency", "1,3",
		"--out", out, "--quiet", "--otlp-http", "127.0.0.1:0", "--otlp-grpc", "off", "--probes", "none")
	if code != exitOK {
		t.Fatalf("capture: exit %d\n%s%s", code, stdout, stderr)
	}
	// the capture's report draws them too: the tables, and the states the
	// waterfalls split each request into
	html, err := os.ReadFile(filepath.Join(out, bundle.ReportFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`data-table="blackbox"`, `data-table="blackbox_concurrency"`, `"states":["connect","upload","waiting behind others"`} {
		if !strings.Contains(string(html), want) {
			t.Errorf("the report lacks %s", want)
		}
	}
	pf := filepath.Join(t.TempDir(), "p.json")
	if code, stdout, stderr = runCLI("export", out, "--perfetto", pf); code != exitOK {
		t.Fatalf("export: exit %d\n%s%s", code, stdout, stderr)
	}
	reqs, err := columns.ReadRequestsJSONL(filepath.Join(out, bundle.RequestsFile))
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, s := range engine.BlackBoxStates {
		names[s] = true
	}
	perReq := map[string]float64{} // request id → µs of black-box states
	seen := map[string]bool{}
	var parents, states []traceEvent // each request's state parent (it names the request), its states
	for _, e := range readTrace(t, pf) {
		if e.Ph != "X" || e.Cat != export.CatState {
			continue
		}
		if names[e.Name] {
			seen[e.Name] = true
			states = append(states, e)
		} else if _, ok := e.Args["request_id"].(string); ok {
			parents = append(parents, e)
		}
	}
	for _, s := range states {
		for _, p := range parents {
			if p.PID == s.PID && p.TID == s.TID && s.TS >= p.TS-0.001 && s.TS+s.Dur <= p.TS+p.Dur+0.001 {
				perReq[p.Args["request_id"].(string)] += s.Dur
				break
			}
		}
	}
	for _, s := range []string{engine.BBWait, engine.BBNoThread} {
		if !seen[s] {
			t.Errorf("no %q slice in the export (states seen: %v)\n%s", s, seen, stdout)
		}
	}
	if len(perReq) == 0 {
		t.Fatalf("no state slice lies inside a request's slice")
	}
	for _, r := range reqs {
		if r.Warmup || r.Status != "ok" {
			continue
		}
		if got, want := perReq[r.RequestID], r.LatencyS*1e6; math.Abs(got-want) > 2 {
			t.Errorf("request %s: its states take %.0f µs, its latency %.0f µs", r.RequestID, got, want)
		}
	}
}
