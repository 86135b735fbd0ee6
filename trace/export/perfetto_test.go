package export

import (
	"bytes"
	"encoding/json"
	"fmt"
	"github.com/asrprof/asrprof/model"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/bundle/columns"
	"github.com/asrprof/asrprof/internal/fixture"
)

func TestAssignSlots(t *testing.T) {
	for _, tc := range []struct {
		name string
		ivs  []interval
		want []int
		n    int
	}{
		{"empty", nil, []int{}, 0},
		{"sequential reuse slot 0", []interval{{0, 10}, {10, 20}, {20, 30}}, []int{0, 0, 0}, 1},
		{"overlap", []interval{{0, 10}, {5, 15}, {12, 20}}, []int{0, 1, 0}, 2},
		{"lowest free slot", []interval{{0, 100}, {1, 5}, {2, 50}, {6, 8}, {60, 70}}, []int{0, 1, 2, 1, 1}, 3},
		{"input order does not matter", []interval{{12, 20}, {5, 15}, {0, 10}}, []int{0, 1, 0}, 2},
		{"inverted interval is empty", []interval{{10, 5}, {10, 20}}, []int{0, 0}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, n := assignSlots(tc.ivs)
			if !reflect.DeepEqual(got, tc.want) || n != tc.n {
				t.Errorf("assignSlots(%v) = %v, %d; want %v, %d", tc.ivs, got, n, tc.want, tc.n)
			}
		})
	}
}

// pev is a parsed trace event, as a viewer sees it.
type pev struct {
	Name string         `json:"name"`
	Cat  string         `json:"cat"`
	Ph   string         `json:"ph"`
	TS   *float64       `json:"ts"`
	Dur  *float64       `json:"dur"`
	PID  *int           `json:"pid"`
	TID  *int           `json:"tid"`
	ID   *uint64        `json:"id"`
	BP   string         `json:"bp"`
	Args map[string]any `json:"args"`
}

type trackID struct{ pid, tid int }

// checked is what checkTraceFile learned about a valid file.
type checked struct {
	events      []pev
	procName    map[int]string
	threadName  map[trackID]string
	slices      map[trackID][]pev // X events per track, in file order
	counters    map[string][]pev  // "process/name" → C events
	flows       int
	reqsByLevel map[string]int
	slotsByProc map[string]int
}

const eps = 1e-3 // µs: timestamps are ns/1000

// checkTraceFile parses data as a viewer would and checks it: required
// fields per phase, metadata first then non-negative, non-decreasing
// timestamps, flows paired and bound to slices, request slices on a track
// never overlapping and every other slice properly nested.
func checkTraceFile(t *testing.T, data []byte) *checked {
	t.Helper()
	var doc struct {
		TraceEvents     []pev  `json:"traceEvents"`
		DisplayTimeUnit string `json:"displayTimeUnit"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	if doc.DisplayTimeUnit != "ms" {
		t.Errorf("displayTimeUnit = %q, want ms", doc.DisplayTimeUnit)
	}
	if len(doc.TraceEvents) == 0 {
		t.Fatal("no traceEvents")
	}
	c := &checked{
		events:      doc.TraceEvents,
		procName:    map[int]string{},
		threadName:  map[trackID]string{},
		slices:      map[trackID][]pev{},
		counters:    map[string][]pev{},
		reqsByLevel: map[string]int{},
		slotsByProc: map[string]int{},
	}
	type flowEnd struct {
		e     pev
		track trackID
	}
	starts, ends := map[uint64][]flowEnd{}, map[uint64][]flowEnd{}
	lastTS, sawData := 0.0, false
	for i, e := range doc.TraceEvents {
		if e.Ph == "" || e.PID == nil || e.TID == nil || e.TS == nil {
			t.Fatalf("event %d %+v: ph, pid, tid and ts are required", i, e)
		}
		tr := trackID{*e.PID, *e.TID}
		if e.Ph == "M" {
			if sawData {
				t.Errorf("event %d: metadata after data events", i)
			}
			name, _ := e.Args["name"].(string)
			switch e.Name {
			case "process_name":
				c.procName[*e.PID] = name
			case "thread_name":
				c.threadName[tr] = name
			case "process_sort_index", "thread_sort_index":
				if _, ok := e.Args["sort_index"].(float64); !ok {
					t.Errorf("event %d: %s without a numeric sort_index", i, e.Name)
				}
				continue
			default:
				t.Errorf("event %d: unknown metadata %q", i, e.Name)
			}
			if name == "" {
				t.Errorf("event %d: %s without args.name", i, e.Name)
			}
			continue
		}
		sawData = true
		if *e.TS < 0 || *e.TS < lastTS {
			t.Fatalf("event %d: ts %v after %v: want non-negative and non-decreasing", i, *e.TS, lastTS)
		}
		lastTS = *e.TS
		switch e.Ph {
		case "X":
			if e.Name == "" || e.Dur == nil || *e.Dur < 0 {
				t.Fatalf("event %d %+v: X needs a name and dur ≥ 0", i, e)
			}
			c.slices[tr] = append(c.slices[tr], e)
		case "C":
			if e.Name == "" || len(e.Args) == 0 {
				t.Fatalf("event %d: C needs a name and args", i)
			}
			for k, v := range e.Args {
				if _, ok := v.(float64); !ok {
					t.Errorf("event %d: counter %s arg %s = %v, want a number", i, e.Name, k, v)
				}
			}
			key := c.procName[*e.PID] + "/" + e.Name
			c.counters[key] = append(c.counters[key], e)
		case "s", "f":
			if e.ID == nil || e.Name == "" || e.Cat == "" {
				t.Fatalf("event %d %+v: flow events need id, name and cat", i, e)
			}
			if e.Ph == "s" {
				starts[*e.ID] = append(starts[*e.ID], flowEnd{e, tr})
			} else {
				if e.BP != "e" {
					t.Errorf("event %d: flow end with bp %q, want e", i, e.BP)
				}
				ends[*e.ID] = append(ends[*e.ID], flowEnd{e, tr})
			}
		default:
			t.Fatalf("event %d: unexpected phase %q", i, e.Ph)
		}
	}
	for tr := range c.slices {
		if c.procName[tr.pid] == "" || c.threadName[tr] == "" {
			t.Errorf("track %v has slices but no process or thread name", tr)
		}
	}
	// Slices: requests never overlap; everything properly nested.
	for tr, ss := range c.slices {
		var stack []pev
		var lastReqEnd float64 = -1
		for _, s := range ss {
			for len(stack) > 0 && *stack[len(stack)-1].TS+*stack[len(stack)-1].Dur <= *s.TS+eps {
				stack = stack[:len(stack)-1]
			}
			if len(stack) > 0 {
				top := stack[len(stack)-1]
				if *s.TS+*s.Dur > *top.TS+*top.Dur+eps {
					t.Errorf("track %v (%s): %q [%v, +%v] overlaps %q [%v, +%v] without nesting",
						tr, c.threadName[tr], s.Name, *s.TS, *s.Dur, top.Name, *top.TS, *top.Dur)
				}
			}
			stack = append(stack, s)
			if s.Cat == CatRequest && strings.HasPrefix(c.threadName[tr], "slot ") {
				if *s.TS < lastReqEnd-eps {
					t.Errorf("track %v (%s): request %q starts at %v before the previous request ended (%v)", tr, c.threadName[tr], s.Name, *s.TS, lastReqEnd)
				}
				lastReqEnd = *s.TS + *s.Dur
				for _, k := range []string{"request_id", "latency_s", "status"} {
					if _, ok := s.Args[k]; !ok {
						t.Errorf("request slice %q: no args.%s", s.Name, k)
					}
				}
				c.reqsByLevel[fmt.Sprint(s.Args["level"])]++
			}
		}
	}
	for tr := range c.threadName {
		if strings.HasPrefix(c.threadName[tr], "slot ") {
			c.slotsByProc[c.procName[tr.pid]]++
		}
	}
	// Flows: one start and one end per id, each inside a slice of its track.
	within := func(fe flowEnd, cat string) bool {
		for _, s := range c.slices[fe.track] {
			if s.Cat == cat && *s.TS-eps <= *fe.e.TS && *fe.e.TS <= *s.TS+*s.Dur+eps {
				return true
			}
		}
		return false
	}
	for id, ss := range starts {
		es := ends[id]
		if len(ss) != 1 || len(es) != 1 {
			t.Errorf("flow %d: %d starts and %d ends, want one of each", id, len(ss), len(es))
			continue
		}
		if ss[0].e.Name != es[0].e.Name || ss[0].e.Cat != es[0].e.Cat {
			t.Errorf("flow %d: start %q/%q, end %q/%q: want the same name and cat", id, ss[0].e.Name, ss[0].e.Cat, es[0].e.Name, es[0].e.Cat)
		}
		if !within(ss[0], CatRequest) || !strings.HasPrefix(c.threadName[ss[0].track], "slot ") {
			t.Errorf("flow %d starts at %v outside any request slice of a client track", id, *ss[0].e.TS)
		}
		if !within(es[0], CatRequest) || strings.HasPrefix(c.procName[es[0].track.pid], "client") {
			t.Errorf("flow %d ends at %v outside any request root span of a server track", id, *es[0].e.TS)
		}
		c.flows++
	}
	for id := range ends {
		if _, ok := starts[id]; !ok {
			t.Errorf("flow %d ends but never starts", id)
		}
	}
	return c
}

// perfettoOf draws the bundle in dir with stages (per request, may be nil).
func perfettoOf(t *testing.T, dir string, stages [][]Stage) ([]byte, PerfettoStats) {
	t.Helper()
	in, err := ReadPerfettoInput(openBundle(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	in.Stages = stages
	tf, st := BuildPerfetto(in)
	var buf bytes.Buffer
	if err := WriteTraceFile(&buf, tf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), st
}

// TestPerfettoFixture: a simulated sweep (c1 and c4, warmup, failures)
// with GPU and scheduler probes and a stage decomposition.
func TestPerfettoFixture(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fx")
	cfg := fixture.Config{
		Levels: []fixture.SimLevel{
			{Concurrency: 1, SchedUtil: 0.3, Stages: fixture.Stages{Build: fixture.Fixed(5 * time.Millisecond), DecodeTail: fixture.Dist{Mean: 30 * time.Millisecond, Spread: 20 * time.Millisecond}}},
			{Concurrency: 4, SchedUtil: 0.9, Stages: fixture.Stages{Build: fixture.Fixed(5 * time.Millisecond), QueuedToSched: fixture.Fixed(20 * time.Millisecond), DecodeTail: fixture.Dist{Mean: 30 * time.Millisecond, Spread: 20 * time.Millisecond}}},
		},
		Warmup:          true,
		Repeats:         2,
		RequestsPerPass: 16,
		FailEvery:       5,
		GPU:             true,
		Sched:           true,
		ClockOffset:     -3 * time.Millisecond, // server clock behind: spans before the capture start
	}
	truth, err := fixture.Write(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	b := openBundle(t, dir)
	reqs, err := columns.ReadRequestsJSONL(b.Path(bundle.RequestsFile))
	if err != nil {
		t.Fatal(err)
	}
	// A stage decomposition: one stage per successful request.
	stages := make([][]Stage, len(reqs))
	for i, r := range reqs {
		if r.Status == "ok" {
			stages[i] = []Stage{{Name: "client overhead", StartUnixNs: r.StartUnixNs, EndUnixNs: r.StartUnixNs + 1000}}
		}
	}

	data, st := perfettoOf(t, dir, stages)
	c := checkTraceFile(t, data)

	if st.Requests != truth.Requests {
		t.Errorf("%d request slices, the capture has %d requests", st.Requests, truth.Requests)
	}
	if c.reqsByLevel["c1"]+c.reqsByLevel["c4"] != truth.Requests {
		t.Errorf("request slices by level %v, want %d in all", c.reqsByLevel, truth.Requests)
	}
	// Closed loop at concurrency N keeps exactly N requests in flight.
	if c.slotsByProc["client c1"] != 1 || c.slotsByProc["client c4"] != 4 {
		t.Errorf("client slot tracks %v, want 1 for c1 and 4 for c4", c.slotsByProc)
	}
	// Every successful request has server spans (transcription on top):
	// one flow each.
	ok := 0
	for _, r := range reqs {
		if r.Status == "ok" {
			ok++
		}
	}
	if c.flows != ok || st.Flows != ok {
		t.Errorf("%d flows (stats %d), want one per successful request (%d)", c.flows, st.Flows, ok)
	}
	if st.StageSlices != ok {
		t.Errorf("%d stage slices, want %d", st.StageSlices, ok)
	}
	// Counters: GPU utilization, memory, power; one CPU track per thread.
	for _, k := range []string{"GPU 0/utilization", "GPU 0/memory used", "GPU 0/power", "threads of pid 100 (sched)/cpu asr-sched 101"} {
		if len(c.counters[k]) == 0 {
			t.Errorf("no counter %q (have %v)", k, keys(c.counters))
		}
	}
	// The scheduler thread's counter steps to the level's utilization at
	// each pass's start and back to 0 at its end.
	sched := c.counters["threads of pid 100 (sched)/cpu asr-sched 101"]
	if want := 2 * len(b.Manifest.Levels); len(sched) != want {
		t.Errorf("%d sched counter points, want %d (start and end of %d passes)", len(sched), want, len(b.Manifest.Levels))
	} else {
		for k, e := range sched {
			want := 0.0
			if k%2 == 0 {
				want = 0.3
				if k >= 2*(cfg.Repeats+1) {
					want = 0.9
				}
			}
			if e.Args["cores"] != want {
				t.Errorf("sched point %d = %v, want %v", k, e.Args["cores"], want)
			}
		}
	}
	if st.StartUnixNs >= b.Manifest.StartUnixNs {
		t.Errorf("ts 0 is %d, want before the capture start %d (the server clock is behind)", st.StartUnixNs, b.Manifest.StartUnixNs)
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestPerfettoThreads: server spans that name their thread go on that
// thread's tracks, split when they overlap; the others on per-name tracks.
func TestPerfettoThreads(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cap")
	sb := writeSmallBundle(t, dir, 5)
	data, st := perfettoOf(t, dir, sb.stages)
	c := checkTraceFile(t, data)
	if c.slotsByProc["client c2"] != 2 {
		t.Errorf("client tracks %v, want 2 slots for c2", c.slotsByProc)
	}
	if st.Flows != len(sb.reqs) || c.flows != len(sb.reqs) {
		t.Errorf("%d flows, want %d", c.flows, len(sb.reqs))
	}
	names := map[string]int{}
	for tr, n := range c.threadName {
		if c.procName[tr.pid] == "server: asrprof-refserver" {
			names[strings.Split(n, " #")[0]] += len(c.slices[tr])
		}
	}
	want := map[string]int{"thread scheduler": 5, srvRoot: 5, srvBuild: 5}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("server tracks (slices per name) = %v, want %v", names, want)
	}
	for tr, ss := range c.slices {
		for _, s := range ss {
			if s.Cat == CatClient && s.Name == "upload" && c.procName[tr.pid] != "client c2" {
				t.Errorf("upload slice on %q", c.procName[tr.pid])
			}
		}
	}
}

// TestPerfettoRequestsOnly: a bundle with nothing but requests (a killed
// capture, probes off) still gives a valid file.
func TestPerfettoRequestsOnly(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cap")
	writeSmallBundle(t, dir, 3)
	if err := os.Remove(filepath.Join(dir, bundle.SpansFile)); err != nil {
		t.Fatal(err)
	}
	data, st := perfettoOf(t, dir, nil)
	c := checkTraceFile(t, data)
	if st.Requests != 3 || st.ServerSpans != 0 || c.flows != 0 {
		t.Errorf("stats %+v, want 3 requests and nothing else", st)
	}
	// the request that opened its connection: connect, then its upload
	var phases []string
	for _, ss := range c.slices {
		for _, e := range ss {
			if e.Name == "connect" || e.Name == "upload" {
				phases = append(phases, fmt.Sprintf("%s %.0f", e.Name, *e.Dur))
			}
		}
	}
	slices.Sort(phases)
	if want := []string{"connect 1000", "upload 1000", "upload 2000", "upload 2000"}; !slices.Equal(phases, want) {
		t.Errorf("client phases (name, µs) = %v, want %v", phases, want)
	}
}

// A request slice's args are its record's fields under their
// requests.jsonl names, left out where requests.jsonl leaves them out,
// without the transcripts.
func TestRequestArgs(t *testing.T) {
	r := &model.Request{RequestID: "r1", Level: "c2", Repeat: 1, LatencyS: math.Inf(1), AudioDurationS: 3, Hyp: "hello", Status: model.StatusOK}
	a := requestArgs(r)
	for k, want := range map[string]any{"request_id": "r1", "level": "c2", "repeat": 1, "warmup": false, "audio_duration_s": 3.0, "latency_s": "+Inf", "status": model.StatusOK} {
		if a[k] != want {
			t.Errorf("args[%s] = %v (%T), want %v", k, a[k], a[k], want)
		}
	}
	for _, k := range []string{"hyp", "ref", "audio_s", "server_request_id", "ttft_s", "errors", "first_update_s"} {
		if v, ok := a[k]; ok {
			t.Errorf("args has %s = %v; want it left out", k, v)
		}
	}
	r.AudioS, r.FirstUpdateS = 2.5, new(0.25)
	if a := requestArgs(r); a["audio_s"] != 2.5 || a["first_update_s"] != 0.25 {
		t.Errorf("set fields: audio_s %v, first_update_s %v", a["audio_s"], a["first_update_s"])
	}
}
