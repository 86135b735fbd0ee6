package engine

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/bundle/columns"
	"github.com/asrprof/asrprof/internal/fixture"
	"github.com/asrprof/asrprof/model"
	"github.com/asrprof/asrprof/stats"
)

// refserverPreset is a copy of scripts/stages/refserver.star's SPEC.
func refserverPreset() *Preset {
	span := func(n string) Stage { return Stage{From: Point{Span: n}, To: Point{Span: n, End: true}} }
	named := func(n string, s Stage) Stage { s.Name = n; return s }
	return &Preset{Name: "refserver", Requires: Point{Span: "transcription"}, Stages: []Stage{
		named("receive", span("receive")),
		named("build wait", Stage{From: Point{Span: "receive", End: true}, To: Point{Span: "build"}}),
		named("build", span("build")),
		named("build→queued", Stage{From: Point{Span: "build", End: true}, To: Point{Span: "queue"}}),
		named("queued→scheduled", span("queue")),
		named("first forward", span("first_forward")),
		named("decode tail", span("decode")),
		named("total", span("transcription")),
		{Name: "router", Outer: "route", Inner: "transcription"},
	}}
}

type attrRun struct {
	a     *Attribution
	truth *fixture.AttrTruth
	ids   []string // request id of each request index
	rc    *columns.RequestCols
}

// attribute writes cfg's bundle and attributes it as the analysis does.
func attribute(t testing.TB, cfg fixture.AttrConfig) *attrRun {
	return attributeSegs(t, false, cfg)
}

// openTables opens the tables of the bundle in dir, with its requests'
// columns and its spans.
func openTables(t testing.TB, dir string) (*columns.Set, *columns.RequestCols, *columns.Spans) {
	t.Helper()
	set, err := columns.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { set.Wait() })
	rc, err := set.RequestCols()
	if err != nil {
		t.Fatal(err)
	}
	sp, err := set.Spans()
	if err != nil {
		t.Fatal(err)
	}
	return set, rc, sp
}

// attributeSegs is attribute, with the segments when segs.
func attributeSegs(t testing.TB, segs bool, cfg fixture.AttrConfig) *attrRun {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "b")
	truth, err := fixture.WriteAttribution(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	set, rc, sp := openTables(t, dir)
	reqs, err := set.Requests()
	if err != nil {
		t.Fatal(err)
	}
	rows := Derive(refserverPreset(), rc.N, nil, sp)
	sched, cuda, _, err := ReadThreadBins(dir)
	if err != nil {
		t.Fatal(err)
	}
	gpu, _, err := ReadGPU(filepath.Join(dir, bundle.GPUFile))
	if err != nil {
		t.Fatal(err)
	}
	var levels []string
	for _, l := range cfg.Levels {
		levels = append(levels, "c"+strconv.Itoa(l.Concurrency))
	}
	a := Attribute(AttributionInput{Reqs: rc, Rows: rows, Levels: levels, Sched: sched, CUDA: cuda, GPU: gpu, Segments: segs})
	r := &attrRun{a: a, truth: truth, rc: rc}
	for _, q := range reqs {
		r.ids = append(r.ids, q.RequestID)
	}
	return r
}

func stateIx(name string) int { return slices.Index(AttributionStates, name) }

func (r *attrRun) level(t *testing.T, lv string) LevelStates {
	t.Helper()
	for _, l := range r.a.Levels {
		if l.Level == lv {
			return l
		}
	}
	t.Fatalf("no level %s in %+v", lv, r.a.Levels)
	return LevelStates{}
}

func largest(l LevelStates) string {
	best := 0
	for s := range l.States {
		if l.States[s].Share > l.States[best].Share {
			best = s
		}
	}
	return AttributionStates[best]
}

// checkSums: every request's states add up to its client latency (1 µs),
// none is negative, and every measured request has telemetry.
func (r *attrRun) checkSums(t *testing.T) {
	t.Helper()
	if len(r.a.Requests) != r.truth.Requests {
		t.Fatalf("%d requests attributed, %d written", len(r.a.Requests), r.truth.Requests)
	}
	for _, q := range r.a.Requests {
		sum := 0.0
		for s, v := range q.States {
			if v < 0 {
				t.Errorf("request %d: %s = %g s, negative", q.Index, AttributionStates[s], v)
			}
			sum += v
		}
		if math.Abs(sum-q.LatencyS) > 1e-6 {
			t.Errorf("request %d: states add up to %.9f s, latency %.9f s", q.Index, sum, q.LatencyS)
		}
		if !q.Telemetry {
			t.Errorf("request %d has no telemetry", q.Index)
		}
	}
}

// checkTruth: each level's mean per state is the simulator's, tick by
// tick, within 0.1 ms.
func (r *attrRun) checkTruth(t *testing.T) {
	t.Helper()
	type acc struct {
		n        int
		got, exp [NumStates]float64
	}
	by := map[string]*acc{}
	for _, q := range r.a.Requests {
		if q.Warmup {
			continue
		}
		x := by[q.Level]
		if x == nil {
			x = &acc{}
			by[q.Level] = x
		}
		x.n++
		tr := r.truth.States[r.ids[q.Index]]
		for s := range q.States {
			x.got[s] += q.States[s]
			x.exp[s] += tr[AttributionStates[s]]
		}
	}
	for lv, x := range by {
		n := float64(x.n)
		for s := range x.got {
			g, e := x.got[s]/n, x.exp[s]/n
			if math.Abs(g-e) > 1e-4 {
				t.Errorf("%s %s: mean %.2f ms, simulated %.2f ms", lv, AttributionStates[s], 1000*g, 1000*e)
			}
		}
	}
}

const msd = time.Millisecond

// A server idle most of the time (its clients think between requests)
// whose one thread computes whenever a request is in decode: host work is
// the largest share at every level, though the thread's pass-average
// utilization is about 40 %; while requests run it is near 100 %.
func TestAttributionHostWorkIdleServer(t *testing.T) {
	mk := func(c int, think time.Duration) fixture.AttrLevel {
		return fixture.AttrLevel{Concurrency: c, Receive: 1 * msd, Build: 2 * msd, FirstForward: 5 * msd, Decode: 60 * msd,
			Delivery: 1 * msd, Think: think, OnCPU: 1}
	}
	r := attribute(t, fixture.AttrConfig{Levels: []fixture.AttrLevel{mk(1, 100*msd), mk(2, 110*msd)}, Repeats: 2, Warmup: true, RequestsPerPass: 12, Seed: 1})
	r.checkSums(t)
	r.checkTruth(t)
	for _, lv := range []string{"c1", "c2"} {
		l := r.level(t, lv)
		if got := largest(l); got != StateHost {
			t.Errorf("%s: largest state %s, want %s (%+v)", lv, got, StateHost, l.States)
		}
		if len(l.Threads) == 0 || l.Threads[0].Name != "asr-sched" || l.Threads[0].How != "named asr-sched" {
			t.Errorf("%s: serving thread %+v", lv, l.Threads)
		}
		if l.PassUtil < 0.3 || l.PassUtil > 0.5 || l.RunningUtil < 0.9 {
			t.Errorf("%s: utilization %.2f over the pass, %.2f while running; want ~0.4 and ~1 (truth %.2f, %.2f)",
				lv, l.PassUtil, l.RunningUtil, r.truth.PassUtil[lv], r.truth.RunningUtil[lv])
		}
		if math.Abs(l.PassUtil-r.truth.PassUtil[lv]) > 0.01 {
			t.Errorf("%s: pass utilization %.3f, simulated %.3f", lv, l.PassUtil, r.truth.PassUtil[lv])
		}
	}
	if r.a.ClockOffsetNs != 0 {
		t.Errorf("clock offset %d ns, want 0", r.a.ClockOffsetNs)
	}
}

// Answers that reach the client 40 ms after the server's last event:
// response delivery is the largest state and upload is about 0, whether
// or not the server's clock is the client's.
func TestAttributionResponseDelivery(t *testing.T) {
	for _, offset := range []time.Duration{0, 1500 * msd, -2300 * msd} {
		lv := fixture.AttrLevel{Concurrency: 2, Receive: 0, Build: 1 * msd, FirstForward: 2 * msd, Decode: 10 * msd, Delivery: 40 * msd, OnCPU: 1}
		r := attribute(t, fixture.AttrConfig{Levels: []fixture.AttrLevel{lv}, RequestsPerPass: 16, ClockOffset: offset, Seed: 2})
		r.checkSums(t)
		r.checkTruth(t)
		l := r.level(t, "c2")
		if got := largest(l); got != StateDelivery {
			t.Errorf("offset %v: largest state %s, want %s", offset, got, StateDelivery)
		}
		if up := l.States[stateIx(StateUpload)]; up.MeanMs > 0.5 {
			t.Errorf("offset %v: upload %.2f ms, want ≈ 0", offset, up.MeanMs)
		}
		if d := l.States[stateIx(StateDelivery)]; math.Abs(d.MeanMs-40) > 0.5 {
			t.Errorf("offset %v: delivery %.2f ms, want 40", offset, d.MeanMs)
		}
		if got := time.Duration(r.a.ClockOffsetNs); got != offset {
			t.Errorf("clock offset %v, want %v (%s)", got, offset, r.a.ClockHow)
		}
	}
}

// A thread that sleeps (off-CPU: a lock, the GIL, sleep) through decode.
func TestAttributionOffCPU(t *testing.T) {
	lv := fixture.AttrLevel{Concurrency: 4, Build: 2 * msd, FirstForward: 3 * msd, Decode: 50 * msd, Delivery: 1 * msd, OnCPU: 0.1}
	r := attribute(t, fixture.AttrConfig{Levels: []fixture.AttrLevel{lv}, RequestsPerPass: 16, Seed: 3})
	r.checkSums(t)
	r.checkTruth(t)
	if got := largest(r.level(t, "c4")); got != StateOffCPU {
		t.Errorf("largest state %s, want %s", got, StateOffCPU)
	}
}

// A thread that is runnable but gets no CPU (a co-runner, a CPU quota).
func TestAttributionRunnable(t *testing.T) {
	lv := fixture.AttrLevel{Concurrency: 4, Build: 2 * msd, FirstForward: 3 * msd, Decode: 50 * msd, Delivery: 1 * msd, OnCPU: 0.2, Runq: 0.75}
	r := attribute(t, fixture.AttrConfig{Levels: []fixture.AttrLevel{lv}, RequestsPerPass: 16, Seed: 4})
	r.checkSums(t)
	r.checkTruth(t)
	l := r.level(t, "c4")
	if got := largest(l); got != StateRunnable {
		t.Errorf("largest state %s, want %s", got, StateRunnable)
	}
	if l.RunningUtil > 0.3 {
		t.Errorf("utilization while running %.2f, want ~0.2", l.RunningUtil)
	}
}

// Two causes at once: half host work, half response delivery.
func TestAttributionTwoCauses(t *testing.T) {
	lv := fixture.AttrLevel{Concurrency: 1, Build: 1 * msd, FirstForward: 2 * msd, Decode: 40 * msd, Delivery: 40 * msd, Think: 20 * msd, OnCPU: 1}
	r := attribute(t, fixture.AttrConfig{Levels: []fixture.AttrLevel{lv}, RequestsPerPass: 10, Seed: 5})
	r.checkSums(t)
	r.checkTruth(t)
	l := r.level(t, "c1")
	host, del := l.States[stateIx(StateHost)].Share, l.States[stateIx(StateDelivery)].Share
	if host < 0.4 || host > 0.6 || del < 0.4 || del > 0.6 || host+del < 0.9 {
		t.Errorf("host work %.2f, response delivery %.2f of latency: want about half each", host, del)
	}
}

// Bursts: every client sends at once into one build worker and an
// admission cap of 2, so the requests wait for a build worker, for
// admission and behind each other's first forwards.
func TestAttributionBursty(t *testing.T) {
	lv := fixture.AttrLevel{Concurrency: 8, Upload: 2 * msd, Receive: 1 * msd, Build: 8 * msd, FirstForward: 15 * msd, Decode: 30 * msd,
		DecodeSpread: 10 * msd, Delivery: 2 * msd, BuildWorkers: 1, MaxRunning: 2, Bursty: true, Think: 300 * msd, OnCPU: 0.9}
	r := attribute(t, fixture.AttrConfig{Levels: []fixture.AttrLevel{lv}, Repeats: 2, RequestsPerPass: 24, Seed: 6})
	r.checkSums(t)
	r.checkTruth(t)
	l := r.level(t, "c8")
	for _, s := range []string{StateBuildWait, StateAdmission, StateStall, StateUpload} {
		if l.States[stateIx(s)].MeanMs < 1 {
			t.Errorf("%s: %.2f ms, want some", s, l.States[stateIx(s)].MeanMs)
		}
	}
	if l.States[stateIx(StateAdmission)].P95Ms <= l.States[stateIx(StateAdmission)].MeanMs {
		t.Errorf("admission wait p95 %.1f ≤ mean %.1f in bursts", l.States[stateIx(StateAdmission)].P95Ms, l.States[stateIx(StateAdmission)].MeanMs)
	}
}

// First forwards that stall the batch: long first forwards at c=4.
func TestAttributionFirstForwardStall(t *testing.T) {
	lv := fixture.AttrLevel{Concurrency: 4, Build: 1 * msd, FirstForward: 25 * msd, Decode: 30 * msd, Delivery: 1 * msd, OnCPU: 1}
	r := attribute(t, fixture.AttrConfig{Levels: []fixture.AttrLevel{lv}, RequestsPerPass: 20, Seed: 7})
	r.checkSums(t)
	r.checkTruth(t)
	if st := r.level(t, "c4").States[stateIx(StateStall)]; st.Share < 0.1 {
		t.Errorf("first-forward stall %.2f of latency, want more", st.Share)
	}
}

// A thread that spins inside cudaStreamSynchronize: with cuda_bins.jsonl
// its on-CPU time in the call is GPU wait, not host work, and the GPU's
// idle time is split by what the thread did meanwhile.
func TestAttributionGPUWait(t *testing.T) {
	lv := fixture.AttrLevel{Concurrency: 2, Build: 1 * msd, FirstForward: 5 * msd, Decode: 50 * msd, Delivery: 1 * msd,
		OnCPU: 0.95, Sync: 0.7, GPUUtil: 0.6}
	r := attribute(t, fixture.AttrConfig{Levels: []fixture.AttrLevel{lv}, RequestsPerPass: 12, CUDA: true, GPU: true, Seed: 8})
	r.checkSums(t)
	r.checkTruth(t)
	l := r.level(t, "c2")
	if got := largest(l); got != StateGPUWait {
		t.Errorf("largest state %s, want %s", got, StateGPUWait)
	}
	g := l.GPU
	if g == nil {
		t.Fatal("no GPU breakdown")
	}
	if sum := g.Busy + g.IdleHost + g.IdleGPUWait + g.IdleRunnable + g.IdleOff; math.Abs(sum-1) > 1e-9 {
		t.Errorf("GPU breakdown adds up to %g: %+v", sum, g)
	}
	if g.Busy < 0.5 || g.Busy > 0.65 || g.IdleGPUWait < g.IdleHost || math.Abs(g.IdleHost-(1-g.Busy)*0.25) > 0.03 {
		t.Errorf("GPU breakdown %+v: want busy ≈ 0.6, the idle rest ≈ 70 %% waiting, 25 %% host work", g)
	}
	// Without cuda bins the same time is host work.
	r = attribute(t, fixture.AttrConfig{Levels: []fixture.AttrLevel{lv}, RequestsPerPass: 12, Seed: 8})
	if got := largest(r.level(t, "c2")); got != StateHost {
		t.Errorf("without cuda bins: largest state %s, want %s", got, StateHost)
	}
	if r.level(t, "c2").GPU != nil {
		t.Errorf("a GPU breakdown without gpu.jsonl")
	}
}

// Without sched bins the running time is "no thread data", and the rest
// is attributed as before.
func TestAttributionNoBins(t *testing.T) {
	lv := fixture.AttrLevel{Concurrency: 2, Build: 3 * msd, FirstForward: 5 * msd, Decode: 30 * msd, Delivery: 5 * msd, OnCPU: 1}
	r := attribute(t, fixture.AttrConfig{Levels: []fixture.AttrLevel{lv}, RequestsPerPass: 10, NoBins: true, Seed: 9})
	r.checkSums(t)
	l := r.level(t, "c2")
	if got := largest(l); got != StateNoThread {
		t.Errorf("largest state %s, want %s", got, StateNoThread)
	}
	if len(l.Threads) > 0 || l.States[stateIx(StateHost)].Share != 0 {
		t.Errorf("a thread without bins: %+v", l)
	}
	if b := l.States[stateIx(StateBuild)].MeanMs; math.Abs(b-3) > 0.01 {
		t.Errorf("build %.3f ms, want 3", b)
	}
}

// A serving thread with an unknown name is the busiest while requests
// run, not the busiest over the pass: the decoy asr-gc runs whenever the
// batch is idle, more than the serving thread overall.
func TestAttributionBusiestThread(t *testing.T) {
	lv := fixture.AttrLevel{Concurrency: 1, Build: 1 * msd, FirstForward: 2 * msd, Decode: 30 * msd, Delivery: 1 * msd, Think: 60 * msd, OnCPU: 0.8}
	r := attribute(t, fixture.AttrConfig{Levels: []fixture.AttrLevel{lv}, RequestsPerPass: 10, ThreadName: "worker-7", Decoy: 1, Seed: 10})
	r.checkSums(t)
	r.checkTruth(t)
	l := r.level(t, "c1")
	if len(l.Threads) != 1 || l.Threads[0].Name != "worker-7" || l.Threads[0].How != "busiest while running" {
		t.Errorf("serving thread %+v, want worker-7, the busiest while running", l.Threads)
	}
}

// The pieces on hand-made inputs: the clock offset's bounds, a span's
// thread id, a request without telemetry, a truncated bins file.
func TestAttributionUnits(t *testing.T) {
	// Two requests of one pass; the second has no telemetry.
	rc := &columns.RequestCols{N: 2, Level: strs("c1", "c1"), Status: strs("ok", "ok"), Warmup: []bool{false, false},
		LatencyS: []float64{0.1, 0.05}, Repeat: []int32{1, 1},
		StartUnixNs: []int64{1000 * ms, 2000 * ms}, UploadDoneUnixNs: []int64{1000 * ms, 2000 * ms},
		FirstByteUnixNs: []int64{1100 * ms, 2050 * ms}, EndUnixNs: []int64{1100 * ms, 2050 * ms}}
	rows := &columns.StageRows{Stage: columns.Strings{Dict: []string{"first forward", "decode tail", "total", "odd"}}}
	// The server's clock is 50 ms ahead; the server starts as the client
	// sends and ends 10 ms before the client has the answer.
	s := func(t int64) int64 { return (1000 + 50 + t) * ms }
	rows.Add(0, 0, s(0), s(20), true, 0.02, true)
	rows.Add(0, 1, s(20), s(90), true, 0.07, true)
	rows.Add(0, 2, s(0), s(90), true, 0.09, true)
	rows.Add(0, 3, s(0), s(90), true, 0.09, true) // a stage attribution does not know
	mk := func(tid int, name string, on int) bundle.ThreadBins {
		b := bundle.ThreadBins{PID: 1, TID: tid, Name: name, StartUnixNs: s(0), BinMs: 10}
		for k := 0; k < 9; k++ {
			b.OnCPUUs, b.RunqUs = append(b.OnCPUUs, on), append(b.RunqUs, 0)
		}
		return b
	}
	in := AttributionInput{Reqs: rc, Rows: rows, Levels: []string{"c1"},
		Sched: []bundle.ThreadBins{mk(10, "asr-sched", 2000), mk(11, "other", 5000)}, RequestTID: []int64{11, 0}}
	a := Attribute(in)
	if a.ClockOffsetNs != 50*ms {
		t.Errorf("clock offset %d, want 50 ms (%s)", a.ClockOffsetNs, a.ClockHow)
	}
	if len(a.Requests) != 2 {
		t.Fatalf("requests %+v", a.Requests)
	}
	q := a.Requests[0].States
	want := map[int]float64{sHost: 0.045, sOffCPU: 0.045, sDelivery: 0.01}
	for st, v := range q {
		if math.Abs(v-want[st]) > 1e-9 {
			t.Errorf("%s = %g, want %g", AttributionStates[st], v, want[st])
		}
	}
	if p := a.Passes[0]; p.TID != 11 || p.How != "span thread.id" || math.Abs(p.RunningUtil-0.5) > 1e-9 {
		t.Errorf("pass thread %+v, want tid 11 from the spans at 50 %%", p)
	}
	if u := a.Requests[1]; u.Telemetry || u.States[sUnattributed] != 0.05 {
		t.Errorf("request without telemetry %+v, want 50 ms unattributed", u)
	}
	if l := a.Levels[0]; l.N != 2 || l.Missing != 1 {
		t.Errorf("level %+v", l)
	}
	// By name when no span says.
	in.RequestTID = nil
	if p := Attribute(in).Passes[0]; p.TID != 10 || p.How != "named asr-sched" {
		t.Errorf("pass thread %+v, want asr-sched", p)
	}
	// Two processes with a thread of that name: the busier one, unless
	// the running stage's events name the process.
	other := mk(20, "asr-sched", 9000)
	other.PID = 2
	in.Sched = append(in.Sched, other)
	if p := Attribute(in).Passes[0]; p.PID != 2 || p.TID != 20 {
		t.Errorf("pass thread %+v, want pid 2's, the busier", p)
	}
	in.RequestPID = []int64{1, 0}
	if p := Attribute(in).Passes[0]; p.PID != 1 || p.TID != 10 || p.How != "named asr-sched" {
		t.Errorf("pass thread %+v, want pid 1's, which the events name", p)
	}
	in.RequestPID = nil
	in.Sched = in.Sched[:2]
	// A truncated last line is dropped.
	dir := t.TempDir()
	good := `{"pid":1,"tid":2,"name":"x","start_unix_ns":5,"bin_ms":10,"oncpu_us":[1,2],"runq_us":[0,0]}` + "\n"
	if err := os.WriteFile(filepath.Join(dir, bundle.SchedBinsFile), []byte(good+`{"pid":1,"tid":3,"na`), 0o644); err != nil {
		t.Fatal(err)
	}
	sched, cuda, _, err := ReadThreadBins(dir)
	if err != nil || len(sched) != 1 || cuda != nil || sched[0].TID != 2 || len(sched[0].OnCPUUs) != 2 {
		t.Errorf("ReadThreadBins = %+v, %+v, %v", sched, cuda, err)
	}
}

// vllmPreset is a copy of scripts/stages/vllm.star's SPEC.
func vllmPreset() *Preset {
	attr := func(n, key string) Stage { return Stage{Name: n, AttrSpan: "llm_request", Attr: key} }
	return &Preset{Name: "vllm", Requires: Point{Span: "llm_request"}, Stages: []Stage{
		{Name: "build→queued", Rest: true},
		attr("queued→scheduled", "gen_ai.latency.time_in_queue"),
		attr("first forward", "gen_ai.latency.time_in_model_prefill"),
		attr("decode tail", "gen_ai.latency.time_in_model_decode"),
		{Name: "total", From: Point{Span: "llm_request"}, To: Point{Span: "llm_request", End: true, Last: true}},
	}}
}

// vLLM reports its stages as durations (attributes), summed over the
// chunks of a long request: attribution lays them back to back inside the
// request's spans, so that each keeps its length; what vLLM leaves
// unexplained (build→queued, a rest()) is unattributed. The golden vllm
// bundle: 3 chunks a request, the server's clock 700 ms ahead.
func TestAttributionVLLMChunks(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "vllm")
	truth, err := fixture.Write(dir, fixture.Golden()["vllm"])
	if err != nil {
		t.Fatal(err)
	}
	_, rc, sp := openTables(t, dir)
	a := Attribute(AttributionInput{Reqs: rc, Rows: Derive(vllmPreset(), rc.N, nil, sp), Levels: []string{"c1", "c8", "c32", "c64"}})
	if len(a.Levels) != 4 {
		t.Fatalf("levels %+v", a.Levels)
	}
	for _, q := range a.Requests {
		sum := 0.0
		for _, v := range q.States {
			sum += v
		}
		if math.Abs(sum-q.LatencyS) > 1e-6 {
			t.Errorf("request %d: states add up to %.9f, latency %.9f", q.Index, sum, q.LatencyS)
		}
	}
	for _, l := range a.Levels {
		m := truth.Means[l.Level]
		ms := func(s string) float64 { return l.States[stateIx(s)].MeanMs }
		for _, c := range []struct {
			what      string
			got, want float64
		}{
			{"admission wait", ms(StateAdmission), 1000 * m[fixture.QueuedToSched]},
			{"unattributed (build, build→queued)", ms(StateUnattributed), 1000 * (m[fixture.Build] + m[fixture.BuildToQueued])},
			{"running batch", ms(StateNoThread) + ms(StateStall), 1000 * (m[fixture.FirstForward] + m[fixture.DecodeTail])},
			{"upload + delivery", ms(StateUpload) + ms(StateDelivery), 1000 * m[fixture.ClientOverhead]},
		} {
			if math.Abs(c.got-c.want) > 0.01 {
				t.Errorf("%s %s: %.3f ms, want %.3f", l.Level, c.what, c.got, c.want)
			}
		}
	}
}

// benchInput is n requests of one pass on one serving thread, each with
// the refserver's stages, and the thread's bins over the pass.
func benchInput(n int) AttributionInput {
	rc := &columns.RequestCols{N: n, Level: columns.Strings{Dict: []string{"c64"}}, Status: columns.Strings{Dict: []string{model.StatusOK}}}
	rows := &columns.StageRows{Stage: columns.Strings{Dict: []string{"receive", "build wait", "build", "build→queued", "queued→scheduled", "first forward", "decode tail", "total"}}}
	start := int64(1764480000000000000)
	for i := 0; i < n; i++ {
		t0 := start + int64(i)*5*ms // one every 5 ms, 64 at once
		rc.Level.Codes = append(rc.Level.Codes, 0)
		rc.Status.Codes = append(rc.Status.Codes, 0)
		rc.Warmup = append(rc.Warmup, false)
		rc.Repeat = append(rc.Repeat, 1)
		b := []int64{t0, t0 + 1*ms, t0 + 2*ms, t0 + 10*ms, t0 + 11*ms, t0 + 100*ms, t0 + 103*ms, t0 + 320*ms}
		for k := 0; k < 7; k++ {
			rows.Add(int32(i), int32(k), b[k], b[k+1], true, float64(b[k+1]-b[k])/1e9, true)
		}
		rows.Add(int32(i), 7, b[0], b[7], true, float64(b[7]-b[0])/1e9, true)
		rc.LatencyS = append(rc.LatencyS, 0.33)
		rc.StartUnixNs = append(rc.StartUnixNs, t0-5*ms)
		rc.UploadDoneUnixNs = append(rc.UploadDoneUnixNs, t0)
		rc.EndUnixNs = append(rc.EndUnixNs, t0+325*ms)
		rc.FirstByteUnixNs = append(rc.FirstByteUnixNs, t0+325*ms)
	}
	nb := (n*5 + 400) / 10
	th := bundle.ThreadBins{PID: 1, TID: 2, Name: "asr-sched", StartUnixNs: start - 10*ms, BinMs: 10}
	for k := 0; k < nb; k++ {
		th.OnCPUUs, th.RunqUs = append(th.OnCPUUs, 6000+k%3000), append(th.RunqUs, 500)
	}
	return AttributionInput{Reqs: rc, Rows: rows, Levels: []string{"c64"}, Sched: []bundle.ThreadBins{th}}
}

// BenchmarkAttribute is the attribution of 100,000 requests (one pass,
// 64 in the batch at once, 50,000 bins).
func BenchmarkAttribute(b *testing.B) {
	in := benchInput(100000)
	b.ResetTimer()
	for b.Loop() {
		a := Attribute(in)
		if len(a.Requests) != 100000 {
			b.Fatal(len(a.Requests))
		}
	}
}

// stateStats's mean and p95 are stats.Mean and stats.Percentile(xs, 95).
func TestMeanP95(t *testing.T) {
	rng := uint64(7)
	next := func() float64 { rng = rng*6364136223846793005 + 1442695040888963407; return float64(rng>>40) / 1e3 }
	for _, n := range []int{1, 2, 3, 5, 20, 21, 100, 1001} {
		for _, ties := range []bool{false, true} {
			xs, states := make([]float64, n), make([][]float64, n) // ms; each request's one state (s)
			for i := range xs {
				x := next()
				if ties {
					x = float64(int(x) % 4)
				}
				states[i] = []float64{x / 1000}
				xs[i] = 1000 * states[i][0]
			}
			wm, wp := stats.Mean(xs), stats.Percentile(xs, 95)
			var st [1]StateStat
			stateStats(st[:], 0, states)
			m, p := st[0].MeanMs, st[0].P95Ms
			if m != wm || math.Abs(p-wp) > 1e-12*math.Max(1, math.Abs(wp)) {
				t.Errorf("n=%d ties=%v: mean %g p95 %g, want %g %g", n, ties, m, p, wm, wp)
			}
		}
	}
}

// The admission wait at the cap: with a cap of 2 the simulated server
// admits a request only when a running one leaves, so its waits fall
// while the batch holds 2 (the most it ever holds); without a cap (as many
// slots as clients) nobody waits at a full batch. Computed by hand on
// steps: occupancySteps and atCap.
func TestAttributionAdmissionAtCap(t *testing.T) {
	lv := fixture.AttrLevel{Concurrency: 8, Build: 2 * msd, FirstForward: 3 * msd, Decode: 40 * msd, Delivery: 1 * msd, MaxRunning: 2, OnCPU: 0.9}
	capped := attribute(t, fixture.AttrConfig{Levels: []fixture.AttrLevel{lv}, RequestsPerPass: 24, Seed: 7}).level(t, "c8")
	if capped.RunCap != 2 || capped.AdmissionAtCap < 0.8 {
		t.Errorf("capped: run cap %d, at the cap during %.2f of the admission wait; want 2 and most of it", capped.RunCap, capped.AdmissionAtCap)
	}
	// Without a cap, first forwards of 6 ms run one at a time while the
	// batch decodes: the queue waits behind them, with room in the batch.
	behind := lv
	behind.MaxRunning, behind.FirstForward = 0, 6*msd
	ff := attribute(t, fixture.AttrConfig{Levels: []fixture.AttrLevel{behind}, RequestsPerPass: 24, Seed: 7}).level(t, "c8")
	if ff.AdmissionAtCap > 0.2 || ff.AdmissionInFF < 0.8 {
		t.Errorf("uncapped: at the cap during %.2f of the admission wait, behind a first forward %.2f; want little and most of it", ff.AdmissionAtCap, ff.AdmissionInFF)
	}
	u := newFFUnion([]interval{{0, 10}, {20, 30}}, nil)
	if got := u.covered(interval{5, 25}); got != 10 {
		t.Errorf("covered [5, 25) = %d, want 10", got)
	}
	steps := occupancySteps([]interval{{0, 10}, {5, 20}, {10, 30}, {25, 26}})
	want := []occStep{{0, 1}, {5, 2}, {10, 2}, {20, 1}, {25, 2}, {26, 1}, {30, 0}}
	if !slices.Equal(steps, want) {
		t.Errorf("steps %v, want %v", steps, want)
	}
	// [3, 28): at 2 over [5, 20) and [25, 26): 16 ns
	if got := atCap(steps, 2, interval{3, 28}); got != 16 {
		t.Errorf("atCap = %v, want 16", got)
	}
	if got := atCap(steps, 3, interval{0, 30}); got != 0 {
		t.Errorf("atCap above the most held = %v, want 0", got)
	}
}
