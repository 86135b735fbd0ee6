package engine

import (
	"math"
	"slices"
	"strconv"
	"testing"

	"github.com/asrprof/asrprof/bundle"
	"github.com/asrprof/asrprof/bundle/columns"
)

// bbReqs builds request columns from rows of (level, sample, start,
// upload done, first byte, end) in ms from a base time; every request ok,
// repeat 1.
type bbRow struct {
	level, sample         string
	start, up, first, end float64
}

const bbBase = int64(1_700_000_000_000_000_000)

func bbInput(rows []bbRow) BlackBoxInput {
	n := len(rows)
	lv, st := columns.Strings{}, columns.Strings{Dict: []string{"ok"}}
	rc := &columns.RequestCols{N: n, Warmup: make([]bool, n), Repeat: make([]int32, n)}
	ids := make([]string, n)
	ms := func(x float64) int64 { return bbBase + int64(math.Round(x*1e6)) }
	for i, r := range rows {
		c := lv.Code(r.level)
		if c < 0 {
			c = int32(len(lv.Dict))
			lv.Dict = append(lv.Dict, r.level)
		}
		lv.Codes = append(lv.Codes, c)
		st.Codes = append(st.Codes, 0)
		rc.Repeat[i] = 1
		rc.LatencyS = append(rc.LatencyS, (r.end-r.start)/1e3)
		rc.StartUnixNs = append(rc.StartUnixNs, ms(r.start))
		rc.UploadDoneUnixNs = append(rc.UploadDoneUnixNs, ms(r.up))
		rc.FirstByteUnixNs = append(rc.FirstByteUnixNs, ms(r.first))
		rc.EndUnixNs = append(rc.EndUnixNs, ms(r.end))
		ids[i] = r.sample
	}
	rc.Level, rc.Status = lv, st
	return BlackBoxInput{Reqs: rc, SampleID: ids, Levels: lv.Dict, Solo: "c1"}
}

// bbSerial is a server that serves one request at a time: sample a takes
// 100 ms alone, b 200 ms; at c=2 both arrive at once, b waits for a.
var bbSerial = []bbRow{
	{"c1", "a", 0, 5, 105, 106},
	{"c1", "b", 200, 205, 405, 406},
	{"c2", "a", 1000, 1005, 1105, 1106},
	{"c2", "b", 1000, 1005, 1305, 1306},
}

// bbBins is n 10 ms bins of thread tid in process pid from 1000 ms, on a
// CPU through bin k where on(k).
func bbBins(pid, tid int, name string, n int, on func(k int) bool) bundle.ThreadBins {
	us := make([]int, n)
	for k := range us {
		if on(k) {
			us[k] = 10_000
		}
	}
	return bundle.ThreadBins{Level: "c2", Repeat: 1, PID: pid, TID: tid, Name: name, StartUnixNs: bbBase + 1000*1e6, BinMs: 10, OnCPUUs: us, RunqUs: make([]int, n)}
}

func bbNear(t *testing.T, what string, got, want, tol float64) {
	t.Helper()
	if math.Abs(got-want) > tol {
		t.Errorf("%s = %.6g, want %.6g", what, got, want)
	}
}

// bbSerial's requests, computed by hand.
func TestBlackBoxSerial(t *testing.T) {
	in := bbInput(bbSerial)
	// one thread on a CPU from 1000 ms to 1400 ms, in 10 ms bins
	in.Bins = []bundle.ThreadBins{bbBins(7, 8, "generate", 40, func(int) bool { return true })}
	bb := BlackBox(in)
	if bb.Solo != SoloLevel || bb.SoloFrom != "c1" {
		t.Errorf("solo = %q from %q, want the c1 level", bb.Solo, bb.SoloFrom)
	}
	if len(bb.Requests) != 4 || len(bb.Levels) != 2 {
		t.Fatalf("%d requests, %d levels; want 4, 2", len(bb.Requests), len(bb.Levels))
	}
	want := [][NumBBStates]float64{ // s: connect, upload, wait, host, gpu, runq, off, none, delivery
		2: {0, 0.005, 0, 0.100, 0, 0, 0, 0, 0.001},
		3: {0, 0.005, 0.100, 0.200, 0, 0, 0, 0, 0.001},
	}
	for i := 2; i < 4; i++ {
		q := bb.Requests[i]
		sum := 0.0
		for s := range q.States {
			bbNear(t, "request "+strconv.Itoa(i)+" "+BlackBoxStates[s], q.States[s], want[i][s], 1e-6)
			sum += q.States[s]
		}
		bbNear(t, "request "+strconv.Itoa(i)+" states' sum", sum, q.LatencyS, 1e-9)
		if q.TID != 8 {
			t.Errorf("request %d: service split by thread %d, want 8", i, q.TID)
		}
	}
	// the c=1 requests have no bins: their service has no thread data
	bbNear(t, "c1 request a: no thread data", bb.Requests[0].States[bNoThread], 0.100, 1e-6)
	l := bb.Levels[1]
	bbNear(t, "c2 wait share", l.States[bWait].Share, 0.100/0.412, 1e-6)
	bbNear(t, "c2 throughput", l.ReqS, 2/0.306, 1e-6)
	// held: the server times' union, 1005–1305 ms; 300 ms of services
	// alone in it: one at a time, at its bound
	bbNear(t, "c2 parallelism", l.Parallelism, 0.300/0.300, 1e-6)
	bbNear(t, "c2 held share", l.HeldShare, 0.300/0.306, 1e-6)
	if l.Shape != ShapeOne || l.ShapeN != 1 {
		t.Errorf("c2 shape %q %d, want one at a time", l.Shape, l.ShapeN)
	}
	bbNear(t, "c2 service busy", l.ServiceBusy, 1, 1e-9)
	if bb.Levels[0].Shape != ShapeNone {
		t.Errorf("c1 shape %q: nothing waited", bb.Levels[0].Shape)
	}
}

// The server's CPU time a request per level and against the c=1 pass's:
// at c=1 its thread is on a CPU through both services (300 ms held, 150
// ms a request); at c=2 only through 1000–1150 ms of its 1005–1305 ms
// held (145 ms, 72.5 ms a request), 0.483× c=1's.
func TestBlackBoxCPUPerRequest(t *testing.T) {
	in := bbInput(bbSerial)
	c1 := bbBins(7, 8, "generate", 50, func(int) bool { return true })
	c1.Level, c1.StartUnixNs = "c1", bbBase
	in.Bins = []bundle.ThreadBins{c1, bbBins(7, 8, "generate", 40, func(k int) bool { return k < 15 })}
	bb := BlackBox(in)
	if len(bb.Levels) != 2 {
		t.Fatalf("%d levels, want 2", len(bb.Levels))
	}
	bbNear(t, "c1 CPU a request", bb.Levels[0].CPUPerRequestS, 0.150, 1e-9)
	bbNear(t, "c1 against itself", bb.Levels[0].CPUVsSolo, 0, 0)
	bbNear(t, "c2 CPU a request", bb.Levels[1].CPUPerRequestS, 0.0725, 1e-9)
	bbNear(t, "c2 against c1", bb.Levels[1].CPUVsSolo, 0.0725/0.150, 1e-9)
	// without bins at c=1 there is nothing to hold c=2 against
	in.Bins = in.Bins[1:]
	bb = BlackBox(in)
	bbNear(t, "c2 against a c1 without bins", bb.Levels[1].CPUVsSolo, 0, 0)
}

// A request waits behind others only while another is in the server: at
// c=1, sample a served in 100, 100 and 160 ms (its median alone 100 ms),
// the slow one did not wait 60 ms; its own service was slower. At c=2, b
// beside a slow a waits only the 50 ms they overlapped.
func TestBlackBoxWaitNeedsOthers(t *testing.T) {
	in := bbInput([]bbRow{
		{"c1", "a", 0, 5, 105, 106},
		{"c1", "a", 200, 205, 305, 306},
		{"c1", "a", 400, 405, 565, 566},
		{"c1", "b", 600, 605, 705, 706},
		{"c2", "a", 1000, 1005, 1255, 1256}, // a: 250 ms, alone 100
		{"c2", "b", 1200, 1205, 1355, 1356}, // b: 150 ms, alone 100, beside a 50 ms
	})
	bb := BlackBox(in)
	if q := bb.Requests[2]; q.States[bWait] != 0 || math.Abs(q.States[bNoThread]-0.160) > 1e-9 {
		t.Errorf("c1's slow request: wait %.3f s, service %.3f s; want 0 and 0.160", q.States[bWait], q.States[bNoThread])
	}
	if q := bb.Requests[5]; math.Abs(q.States[bWait]-0.050) > 1e-9 || math.Abs(q.States[bNoThread]-0.100) > 1e-9 {
		t.Errorf("c2's b: wait %.3f s, service %.3f s; want 0.050 and 0.100", q.States[bWait], q.States[bNoThread])
	}
	if q := bb.Requests[4]; math.Abs(q.States[bWait]-0.050) > 1e-9 {
		t.Errorf("c2's a: wait %.3f s, want 0.050 (b beside it for 50 ms)", q.States[bWait])
	}
	if l := bb.Levels[0]; l.States[bWait].Share != 0 || l.Shape != ShapeNone {
		t.Errorf("c1: wait share %.3f, shape %q; want none", l.States[bWait].Share, l.Shape)
	}
}

// Time the server held nothing does not lower the parallelism: at c=3, a
// and b are served side by side (100 ms alone each); c's connection took a
// second (a SYN retransmitted at a full listen backlog), so its upload was
// done at 1005 ms and it was served alone. By wall, 3 / 1.106 s × 100 ms
// is 0.27; over the 200 ms the server held requests, 300 ms of services
// alone is 1.5.
func TestBlackBoxHeldTime(t *testing.T) {
	in := bbInput([]bbRow{
		{"c1", "a", 0, 5, 105, 106},
		{"c1", "b", 200, 205, 305, 306},
		{"c1", "c", 400, 405, 505, 506},
		{"c3", "a", 1000, 1005, 1105, 1106},
		{"c3", "b", 1000, 1005, 1105, 1106},
		{"c3", "c", 1000, 2005, 2105, 2106},
	})
	l := BlackBox(in).Levels[1]
	bbNear(t, "c3 parallelism", l.Parallelism, 0.300/0.200, 1e-6)
	bbNear(t, "c3 held share", l.HeldShare, 0.200/1.106, 1e-6)
	bbNear(t, "c3 throughput", l.ReqS, 3/1.106, 1e-6)
}

// Batches of four whose members' own services differ (100–250 ms alone),
// each answered within 3 ms, three of them (ShapeBatchGroups): batches of
// up to 4; each member waited for the longest. One batch is too few.
func TestBlackBoxBatch(t *testing.T) {
	rows := []bbRow{}
	alone := map[string]float64{"a": 100, "b": 150, "c": 200, "d": 250}
	t0 := 0.0
	for _, s := range []string{"a", "b", "c", "d"} {
		rows = append(rows, bbRow{"c1", s, t0, t0 + 5, t0 + 5 + alone[s], t0 + 6 + alone[s]})
		t0 += 400
	}
	batches := func(n int) []bbRow {
		rs := slices.Clone(rows)
		for b := range n {
			t0 := 2000 + 400*float64(b)
			for k, s := range []string{"a", "b", "c", "d"} {
				fb := t0 + 255 + float64(k) // all four answered within 3 ms
				rs = append(rs, bbRow{"c4", s, t0, t0 + 5, fb, fb + 1})
			}
		}
		return rs
	}
	if l := BlackBox(bbInput(batches(1))).Levels[1]; l.Shape == ShapeBatch {
		t.Errorf("c4 with one batch: shape %q %d, want no batches named (groups %v)", l.Shape, l.ShapeN, l.Groups)
	}
	bb := BlackBox(bbInput(batches(ShapeBatchGroups)))
	l := bb.Levels[1]
	if l.Shape != ShapeBatch || l.ShapeN != 4 {
		t.Errorf("c4 shape %q %d, want batches of up to 4 (groups %v)", l.Shape, l.ShapeN, l.Groups)
	}
	bbNear(t, "grouped share", l.Groups.GroupedShare, 1, 1e-9)
	bbNear(t, "batch share", l.Groups.BatchShare, 1, 1e-9)
	if l.Groups.Sizes[4] != ShapeBatchGroups || l.Groups.Batches != ShapeBatchGroups {
		t.Errorf("group sizes %v, %d batches, want %d of 4", l.Groups.Sizes, l.Groups.Batches, ShapeBatchGroups)
	}
	// a waited 250+0 − 100 = 150 ms, d 253 − 250 = 3 ms
	bbNear(t, "a's wait", bb.Requests[4].States[bWait], 0.150, 1e-6)
	bbNear(t, "d's wait", bb.Requests[7].States[bWait], 0.003, 1e-6)
}

// Equal services ending together are no batch: two workers that started
// together (at most 2 in service) end together too.
func TestBlackBoxEqualServicesNoBatch(t *testing.T) {
	rows := []bbRow{{"c1", "a", 0, 5, 105, 106}, {"c1", "b", 200, 205, 305, 306}}
	t0 := 1000.0
	for k := 0; k < 4; k++ { // c=4, two at a time, 100 ms each: pairs end together
		for _, s := range []string{"a", "b"} {
			start := 1000.0
			fb := t0 + 105
			rows = append(rows, bbRow{"c4", s, start, start + 5, fb, fb + 1})
		}
		t0 += 100
	}
	bb := BlackBox(bbInput(rows))
	l := bb.Levels[1]
	if l.Shape == ShapeBatch {
		t.Errorf("equal services ending in pairs read as batches (groups %+v)", l.Groups)
	}
	if l.Shape != ShapeAtMost || l.ShapeN != 2 {
		t.Errorf("shape %q %d, want at most 2 (parallelism %.2f)", l.Shape, l.ShapeN, l.Parallelism)
	}
}

// A batch's GPU work runs while its members wait, before any one's service
// alone begins: batches of four (60–120 ms alone each) take 300 ms, the GPU
// 90 % busy over the first 180 ms and 10 % over the last 120 ms, which is
// where every member's service alone lies. NVML over the time the server
// held requests reads (180·90 + 120·10)/300 = 58 %; over the services
// alone it read 10 % and named a GPU-bound batch host-bound.
func TestBlackBoxGPUOverHeldTime(t *testing.T) {
	alone := map[string]float64{"a": 60, "b": 80, "c": 100, "d": 120}
	rows := []bbRow{}
	t0 := 0.0
	for _, s := range []string{"a", "b", "c", "d"} {
		rows = append(rows, bbRow{"c1", s, t0, t0 + 5, t0 + 5 + alone[s], t0 + 6 + alone[s]})
		t0 += 400
	}
	var gpu []bundle.GPURecord
	for b := range ShapeBatchGroups {
		t0 := 2000 + 400*float64(b)
		for k, s := range []string{"a", "b", "c", "d"} {
			fb := t0 + 305 + float64(k)
			rows = append(rows, bbRow{"c4", s, t0, t0 + 5, fb, fb + 1})
		}
		for ms := 10.0; ms <= 400; ms += 10 { // one sample a 10 ms, at its period's end
			u := 0.0
			switch {
			case ms <= 5:
			case ms <= 185:
				u = 90
			case ms <= 305:
				u = 10
			}
			gpu = append(gpu, bundle.GPURecord{GPUHead: bundle.GPUHead{TS: bbBase + int64((t0+ms)*1e6), Kind: "util"},
				GPUUtil: &bundle.GPUUtil{UtilPct: u}})
		}
	}
	in := bbInput(rows)
	in.GPU = gpu
	l := BlackBox(in).Levels[1]
	if l.Shape != ShapeBatch {
		t.Fatalf("c4 shape %q, want batches (groups %v)", l.Shape, l.Groups)
	}
	bbNear(t, "GPU busy", l.GPUBusy, 0.58, 0.02)
}

// Two threads that take turns on one core (each on a CPU every other
// 10 ms bin) against two that run at once: over c2's held time (1005 to
// 1305 ms) the first use one core with no overlap, the second two cores,
// half of their time beyond the first core. Computed by hand.
func TestBlackBoxThreadsTakingTurns(t *testing.T) {
	bins := func(tid int, on func(k int) bool) bundle.ThreadBins { return bbBins(7, tid, "generate", 40, on) }
	for _, tc := range []struct {
		name           string
		b              func(k int) bool
		cores, overlap float64
	}{
		{"turns", func(k int) bool { return k%2 == 1 }, 1, 0},
		{"together", func(int) bool { return true }, 2, 0.5},
	} {
		in := bbInput(bbSerial)
		in.Bins = []bundle.ThreadBins{bins(8, func(k int) bool { return k%2 == 0 }), bins(9, tc.b)}
		if tc.name == "together" {
			in.Bins[0] = bins(8, tc.b)
		}
		l := BlackBox(in).Levels[1]
		bbNear(t, tc.name+" cores", l.CoresHeld, tc.cores, 1e-9)
		bbNear(t, tc.name+" overlap", l.Overlap, tc.overlap, 1e-9)
		if l.BusyThreads != 2 {
			t.Errorf("%s: %d threads with a tenth of the CPU time, want 2", tc.name, l.BusyThreads)
		}
	}
}

// A co-runner in the server's tree, on a CPU as much through the service
// as the serving thread but with no request in the server too, is not the
// serving thread: bbSerial's c2 requests are in the server from 1005 to
// 1305 ms, and the pass's bins run from 1000 to 1500 ms.
func TestBlackBoxServingThreadFollowsTheService(t *testing.T) {
	in := bbInput(bbSerial)
	bins := func(tid int, name string, on func(k int) bool) bundle.ThreadBins {
		return bbBins(tid, tid, name, 50, on)
	}
	serving := func(k int) bool { return k < 31 }
	for _, order := range [][2]int{{8, 9}, {9, 8}} { // the tie-break by tid either way
		in.Bins = []bundle.ThreadBins{
			bins(order[0], "generate", serving),
			bins(order[1], "contend", func(int) bool { return true }),
		}
		bb := BlackBox(in)
		for _, q := range bb.Requests[2:] {
			if q.TID != int64(order[0]) {
				t.Errorf("generate as tid %d: request %d split by thread %d", order[0], q.Index, q.TID)
			}
		}
		// no request in the server: 1000–1005 and 1305–1500 ms, generate
		// on a CPU 10 ms of those 200; in service all the time
		bbNear(t, "generate's rate with none in the server, of its rate in service", bb.Levels[1].ServingRestShare, 0.05, 1e-9)
	}
	// A serving thread that spins while idle (SGLang's scheduler) and is
	// on a CPU half its service keeps that weight against a helper on a
	// CPU a fifth of the service and never outside it: its excess is
	// none, not a penalty.
	in.Bins = []bundle.ThreadBins{
		bins(8, "generate", func(k int) bool { return k >= 31 || k%2 == 0 }),
		bins(9, "helper", func(k int) bool { return k < 31 && k%5 == 0 }),
	}
	bb := BlackBox(in)
	for _, q := range bb.Requests[2:] {
		if q.TID != 8 {
			t.Errorf("spinning generate: request %d split by thread %d", q.Index, q.TID)
		}
	}
	// on a CPU all the time none was in the server, half its service
	bbNear(t, "spinning generate's rest share", bb.Levels[1].ServingRestShare, 2, 1e-9)
	// A server asleep through its service beside a busy child: the child
	// is the only thread busy in service and stands for the server, and
	// the level says it was as busy with none in the server.
	in.Bins = []bundle.ThreadBins{
		bins(8, "generate", func(int) bool { return false }),
		bins(9, "contend", func(int) bool { return true }),
	}
	bb = BlackBox(in)
	for _, q := range bb.Requests[2:] {
		if q.TID != 9 {
			t.Errorf("sleeping server: request %d split by thread %d, want the busy child", q.Index, q.TID)
		}
	}
	bbNear(t, "the busy child's rest share", bb.Levels[1].ServingRestShare, 1, 1e-9)
	if l := BlackBox(bbInput(bbSerial)).Levels[1]; l.ServingRestShare != -1 {
		t.Errorf("no bins: rest share %g, want -1 (not known)", l.ServingRestShare)
	}
}
